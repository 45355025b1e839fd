"""Single-stream decode speed through a running tritonserver (gRPC stream to tt_llm).

Sends one request at a time (prompt of ~100 tokens, `max_tokens` tokens with ignore_eos) and
prints time to first token and decode tokens/s (tokens after the first / time after the first).

    .venv/bin/python bench/single_stream.py --url 127.0.0.1:8001 --runs 3
"""

from __future__ import annotations

import argparse
import queue
import statistics
import time

import tritonclient.grpc as grpcclient
from grpc_inputs import text_stream_inputs

PROMPT = ("Tell me a long story about a lighthouse keeper who finds a message in a bottle, "
          "the storm that followed, the village that gathered on the cliffs, and the ship "
          "that came home at dawn. Describe the sea, the light, the people and their voices "
          "in rich detail, and do not stop early.")


def one_run(url: str, max_tokens: int) -> tuple[float, float, int]:
    inputs = text_stream_inputs(PROMPT, {"temperature": 0, "max_tokens": max_tokens, "ignore_eos": True},
                                return_num_output_tokens=True)
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((time.perf_counter(), result, error)))
    start = time.perf_counter()
    client.async_stream_infer("tt_llm", inputs, enable_empty_final_response=True)
    first = None
    tokens = 0
    while True:
        now, result, error = events.get(timeout=600)
        if error is not None:
            raise RuntimeError(error)
        n = result.as_numpy("num_output_tokens")
        if n is not None:
            tokens += int(n[0])
            first = first or now
        if result.get_response().parameters["triton_final_response"].bool_param:
            end = now
            break
    client.stop_stream()
    assert first is not None
    return first - start, (tokens - 1) / (end - first), tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="127.0.0.1:8001")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    one_run(args.url, 8)  # warm up
    results = [one_run(args.url, args.max_tokens) for _ in range(args.runs)]
    ttft = statistics.median(r[0] for r in results)
    tps = statistics.median(r[1] for r in results)
    print(f"single stream: {results[0][2]} tokens, TTFT p50 {ttft * 1000:.1f} ms, "
          f"decode {tps:.1f} tok/s ({1000 / tps:.1f} ms/token), runs={args.runs}")


if __name__ == "__main__":
    main()
