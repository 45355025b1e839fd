"""Start a gRPC stream to tt_llm, cancel it after a few tokens, and show the KV cache freed.

    .venv/bin/python client_examples/cancel_stream.py --after 5
"""

from __future__ import annotations

import argparse
import json
import queue
import time

import numpy as np
import requests
import tritonclient.grpc as grpcclient


def kv_usage(metrics_url: str) -> str:
    for line in requests.get(f"http://{metrics_url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:kv_cache_usage_perc"):
            return line.rsplit(" ", 1)[1]
    return "?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="127.0.0.1:8001")
    parser.add_argument("--metrics-url", default="127.0.0.1:8002")
    parser.add_argument("--after", type=int, default=5, help="cancel after this many responses")
    args = parser.parse_args()

    params = json.dumps({"temperature": 0, "max_tokens": 500, "ignore_eos": True})
    prompt = np.array([b"Tell me a very long story."], dtype=np.object_)
    sampling = np.array([params.encode()], dtype=np.object_)
    inputs = []
    for name, value, dtype in (("text_input", prompt, "BYTES"), ("sampling_parameters", sampling, "BYTES"),
                               ("stream", np.array([True]), "BOOL")):
        tensor = grpcclient.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(args.url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer("tt_llm", inputs)
    for _ in range(args.after):
        result, error = responses.get(timeout=120)
        if error is not None:
            raise SystemExit(f"error: {error}")
        print(result.as_numpy("text_output")[0].decode(), end="", flush=True)
    print(f"\n[KV cache in use while streaming: {kv_usage(args.metrics_url)}]")
    client.stop_stream(cancel_requests=True)  # cancels the request on the server
    time.sleep(0.5)
    print(f"[cancelled; KV cache in use now: {kv_usage(args.metrics_url)}]")


if __name__ == "__main__":
    main()
