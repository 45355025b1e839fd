"""Ask the served vision-language model about an image: through the OpenAI front with the `openai` SDK
(a data: URL content part, streamed), or straight to tt_llm with tritonclient over gRPC (vllm_backend's
`image` input: the base64 file beside a `text_input` that holds the model's image placeholder).

    .venv/bin/python client_examples/image_chat.py photo.png "What is in this picture?"
    .venv/bin/python client_examples/image_chat.py photo.png "What is in this picture?" --grpc \\
        --prompt-format "USER: <image>\\n{question}\\nASSISTANT:"

The default model is text-only and refuses images; serve a vision-language one (README, Images).
"""

from __future__ import annotations

import argparse
import base64
import json
import mimetypes
import queue
from pathlib import Path
from typing import Any

import numpy as np


def via_openai(args: argparse.Namespace, data: bytes) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=args.base_url, api_key="unused")
    model = client.models.list().data[0].id
    kind = mimetypes.guess_type(args.image)[0] or "image/png"
    url = f"data:{kind};base64," + base64.b64encode(data).decode("ascii")
    content: Any = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": args.question}]
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}],
                                            max_tokens=args.max_tokens, temperature=0, stream=True)
    for chunk in stream:
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
    print()


def via_grpc(args: argparse.Namespace, data: bytes) -> None:
    import tritonclient.grpc as grpcclient

    def tensor(name: str, value: np.ndarray) -> grpcclient.InferInput:
        item = grpcclient.InferInput(name, list(value.shape), "BYTES" if value.dtype == object else "BOOL")
        item.set_data_from_numpy(value)
        return item

    inputs = [tensor("text_input", np.array([args.prompt_format.format(question=args.question).encode()],
                                            dtype=object)),
              tensor("image", np.array([base64.b64encode(data)], dtype=object)),
              tensor("sampling_parameters", np.array([json.dumps(
                  {"temperature": 0, "max_tokens": args.max_tokens}).encode()], dtype=object)),
              tensor("stream", np.array([True]))]
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(args.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("tt_llm", inputs, enable_empty_final_response=True)
    try:
        while True:
            result, error = results.get(timeout=600)
            if error is not None:
                raise SystemExit(f"error: {error}")
            text = result.as_numpy("text_output")
            if text is not None:
                print(text.reshape(-1)[0].decode("utf-8"), end="", flush=True)
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
    finally:
        client.stop_stream()
    print()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("image", help="a PNG, JPEG or WebP file")
    parser.add_argument("question")
    parser.add_argument("--base-url", default="http://127.0.0.1:9000/v1")
    parser.add_argument("--grpc", action="store_true",
                        help="to tt_llm over gRPC (tritonclient), not through the front")
    parser.add_argument("--grpc-url", default="127.0.0.1:8001")
    parser.add_argument("--prompt-format", default="USER: <image>\n{question}\nASSISTANT:",
                        help="--grpc: the prompt, with the model's image placeholder (LLaVA's <image>)")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    data = Path(args.image).read_bytes()
    (via_grpc if args.grpc else via_openai)(args, data)


if __name__ == "__main__":
    main()
