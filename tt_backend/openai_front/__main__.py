"""Run the OpenAI front: `python -m tt_backend.openai_front --port 9000 --triton-url 127.0.0.1:8001`."""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

import jinja2
import uvicorn

from tt_backend.models.checkpoint import resolve_model_dir, served_model_name
from tt_backend.openai_front.access import API_KEY_ENV, CorsPolicy, resolve_api_key
from tt_backend.openai_front.app import FrontConfig, create_app
from tt_backend.openai_front.hosts import AllowedHosts
from tt_backend.openai_front.limits import ServerLimits, uvicorn_config
from tt_backend.openai_front.metrics import check_url
from tt_backend.openai_front.tool_calls import with_tools_in_system
from tt_backend.text.tokenizer import load_tokenizer


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--triton-url", default="127.0.0.1:8001", help="tritonserver's gRPC address")
    parser.add_argument("--model", default="", help="tt_llm's `model` option (empty: the default model)")
    parser.add_argument("--served-model-name", default="", help="the name clients send (default: the "
                        "model directory's name)")
    parser.add_argument("--max-model-len", type=int, default=0, help="tt_llm's max_model_len (0: the "
                        "model's maximum positions)")
    parser.add_argument("--max-body-bytes", type=int, default=FrontConfig.max_body_bytes,
                        help="a larger request body is refused with 413, as soon as it passes this")
    parser.add_argument("--timeout-request-body", type=float, default=FrontConfig.body_timeout_s,
                        help="seconds a request body may take to arrive (408 after)")
    parser.add_argument("--limit-concurrency", type=int, default=ServerLimits.limit_concurrency,
                        help="connections and requests at once; a request over it gets 503")
    parser.add_argument("--timeout-keep-alive", type=int, default=ServerLimits.timeout_keep_alive,
                        help="seconds a connection may idle, before its first request or between requests")
    parser.add_argument("--timeout-request-head", type=float, default=ServerLimits.timeout_request_head_s,
                        help="seconds from a request's first byte to the end of its headers (408 after)")
    parser.add_argument("--allowed-hosts", default="",
                        help="comma-separated Host names or addresses answered beside the loopback ones "
                             "(bound to a loopback address, only those are answered; elsewhere, any Host "
                             "unless this is given)")
    parser.add_argument("--api-key", default=None,
                        help=f"requests (all but /health and /metrics) must send `Authorization: Bearer "
                             f"KEY`, else 401; default: the env {API_KEY_ENV} (which keeps the key out "
                             "of the process list), else no key")
    parser.add_argument("--allowed-origins", default="",
                        help="CORS: origins (scheme://host[:port], or *) whose pages may call the front, "
                             "as a JSON list or comma-separated (default: none, no CORS headers)")
    parser.add_argument("--allowed-methods", default="*", help="CORS: methods allowed (default: *)")
    parser.add_argument("--allowed-headers", default="*", help="CORS: request headers allowed (default: *)")
    parser.add_argument("--allow-credentials", action="store_true",
                        help="CORS: let pages send cookies (not with --allowed-origins '*')")
    parser.add_argument("--triton-metrics-url", default=FrontConfig.triton_metrics_url,
                        help="tritonserver's Prometheus endpoint, re-exported on this port as /metrics")
    return parser


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    limits = ServerLimits(args.limit_concurrency, args.timeout_keep_alive, args.timeout_request_head)
    try:  # before the model loads: a bad flag fails in a moment, with usage
        allowed = AllowedHosts.for_bind(args.host, args.allowed_hosts.split(","))
        api_key = resolve_api_key(args.api_key, os.environ)
        cors = CorsPolicy.from_flags(args.allowed_origins, args.allowed_methods, args.allowed_headers,
                                     args.allow_credentials)
        check_url(args.triton_metrics_url)
    except ValueError as exc:
        parser.error(str(exc))
    model_dir = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(model_dir)
    with open(model_dir / "config.json", encoding="utf-8") as f:
        max_len = args.max_model_len or int(json.load(f)["max_position_embeddings"])
    name = args.served_model_name or served_model_name(model_dir)
    config = FrontConfig(args.triton_url, name, max_len, max_body_bytes=args.max_body_bytes,
                         body_timeout_s=args.timeout_request_body, allowed_hosts=allowed, api_key=api_key,
                         cors=cors, triton_metrics_url=args.triton_metrics_url)

    template_takes_tools = "tools" in str(tokenizer.chat_template or "")

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        if tools and not template_takes_tools:  # the template would drop them
            messages, tools = with_tools_in_system(messages, tools), None
        try:
            ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                tokenize=True)
        except jinja2.TemplateError as exc:  # the template refused them (raise_exception, undefined names)
            raise ValueError(f"the chat template: {exc}") from None
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding in transformers 5

    def decode(ids: tuple[int, ...]) -> str:
        return str(tokenizer.decode(list(ids)))

    def encode(text: str) -> list[int]:
        return list(tokenizer(text).input_ids)

    logging.getLogger(__name__).info(  # never the key itself
        "OpenAI front for %s (max_model_len %d) on http://%s:%d, Triton at %s; Host check: %s; API key: %s; "
        "CORS: %s; /metrics from %s", name, max_len, args.host, args.port, args.triton_url,
        "off" if allowed is None else ", ".join(["loopback names", *sorted(allowed.extra)]),
        "off" if api_key is None else "required", "off" if cors is None else cors.describe(),
        args.triton_metrics_url)
    server = uvicorn.Server(uvicorn_config(create_app(config, render, decode, encode), args.host, args.port,
                                           limits))
    server.run()
    if not server.started:  # e.g. the port is taken (uvicorn has logged why)
        raise SystemExit(3)


if __name__ == "__main__":
    main()
