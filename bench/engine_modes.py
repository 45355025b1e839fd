"""Greedy outputs and throughput of the engine under each execution setting, on any device.

Runs the same greedy requests (queued before the engine starts, so every setting batches them
the same way) with trace_mode none / decode_only / all and async_scheduling off / on; prints
build (warmup included) time, output tokens/s and step counts of each, and whether its tokens
equal the eager synchronous run's. Exits 1 if any differ.

    .venv/bin/python bench/engine_modes.py --dtype float32
    python3 bench/engine_modes.py --device cuda --random-weights-dir /tmp/smollm2-random
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

SETTINGS = (("none", False), ("decode_only", False), ("all", False), ("decode_only", True), ("all", True))
PROMPTS = ("Name three colours.", "What is the capital of France?", "Write a haiku about the sea.",
           "Count to ten.", "Translate 'good night' into French.", "Say OK.")


def write_random_checkpoint(out: Path, tokenizer_dir: Path) -> None:
    """SmolLM2-135M's shapes with random weights, plus the tokenizer files found in `tokenizer_dir`."""
    import torch
    from decode import SMOLLM2_135M, random_model  # bench/decode.py
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model = random_model(torch.device("cpu"), torch.float32)
    state = {k: v.contiguous() for k, v in model.module.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(SMOLLM2_135M), encoding="utf-8")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"):
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, out / name)


def run(model: str, device: str, dtype: str, trace_mode: str, async_scheduling: bool, max_tokens: int
        ) -> tuple[dict[str, list[int]], dict[str, Any]]:
    from tt_backend.assembly import build_engine
    from tt_backend.config import EngineConfig
    from tt_backend.sampling.params import SamplingParams
    from tt_backend.text.tokenizer import encode_chat

    start = time.perf_counter()
    engine = build_engine(EngineConfig(model=model, device=device, dtype=dtype,  # type: ignore[arg-type]
                                       max_model_len=1024, trace_mode=trace_mode,  # type: ignore[arg-type]
                                       async_scheduling=async_scheduling))
    built = time.perf_counter() - start
    outputs: dict[str, list[int]] = {}
    done = threading.Semaphore(0)

    def on_output(out: Any) -> None:
        outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
        if out.finished:
            done.release()

    for i, prompt in enumerate(PROMPTS):
        engine.add_request(f"r{i}", encode_chat(engine.tokenizer, prompt),
                           SamplingParams(max_tokens=max_tokens + 4 * i), on_output)
    start = time.perf_counter()
    engine.start()
    for _ in PROMPTS:
        assert done.acquire(timeout=1800)
    elapsed = time.perf_counter() - start
    engine.shutdown()
    n = sum(len(v) for v in outputs.values())
    return outputs, {"build_s": built, "tok_s": n / elapsed, "tokens": n,
                     "traced_steps": engine.runner.traced_steps, "eager_steps": engine.runner.eager_steps,
                     "drains": engine.pipeline.decode_drains}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="model dir or GGUF (default: the default model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--random-weights-dir", type=Path,
                        help="write a random-weight SmolLM2-135M here (tokenizer from --tokenizer-dir), "
                        "and use it")
    parser.add_argument("--tokenizer-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    model = args.model
    if args.random_weights_dir is not None:
        write_random_checkpoint(args.random_weights_dir, args.tokenizer_dir or args.random_weights_dir)
        model = str(args.random_weights_dir)
    baseline: dict[str, list[int]] | None = None
    report = {}
    ok = True
    for trace_mode, async_scheduling in SETTINGS:
        outputs, stats = run(model, args.device, args.dtype, trace_mode, async_scheduling, args.max_tokens)
        baseline = baseline if baseline is not None else outputs
        same = outputs == baseline
        ok &= same
        name = f"trace_mode={trace_mode} async={'on' if async_scheduling else 'off'}"
        print(f"{name:34} build {stats['build_s']:6.1f} s  {stats['tok_s']:7.1f} tok/s  traced steps "
              f"{stats['traced_steps']:4}  eager steps {stats['eager_steps']:4}  drains {stats['drains']:3}  "
              f"{'identical' if same else 'DIFFERENT'}", flush=True)
        report[name] = {**stats, "identical": same}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
