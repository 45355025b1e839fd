"""Cancellation latency through a running tritonserver.

While `--load` gRPC streams decode, start one more stream, cancel it after 3 responses, and
poll `vllm:request_success_total{finished_reason="abort"}` every 5 ms until it moves: an upper
bound on cancel → engine abort (KV freed, final CANCELLED response sent).

    .venv/bin/python bench/cancel_latency.py --load 8 --trials 5
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time

import requests
import tritonclient.grpc as grpcclient
from grpc_inputs import text_stream_inputs

ABORTS = 'vllm:request_success_total{finished_reason="abort",lane="0",model="tt_llm"}'


def aborts(metrics_url: str) -> float:
    for line in requests.get(f"http://{metrics_url}/metrics", timeout=10).text.splitlines():
        if line.startswith(ABORTS):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError("no abort counter on the metrics port")


Stream = tuple[grpcclient.InferenceServerClient, queue.Queue]


def open_stream(url: str, prompt: str, max_tokens: int) -> Stream:
    inputs = text_stream_inputs(prompt, {"temperature": 0, "max_tokens": max_tokens, "ignore_eos": True})
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    client.async_stream_infer("tt_llm", inputs, enable_empty_final_response=True)
    return client, events


def drain(client: grpcclient.InferenceServerClient, events: queue.Queue) -> None:
    while True:
        result, error = events.get(timeout=600)
        if error is not None or result.get_response().parameters["triton_final_response"].bool_param:
            client.stop_stream()
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="127.0.0.1:8001")
    parser.add_argument("--metrics-url", default="127.0.0.1:8002")
    parser.add_argument("--load", type=int, default=8, help="streams decoding meanwhile")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    background = [open_stream(args.url, f"Story {i}:", 60 * args.trials) for i in range(args.load)]
    threads = [threading.Thread(target=drain, args=stream) for stream in background]
    for t in threads:
        t.start()
    time.sleep(2)
    latencies = []
    for trial in range(args.trials):
        client, events = open_stream(args.url, f"Cancel me {trial}", 500)
        for _ in range(3):
            events.get(timeout=120)
        before = aborts(args.metrics_url)
        start = time.monotonic()
        client.stop_stream(cancel_requests=True)
        while aborts(args.metrics_url) == before:
            time.sleep(0.005)
        latencies.append((time.monotonic() - start) * 1000)
    for t in threads:
        t.join()
    print(f"cancel -> abort counted, {args.load} streams decoding: "
          f"{', '.join(f'{x:.0f}' for x in latencies)} ms (median {statistics.median(latencies):.0f})")


if __name__ == "__main__":
    main()
