"""Our engine in this process, past tritonserver and the OpenAI front: the same workload as
bench/compare.py (its prompts of `--prompt-tokens` tokens, `--max-tokens` greedy output tokens with
ignore_eos, prefix caching off), `--concurrency` requests at once, `--waves` times. Prints output
tok/s, TTFT p50 and inter-token latency p50 per concurrency.

Run beside `bench/compare.py --only ours` on the same machine, the two give what the serving path
costs (Triton, the response thread, the front and the client take CPU from the step's threads):
    .venv/bin/python bench/in_process.py --concurrency 8,32
    .venv/bin/python bench/compare.py --only ours --concurrency 8,32 --no-direct
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from compare import prompt_text

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.tokenizer import load_tokenizer


def run(engine: Any, prompts: list[list[int]], concurrency: int, max_tokens: int) -> dict[str, float]:
    """Each wave: `concurrency` requests added at once; the next wave once they all finished."""
    done = threading.Semaphore(0)
    tokens = [0]
    sent: dict[str, float] = {}
    last: dict[str, float] = {}
    ttft: list[float] = []
    itl: list[float] = []

    def on_output(out: Any) -> None:  # the engine thread
        now = time.perf_counter()
        tokens[0] += len(out.new_token_ids)
        if out.new_token_ids:
            (itl.append(now - last[out.request_id]) if out.request_id in last
             else ttft.append(now - sent[out.request_id]))
            last[out.request_id] = now
        if out.finished:
            done.release()

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0)
    start = time.perf_counter()
    for wave in range(0, len(prompts), concurrency):
        batch = prompts[wave:wave + concurrency]
        for i, prompt in enumerate(batch):
            request_id = f"c{concurrency}-{wave + i}"
            sent[request_id] = time.perf_counter()
            engine.add_request(request_id, prompt, params, on_output)
        for _ in batch:
            assert done.acquire(timeout=1800)
    seconds = time.perf_counter() - start
    return {"tok_s": tokens[0] / seconds, "ttft_p50_ms": 1e3 * statistics.median(ttft),
            "itl_p50_ms": 1e3 * statistics.median(itl)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--waves", type=int, default=2, help="(compare.py's default: 2 x c requests)")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    tokenizer = load_tokenizer(resolve_model_dir(""))
    engine = build_engine(EngineConfig(model="", enable_prefix_caching=False))
    engine.start()
    try:
        print(f"{args.prompt_tokens} prompt tokens, {args.max_tokens} output tokens (ignore_eos), greedy, "
              "prefix caching off, the engine in this process")
        print(f"{'conc':>4} {'tok/s':>8} {'TTFT p50 ms':>12} {'ITL p50 ms':>11}")
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            seeds = range(concurrency * args.waves)
            texts = [prompt_text(tokenizer, args.prompt_tokens, seed) for seed in seeds]
            prompts = [tokenizer(text, add_special_tokens=False).input_ids for text in texts]
            r = run(engine, prompts, concurrency, args.max_tokens)
            print(f"{concurrency:>4} {r['tok_s']:>8.1f} {r['ttft_p50_ms']:>12.1f} {r['itl_p50_ms']:>11.1f}",
                  flush=True)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
