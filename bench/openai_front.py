"""What the OpenAI front costs: the same streamed greedy requests through the front (an OpenAI
completions stream, the client `bench/compare.py` uses for vLLM) and straight to `tt_llm` over
Triton's gRPC stream (tritonclient), on one server, at each concurrency, alternating the two paths
`--rounds` times. Prints output tok/s, TTFT p50 and ITL p50 of each (the median over rounds) and
the ratio front/direct.

    .venv/bin/python bench/openai_front.py
    .venv/bin/python bench/openai_front.py --concurrency 1,8,32 --rounds 3
"""

from __future__ import annotations

import argparse
import functools
import json
import queue
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import measure, prompt_text, served_model, start_ours, stop, stream_openai  # noqa: E402


def stream_grpc(port: int, prompt: str, max_tokens: int) -> tuple[list[float], int]:
    """One `tt_llm` stream over gRPC (vllm_backend schema): arrival times of text and the tokens."""
    def tensor(name: str, value: np.ndarray, dtype: str) -> grpcclient.InferInput:
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        return t

    params = json.dumps({"temperature": 0, "max_tokens": max_tokens, "ignore_eos": True})
    inputs = [tensor("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
              tensor("sampling_parameters", np.array([params.encode()], dtype=np.object_), "BYTES"),
              tensor("stream", np.array([True]), "BOOL"),
              tensor("exclude_input_in_output", np.array([True]), "BOOL"),
              tensor("return_num_output_tokens", np.array([True]), "BOOL")]
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    client.start_stream(callback=lambda result, error: responses.put((time.perf_counter(), result, error)))
    times, tokens = [], 0
    try:
        client.async_stream_infer("tt_llm", inputs, enable_empty_final_response=True)
        while True:
            at, result, error = responses.get(timeout=900)
            if error is not None:
                raise RuntimeError(str(error))
            text = result.as_numpy("text_output")
            if text is not None and text[0]:
                times.append(at)
            count = result.as_numpy("num_output_tokens")
            tokens += 0 if count is None else int(count[0])
            if result.get_response().parameters["triton_final_response"].bool_param:
                return times, tokens
    finally:
        client.stop_stream()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=0, help="per concurrency (default: max(3, 2 x c))")
    parser.add_argument("--port", type=int, default=18300)
    args = parser.parse_args()
    from tt_backend.models.checkpoint import resolve_model_dir
    from tt_backend.text.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(resolve_model_dir(""))
    grpc, front = args.port + 1, args.port + 3
    proc = start_ours(args.port, log_name="openai_front_server.log")
    try:
        model = served_model(front)
        paths = {"front": (functools.partial(stream_openai, model=model), front), "grpc": (stream_grpc, grpc)}
        warm = [prompt_text(tokenizer, args.prompt_tokens, 999)]
        for stream, port in paths.values():
            measure(stream, port, warm, 1, 8)
        print(f"{args.prompt_tokens} prompt tokens, {args.max_tokens} output tokens (ignore_eos), "
              f"median of {args.rounds} alternating rounds")
        print("conc |   tok/s front / grpc = ratio | TTFT p50 ms front / grpc = ratio | "
              "ITL p50 ms front / grpc = ratio")
        for c in (int(x) for x in args.concurrency.split(",")):
            n = args.requests or max(3, 2 * c)
            prompts = [prompt_text(tokenizer, args.prompt_tokens, seed) for seed in range(n)]
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
            for _ in range(args.rounds):
                for name, (stream, port) in paths.items():
                    runs[name].append(measure(stream, port, prompts, c, args.max_tokens).summary())
            cells = []
            for key in ("tok_s", "ttft_p50_ms", "itl_p50_ms"):
                f, g = (statistics.median(r[key] for r in runs[name]) for name in ("front", "grpc"))
                cells.append(f"{f:9.1f} / {g:7.1f} = {f / g:5.2f}")
            print(f"{c:>4} | " + " | ".join(cells), flush=True)
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
