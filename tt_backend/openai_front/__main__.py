"""Run the OpenAI front: `python -m tt_backend.openai_front --port 9000 --triton-url 127.0.0.1:8001`."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

import uvicorn

from tt_backend.models.checkpoint import resolve_model_dir, served_model_name
from tt_backend.openai_front.app import FrontConfig, create_app
from tt_backend.openai_front.tool_calls import with_tools_in_system
from tt_backend.text.tokenizer import load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--triton-url", default="127.0.0.1:8001", help="tritonserver's gRPC address")
    parser.add_argument("--model", default="", help="tt_llm's `model` option (empty: the default model)")
    parser.add_argument("--served-model-name", default="", help="the name clients send (default: the "
                        "model directory's name)")
    parser.add_argument("--max-model-len", type=int, default=0, help="tt_llm's max_model_len (0: the "
                        "model's maximum positions)")
    parser.add_argument("--max-body-bytes", type=int, default=4 << 20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model_dir = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(model_dir)
    with open(model_dir / "config.json", encoding="utf-8") as f:
        max_len = args.max_model_len or int(json.load(f)["max_position_embeddings"])
    name = args.served_model_name or served_model_name(model_dir)
    config = FrontConfig(args.triton_url, name, max_len, max_body_bytes=args.max_body_bytes)

    template_takes_tools = "tools" in str(tokenizer.chat_template or "")

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        if tools and not template_takes_tools:  # the template would drop them
            messages, tools = with_tools_in_system(messages, tools), None
        ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding in transformers 5

    def decode(ids: tuple[int, ...]) -> str:
        return str(tokenizer.decode(list(ids)))

    def encode(text: str) -> list[int]:
        return list(tokenizer(text).input_ids)

    logging.getLogger(__name__).info("OpenAI front for %s (max_model_len %d) on http://%s:%d, Triton at %s",
                                     name, max_len, args.host, args.port, args.triton_url)
    # uvloop and httptools: at concurrency 32 the front took 6-22% onto TTFT p50 with asyncio's own
    # loop and h11 (socket writes and the selector, by py-spy), 1% with these (bench/openai_front.py).
    uvicorn.run(create_app(config, render, decode, encode), host=args.host, port=args.port,
                log_level="warning", loop="uvloop", http="httptools")


if __name__ == "__main__":
    main()
