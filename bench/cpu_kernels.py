"""The native CPU kernels of each instruction-set level against the torch path, side by side.

Part 1: each op of a step at SmolLM2-135M's sizes, per level (`cpu_isa`) and for the torch op it
replaces: median ms. In-process torch's own kernels are not capped (they would be only in a process
started with the caps, as `scripts/serve.sh` starts the server), so the torch column of a low level
runs at the machine's best ISA. Decode attention: one layer (9 query heads, 3 kv heads, head size 64) over
rows on random blocks of a 4096-block cache (hot in the cache), and per layer over 30 layers' own caches
(cold: the KV a B=32 step reads from memory), against gather + SDPA; prefill attention the same for 4
fresh 500-token prompts where the level's dtype takes the native kernel (bf16 at avx512 and up), else
the same gather + SDPA over the causal mask as the torch column. Linear layers: every linear
of one step (30 layers of qkv, o, gate_up, down, and the 49152-row LM head) at 1 and 32 rows, on
the path the level's `dtype=auto` takes (oneDNN prepacked bf16 at avx512 and up, `wide_linear`
below) against torch's fp32 `F.linear`.
Part 2: the default model's traced decode step (`bench/decode.py`'s step_times) and an eager
prefill step (8 rows of 100 tokens) per level with `dtype=auto`, against `cpu_kernels=torch` at the
same dtype, and whether the greedy tokens agree.

    PYTHONPATH=.:bench .venv/bin/python bench/cpu_kernels.py [--levels avx2,portable]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from decode import step_times

from tt_backend.assembly.torch_engine import build_runner
from tt_backend.config import EngineConfig
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.cpu.compute_plan import DTYPES, ComputePlan
from tt_backend.devices.cpu.isa import probe
from tt_backend.devices.cpu.linears import convert_linears
from tt_backend.devices.cpu.logits import use_fp32_logits
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.models.llama import RMSNorm
from tt_backend.models.llama_ops import NativeOps, TorchOps, rotate_half
from tt_backend.models.loader import LoadedModel, load_model
from tt_backend.models.paged_kv import gather_kv, write_kv

BLOCK, HEADS, KV_HEADS, HEAD_DIM, CACHE_BLOCKS = 16, 9, 3, 64, 4096
HIDDEN, INTERMEDIATE, LAYERS, VOCAB = 576, 1536, 30, 49152
STEP_LINEARS = [(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM), (HEADS * HEAD_DIM, HIDDEN),
                (HIDDEN, 2 * INTERMEDIATE), (INTERMEDIATE, HIDDEN)]


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def prefill_attention(plan: ComputePlan, kv: torch.Tensor, g: torch.Generator) -> Callable[[], object]:
    """One layer's attention of 4 fresh 500-token prompts: the native kernel where the model runs it
    (`prefill_attention_fast`), else the model's torch path (gather + SDPA over the causal mask)."""
    k, dtype = plan.kernels, plan.activations
    rows, tokens = 4, 500
    width = -(-tokens // BLOCK)
    tables = torch.randperm(CACHE_BLOCKS, generator=g)[: rows * width].view(rows, width)
    lens = torch.full((rows,), tokens)
    positions = torch.arange(tokens).expand(rows, tokens).contiguous()
    q = torch.randn(rows, tokens, HEADS, HEAD_DIM, generator=g).to(dtype)
    if k is not None and k.prefill_attention_fast(dtype, HEADS, KV_HEADS, HEAD_DIM):
        return lambda: k.paged_prefill_attention(q, kv, tables, lens, positions, 0, HEAD_DIM ** -0.5)
    s = torch.arange(width * BLOCK)
    mask = torch.zeros(rows, 1, tokens, width * BLOCK, dtype=dtype).masked_fill_(
        s[None, None, None, :] > positions[:, None, :, None], float("-inf"))

    def gathered() -> torch.Tensor:
        keys, values = gather_kv(kv, tables)
        return F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask,
                                              enable_gqa=True)
    return gathered


