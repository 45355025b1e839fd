"""The native CPU kernels against the torch path, side by side.

Part 1: one layer's decode attention (SmolLM2-135M's heads: 9 query, 3 kv, head size 64), the
paged kernel against gather + SDPA, for each batch and context, rows on random blocks of a
4096-block cache: median ms of each and the ratio.
Part 2: the default model's traced decode step (`bench/decode.py`'s step_times) and an eager
prefill step (8 rows of 100 tokens) with `cpu_kernels=torch` and `native`, and whether the greedy
tokens agree.

    LD_PRELOAD=.venv/lib/libiomp5.so PYTHONPATH=.:bench .venv/bin/python bench/cpu_kernels.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from decode import step_times

from tt_backend.config import EngineConfig
from tt_backend.devices.cpu_kernels import load_kernels, paged_decode_attention
from tt_backend.devices.torch_device import torch_dtype
from tt_backend.engine.builder import build_runner
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.models.llama import gather_kv
from tt_backend.models.loader import LoadedModel, load_model
from tt_backend.runtime.plan import PlannedRow, StepPlan

BLOCK, HEADS, KV_HEADS, HEAD_DIM, CACHE_BLOCKS = 16, 9, 3, 64, 4096


def median_ms(fn: Callable[[], torch.Tensor], repeats: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def layer_attention(batch: int, context: int, dtype: torch.dtype, repeats: int) -> tuple[float, float, float]:
    width = -(-context // BLOCK)
    kv = torch.randn(2, CACHE_BLOCKS, BLOCK, KV_HEADS, HEAD_DIM).to(dtype)
    tables = torch.randperm(CACHE_BLOCKS)[: batch * width].view(batch, width)
    lens = torch.full((batch,), context)
    positions = lens - 1
    q = torch.randn(batch, HEADS, HEAD_DIM).to(dtype)
    mask = torch.zeros(batch, 1, 1, width * BLOCK, dtype=dtype)  # the model's additive mask (all visible)

    def portable() -> torch.Tensor:
        keys, values = gather_kv(kv, tables)
        return F.scaled_dot_product_attention(q[:, :, None], keys, values, attn_mask=mask, enable_gqa=True)

    def native() -> torch.Tensor:
        return paged_decode_attention(q, kv, tables, lens, positions, 0, HEAD_DIM ** -0.5)

    diff = (portable()[:, :, 0].float() - native().float()).abs().max().item()
    return median_ms(portable, repeats), median_ms(native, repeats), diff


def prefill_ms(model: LoadedModel, rows: int, tokens: int, dtype: str,
               repeats: int) -> tuple[float, torch.Tensor]:
    """Median ms of one eager prefill step of `rows` fresh prompts of `tokens` tokens, and its logits."""
    blocks = -(-tokens // BLOCK)
    config = EngineConfig(dtype=dtype, device="cpu", max_model_len=blocks * BLOCK, max_num_seqs=rows,  # type: ignore[arg-type]
                          num_kv_blocks=rows * blocks + 1, trace_mode="none").resolve_for_model(8192, 1)
    runner = build_runner(config, model.module, model.capabilities, model.spec, torch_dtype(dtype),
                          torch.device("cpu"))
    runner.allocate()
    plan = StepPlan("prefill", tuple(PlannedRow(tuple(range(1000 + 7 * i, 1000 + 7 * i + tokens)), 0,
                                                tuple(range(i * blocks, (i + 1) * blocks)), True)
                                     for i in range(rows)))
    logits = runner.execute(plan)
    ms = median_ms(lambda: runner.execute(plan), repeats)
    runner.close()
    return ms, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--contexts", default="128,256,1024")
    parser.add_argument("--step-context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prefill-rows", type=int, default=8)
    parser.add_argument("--prefill-tokens", type=int, default=100)
    args = parser.parse_args()
    error = load_kernels()
    if error is not None:
        raise SystemExit(f"native kernels unavailable: {error}")
    dtype = torch_dtype(args.dtype)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"one layer's decode attention, {args.dtype}, median of {args.repeats}")
    print(f"{'batch':>5} {'context':>7} {'gather+SDPA ms':>15} {'native ms':>10} {'ratio':>6} "
          f"{'max |diff|':>11}")
    for batch in batches:
        for context in (int(c) for c in args.contexts.split(",")):
            portable, native, diff = layer_attention(batch, context, dtype, args.repeats)
            print(f"{batch:>5} {context:>7} {portable:>15.3f} {native:>10.3f} {portable / native:>6.2f} "
                  f"{diff:>11.2g}", flush=True)
    model_dir = resolve_model_dir("")
    models = {name: load_model(model_dir, dtype, torch.device("cpu"), kernels=name)  # type: ignore[arg-type]
              for name in ("torch", "native")}
    print(f"\ntraced decode step of the default model, context {args.step_context}, median of {args.steps}")
    print(f"{'batch':>5} {'torch ms':>9} {'native ms':>10} {'ratio':>6} {'same greedy tokens':>19}")
    for batch in batches:
        results = {name: step_times(model, "decode_only", batch, args.step_context, args.steps, args.dtype,
                                    "cpu") for name, model in models.items()}
        (t_ms, t_logits), (n_ms, n_logits) = results["torch"], results["native"]
        same = int((t_logits.argmax(-1) == n_logits.argmax(-1)).sum())
        print(f"{batch:>5} {t_ms * 1e3:>9.2f} {n_ms * 1e3:>10.2f} {t_ms / n_ms:>6.2f} {same:>15}/{batch}",
              flush=True)
    print(f"\neager prefill step of the default model, {args.prefill_rows} rows x {args.prefill_tokens} "
          "tokens")
    prefill = {name: prefill_ms(model, args.prefill_rows, args.prefill_tokens, args.dtype, 10)
               for name, model in models.items()}
    (t_ms, t_logits), (n_ms, n_logits) = prefill["torch"], prefill["native"]
    same = int((t_logits.argmax(-1) == n_logits.argmax(-1)).sum())
    print(f"torch {t_ms:.1f} ms, native {n_ms:.1f} ms, ratio {t_ms / n_ms:.2f}, same greedy tokens "
          f"{same}/{args.prefill_rows}")


if __name__ == "__main__":
    main()
