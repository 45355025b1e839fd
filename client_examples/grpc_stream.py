"""Stream tokens from tt_llm over gRPC with tritonclient (vllm_backend schema).

    .venv/bin/python client_examples/grpc_stream.py "What is the capital of France?"
"""

from __future__ import annotations

import argparse
import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("prompt")
    parser.add_argument("--url", default="127.0.0.1:8001")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--raw", action="store_true", help="send the prompt without the chat template")
    args = parser.parse_args()

    prompt = args.prompt
    if not args.raw:  # SmolLM2-Instruct's chat template, as the tokenizer renders it
        prompt = (f"<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                  f"<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n")
    params = {"temperature": args.temperature, "max_tokens": args.max_tokens}

    def tensor(name: str, value: np.ndarray, dtype: str) -> grpcclient.InferInput:
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        return t

    inputs = [
        tensor("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
        tensor("sampling_parameters", np.array([json.dumps(params).encode()], dtype=np.object_), "BYTES"),
        tensor("stream", np.array([True]), "BOOL"),
        tensor("return_finish_reason", np.array([True]), "BOOL"),
    ]
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(args.url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer("tt_llm", inputs, enable_empty_final_response=True)
    while True:
        result, error = responses.get(timeout=300)
        if error is not None:
            sys.exit(f"error: {error}")
        if result.as_numpy("text_output") is not None:
            print(result.as_numpy("text_output")[0].decode(), end="", flush=True)
        reason = result.as_numpy("finish_reason")
        if result.get_response().parameters["triton_final_response"].bool_param:
            print(f"\n[finish_reason: {reason[0].decode() if reason is not None else '-'}]")
            break
    client.stop_stream()


if __name__ == "__main__":
    main()