def cold_decode_attention(plan: ComputePlan, g: torch.Generator) -> Callable[[], object]:
    """Decode attention of 32 rows at 164 keys over each of 30 layers' own caches in turn, as a step
    reads them: 120 MB, so every layer's KV comes from memory (one cache, reused, would stay in L3)."""
    k, dtype = plan.kernels, plan.activations
    rows, keys = 32, 164
    width = -(-keys // BLOCK)
    caches = [torch.randn(2, rows * width, BLOCK, KV_HEADS, HEAD_DIM, generator=g).to(dtype)
              for _ in range(LAYERS)]
    tables = torch.randperm(rows * width, generator=g).view(rows, width)
    lens = torch.full((rows,), keys)
    q = torch.randn(rows, HEADS, HEAD_DIM, generator=g).to(dtype)
    if k is not None:
        return lambda: [k.paged_decode_attention(q, kv, tables, lens, lens - 1, 0, HEAD_DIM ** -0.5)
                        for kv in caches]
    mask = torch.zeros(rows, 1, 1, width * BLOCK, dtype=dtype)
    mask[..., keys:] = float("-inf")
    return lambda: [F.scaled_dot_product_attention(q[:, :, None], *gather_kv(kv, tables), attn_mask=mask,
                                                   enable_gqa=True) for kv in caches]


def op_times(plan: ComputePlan, repeats: int) -> dict[str, float]:
    """Median ms of each op at decode and prefill sizes; with no kernels in the plan, the torch ops."""
    k, dtype = plan.kernels, plan.activations
    g = torch.Generator().manual_seed(0)
    out: dict[str, float] = {}
    width = 256 // BLOCK
    kv = torch.randn(2, CACHE_BLOCKS, BLOCK, KV_HEADS, HEAD_DIM, generator=g).to(dtype)
    tables = torch.randperm(CACHE_BLOCKS, generator=g)[: 8 * width].view(8, width)
    lens = torch.full((8,), 256)
    q = torch.randn(8, HEADS, HEAD_DIM, generator=g).to(dtype)
    mask = torch.zeros(8, 1, 1, width * BLOCK, dtype=dtype)
    if k is not None:
        out["decode attention b8 x 256"] = median_ms(
            lambda: k.paged_decode_attention(q, kv, tables, lens, lens - 1, 0, HEAD_DIM ** -0.5), repeats)
    else:
        def gathered() -> torch.Tensor:
            keys, values = gather_kv(kv, tables)
            return F.scaled_dot_product_attention(q[:, :, None], keys, values, attn_mask=mask,
                                                  enable_gqa=True)
        out["decode attention b8 x 256"] = median_ms(gathered, repeats)
    cold = cold_decode_attention(plan, g)
    out["decode attn b32 x 164, cold"] = median_ms(cold, max(5, repeats // 10)) / LAYERS
    out["prefill attention b4 x 500"] = median_ms(prefill_attention(plan, kv, g), max(5, repeats // 10))
    x, res = (torch.randn(784, HIDDEN, generator=g).to(dtype) for _ in range(2))
    norm = RMSNorm(HIDDEN, 1e-5).to(dtype)
    norm.ops = NativeOps(k) if k is not None else TorchOps()
    out["add_rms_norm 784 x 576"] = median_ms(lambda: norm.add(x, res), repeats)
    gu = torch.randn(784, 2 * INTERMEDIATE, generator=g).to(dtype)
    if k is not None:
        out["silu_and_mul 784 x 3072"] = median_ms(lambda: k.silu_and_mul(gu), repeats)
    else:
        gate, up = gu.chunk(2, dim=-1)
        out["silu_and_mul 784 x 3072"] = median_ms(lambda: F.silu(gate) * up, repeats)
    n = 784
    qkv = torch.randn(n, (HEADS + 2 * KV_HEADS) * HEAD_DIM, generator=g).to(dtype)
    angles = torch.randn(n, HEAD_DIM // 2, generator=g)
    both = torch.cat((angles, angles), -1)
    cos, sin = both.cos().to(dtype), both.sin().to(dtype)
    slots = torch.randperm(CACHE_BLOCKS * BLOCK, generator=g)[:n]
    if k is not None:
        out["rope_and_cache 784 tokens"] = median_ms(
            lambda: k.rope_and_cache(qkv, cos, sin, kv, slots, HEADS, KV_HEADS), repeats)
    else:
        def rope_write() -> None:
            q, kk, v = qkv.split((HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM), dim=-1)
            q, kk = q.reshape(n, HEADS, HEAD_DIM), kk.reshape(n, KV_HEADS, HEAD_DIM)
            q * cos[:, None] + rotate_half(q) * sin[:, None]
            rotated = kk * cos[:, None] + rotate_half(kk) * sin[:, None]
            write_kv(kv, slots[None], rotated[None], v.reshape(n, KV_HEADS, HEAD_DIM)[None])
        out["rope_and_cache 784 tokens"] = median_ms(rope_write, repeats)
    # Every layer's own weights, as in the model: a step streams them all from memory (one layer's,
    # reused 30 times, would stay in the cache and time the cache instead).
    layers = [torch.nn.Linear(i, o, bias=False) for _ in range(LAYERS) for i, o in STEP_LINEARS]
    holder = torch.nn.Sequential(*layers).to(dtype)
    convert_linears(holder, plan)
    top = torch.nn.Module()  # the LM head as the loader lays it out (fp32 logits on a bf16 plan's kernels)
    top.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False).to(dtype)
    if plan.fp32_logits:
        use_fp32_logits(top, plan)
    convert_linears(top, plan)
    for rows in (1, 32):
        xs = [torch.randn(rows, m.in_features, generator=g).to(dtype) for m in (*holder, top.lm_head)]

        def step_linears(xs: list[torch.Tensor] = xs) -> None:
            for m, xi in zip((*holder, top.lm_head), xs, strict=True):
                m(xi)
        out[f"step's linears, {rows} row(s)"] = median_ms(step_linears, max(5, repeats // 20))
        out[f"LM head, {rows} row(s)"] = median_ms(lambda xi=xs[-1]: top.lm_head(xi), max(5, repeats // 5))
    return out


def prefill_ms(model: LoadedModel, plan: ComputePlan, rows: int, tokens: int,
               repeats: int) -> tuple[float, torch.Tensor]:
    """Median ms of one eager prefill step of `rows` fresh prompts of `tokens` tokens, and its logits."""
    blocks = -(-tokens // BLOCK)
    config = EngineConfig(max_model_len=blocks * BLOCK, max_num_seqs=rows, num_kv_blocks=rows * blocks + 1,
                          trace_mode="none").resolve_for_model(8192, 1)
    runner = build_runner(config, model.module, model.capabilities, model.spec, plan.activations, plan.device)
    runner.allocate()
    step = StepPlan("prefill", tuple(PlannedRow(tuple(range(1000 + 7 * i, 1000 + 7 * i + tokens)), 0,
                                                tuple(range(i * blocks, (i + 1) * blocks)), True)
                                     for i in range(rows)))
    logits = runner.execute(step)
    ms = median_ms(lambda: runner.execute(step), repeats)
    runner.close()
    return ms, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default=",".join(reversed(probe().levels)))
    parser.add_argument("--dtype", default="auto", choices=("auto", *DTYPES))
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--step-context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prefill-rows", type=int, default=8)
    parser.add_argument("--prefill-tokens", type=int, default=100)
    parser.add_argument("--skip-model", action="store_true", help="part 1 only")
    args = parser.parse_args()
    cpu = torch.device("cpu")
    levels = args.levels.split(",")
    print(probe().describe())
    plans = {lvl: ComputePlan.resolve(cpu, args.dtype, lvl, "native") for lvl in levels}
    print(f"\nops, median ms ({args.dtype}; each level's dtype and linear path; 'torch': cpu_kernels=torch)")
    for lvl, plan in plans.items():
        reference = ComputePlan.resolve(cpu, args.dtype, lvl, "torch")
        native, torch_ops = op_times(plan, args.repeats), op_times(reference, args.repeats)
        print(f"{lvl} ({plan.dtype_name}, linear: {plan.linear}; torch linear: {reference.linear})")
        for op, ms in native.items():
            ref = torch_ops[op]
            print(f"  {op:<28} native {ms:>8.3f}   torch {ref:>8.3f}   ratio {ref / ms:>5.2f}", flush=True)
    if args.skip_model:
        return
    model_dir = resolve_model_dir("")
    batches = [int(b) for b in args.batches.split(",")]
    for lvl, plan in plans.items():
        reference = ComputePlan.resolve(cpu, args.dtype, lvl, "torch")
        models = {"torch": load_model(model_dir, reference), "native": load_model(model_dir, plan)}
        print(f"\n{lvl}: traced decode step, context {args.step_context}, median of {args.steps} "
              f"({plan.dtype_name})")
        print(f"{'batch':>5} {'torch ms':>9} {'native ms':>10} {'ratio':>6} {'same greedy tokens':>19}")
        for batch in batches:
            t_ms, t_logits = step_times(models["torch"], "decode_only", batch, args.step_context, args.steps,
                                        reference)
            n_ms, n_logits = step_times(models["native"], "decode_only", batch, args.step_context, args.steps,
                                        plan)
            same = int((t_logits.argmax(-1) == n_logits.argmax(-1)).sum())
            print(f"{batch:>5} {t_ms * 1e3:>9.2f} {n_ms * 1e3:>10.2f} {t_ms / n_ms:>6.2f} {same:>15}/{batch}",
                  flush=True)
        (t_ms, t_logits), (n_ms, n_logits) = (
            prefill_ms(models[name], p, args.prefill_rows, args.prefill_tokens, 5)
            for name, p in (("torch", reference), ("native", plan)))
        same = int((t_logits.argmax(-1) == n_logits.argmax(-1)).sum())
        print(f"{lvl}: eager prefill, {args.prefill_rows} rows x {args.prefill_tokens} tokens: "
              f"torch {t_ms:.1f} ms, native {n_ms:.1f} ms, ratio {t_ms / n_ms:.2f}, "
              f"same greedy tokens {same}/{args.prefill_rows}")


if __name__ == "__main__":
    main()
