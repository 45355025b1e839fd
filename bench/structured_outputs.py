"""What structured outputs cost: output tok/s at each concurrency with no constraint, and with a
JSON schema on half the requests, on one server, alternating the two workloads `--rounds` times.

Every request streams from `tt_llm` (Triton's HTTP generate_stream) exactly `--max-tokens`
tokens: the unconstrained ones ignore EOS, the constrained ones follow a schema (a list of at least
64 short strings) that cannot be complete in fewer, so both workloads generate the same tokens and
the difference is the grammar's cost. A step with a constrained row samples on the host (the
grammar's mask), so the cost shows in the whole batch.

    .venv/bin/python bench/structured_outputs.py
    .venv/bin/python bench/structured_outputs.py --concurrency 8,32 --rounds 3
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import measure, prompt_text, start_ours, stop, stream_tt_llm  # noqa: E402

SCHEMA = {"type": "object", "properties": {"items": {
    "type": "array", "minItems": 64, "items": {"type": "string", "minLength": 2, "maxLength": 20}}},
    "required": ["items"], "additionalProperties": False}


def stream(port: int, prompt: str, max_tokens: int, constrained: bool = False) -> tuple[list[float], int]:
    """One tt_llm stream: arrival times of text and the server's token count."""
    params: dict[str, object] = {"temperature": 0.8, "seed": len(prompt), "max_tokens": max_tokens}
    if constrained:
        params["structured_outputs"] = {"json": SCHEMA}
    else:
        params["ignore_eos"] = True
    return stream_tt_llm(port, prompt, max_tokens, params)


def mixed(constrained: frozenset[str], port: int, prompt: str, max_tokens: int) -> tuple[list[float], int]:
    """The prompts in `constrained` carry the schema."""
    return stream(port, prompt, max_tokens, constrained=prompt in constrained)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="8,32")
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=18500)
    args = parser.parse_args()
    from tt_backend.models.checkpoint import resolve_model_dir
    from tt_backend.text.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(resolve_model_dir(""))
    proc = start_ours(args.port, openai=False, log_name="structured_outputs_server.log")
    try:
        warm = [prompt_text(tokenizer, args.prompt_tokens, 999)]
        measure(functools.partial(stream, constrained=True), args.port, warm, 1, 16)  # compile once
        measure(stream, args.port, warm, 1, 8)
        print(f"{args.prompt_tokens} prompt tokens, up to {args.max_tokens} output tokens, temperature 0.8, "
              f"median of {args.rounds} alternating rounds")
        print("conc |  tok/s plain / half schema = ratio | TTFT p50 ms plain / half schema = ratio")
        for c in (int(x) for x in args.concurrency.split(",")):
            prompts = [prompt_text(tokenizer, args.prompt_tokens, seed) for seed in range(max(4, 2 * c))]
            workloads = {"plain": stream, "half schema": functools.partial(mixed, frozenset(prompts[::2]))}
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in workloads}
            for _ in range(args.rounds):
                for name, fn in workloads.items():
                    runs[name].append(measure(fn, args.port, prompts, c, args.max_tokens).summary())
            cells = []
            for key in ("tok_s", "ttft_p50_ms"):
                plain, half = (statistics.median(r[key] for r in runs[name]) for name in runs)
                cells.append(f"{plain:9.1f} / {half:9.1f} = {half / plain:5.2f}")
            print(f"{c:>4} | " + " | ".join(cells), flush=True)
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
