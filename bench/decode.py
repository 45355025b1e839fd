"""Decode step time, eager vs traced, and engine throughput with async decode overlap on vs off.

Part 1 (`--batches`): for each batch size, one runner with trace_mode=none and one with
trace_mode=decode_only over the same model run the same decode step (every row at `--context`
tokens) `--steps` times; each step is executed and its greedy tokens read back to the host, as
the engine does. Prints the median step time of each and the ratio eager/traced.

Part 2 (`--concurrency`, skipped with 0): the engine (trace_mode=decode_only) serves that many
greedy requests of `--max-tokens` tokens (ignore_eos, queued before it starts) with
async_scheduling off and on, and prints output tokens/s of each and the ratio.

    .venv/bin/python bench/decode.py                        # CPU, the default model, bf16
    python3 bench/decode.py --device cuda --random-weights  # CUDA graphs, no checkpoint needed
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import torch

from tt_backend.assembly.torch_engine import build_runner
from tt_backend.config import EngineConfig
from tt_backend.contract.modes import StepVariant, TraceMode
from tt_backend.contract.sampling import SamplingPlan
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.linears import convert_linears
from tt_backend.models.llama import LlamaForCausalLM
from tt_backend.models.loader import LoadedModel, load_model, select_kernels
from tt_backend.sampling.device_sampler import sampling_tensors

SMOLLM2_135M = {  # config.json of SmolLM2-135M-Instruct, for --random-weights
    "architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0, "max_position_embeddings": 8192, "tie_word_embeddings": True,
}


def random_model(plan: ComputePlan) -> LoadedModel:
    torch.manual_seed(0)
    module = LlamaForCausalLM.from_hf_config(SMOLLM2_135M)
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.02)
    module.to(device=plan.device, dtype=plan.activations).eval().requires_grad_(False)
    select_kernels(module, plan)
    convert_linears(module, plan)
    return LoadedModel(module, module.spec, "LlamaForCausalLM", LlamaForCausalLM.capabilities)


def step_times(model: LoadedModel, trace_mode: TraceMode | str, batch: int, context: int, steps: int,
               plan: ComputePlan) -> tuple[float, torch.Tensor]:
    blocks_per_row = -(-(context + steps) // 16)
    config = EngineConfig(max_model_len=2048, max_num_seqs=max(batch, 1),
                          max_num_batched_tokens=2048, num_kv_blocks=max(128, batch * blocks_per_row),
                          trace_mode=trace_mode).resolve_for_model(8192, 1)
    runner = build_runner(config, model.module, model.capabilities, model.spec, plan.activations, plan.device)
    runner.allocate()
    runner.warmup()
    rows = tuple(PlannedRow((100 + i,), context - 1,
                            tuple(range(i * blocks_per_row, (i + 1) * blocks_per_row)), True)
                 for i in range(batch))
    plan = StepPlan("decode", rows)
    greedy = SamplingPlan(StepVariant.GREEDY, sampling_tensors([None] * batch, [], []))  # argmax in the step
    for _ in range(3):
        runner.run_and_sample(plan, greedy)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        runner.run_and_sample(plan, greedy)
        times.append(time.perf_counter() - start)
    logits = runner.execute(plan).cpu()
    runner.close()
    return statistics.median(times), logits


def engine_throughput(model_dir: Path, dtype: str, device: str, concurrency: int, max_tokens: int,
                      async_scheduling: bool = False, lanes: int = 1, sampling: dict[str, Any] | None = None,
                      **options: Any) -> float:
    """Output tokens/s of the engine serving `concurrency` requests queued before it starts, over
    `lanes` lanes of concurrency / lanes sequences each; `sampling`: SamplingParams fields of every
    request (default: temperature 1), `options`: more EngineConfig fields."""
    from tt_backend.assembly import build_engine
    from tt_backend.sampling.params import SamplingParams
    from tt_backend.text.tokenizer import encode_chat

    engine = build_engine(EngineConfig(model=str(model_dir), dtype=dtype, device=device,  # type: ignore[arg-type]
                                       max_model_len=1024, max_num_seqs=concurrency // lanes,
                                       data_parallel_size=lanes, async_scheduling=async_scheduling,
                                       **options))
    done = threading.Semaphore(0)
    tokens = [0]

    def on_output(out: Any) -> None:
        tokens[0] += len(out.new_token_ids)
        if out.finished:
            done.release()

    prompt = encode_chat(engine.tokenizer, "Tell me a long story about a lighthouse keeper and the sea.")
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, **(sampling or {}))
    for i in range(concurrency):
        engine.add_request(f"r{i}", prompt, params, on_output)
    start = time.perf_counter()
    engine.start()
    for _ in range(concurrency):
        assert done.acquire(timeout=1800)
    elapsed = time.perf_counter() - start
    engine.shutdown()
    return tokens[0] / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--cpu-isa", default="auto", help="cap of the CPU path (EngineConfig.cpu_isa)")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--random-weights", action="store_true", help="SmolLM2-135M's shapes, random weights")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    plan = ComputePlan.resolve(torch.device(args.device), args.dtype, args.cpu_isa)
    if args.random_weights:
        model, model_dir = random_model(plan), None
    else:
        from tt_backend.models.checkpoint import resolve_model_dir

        model_dir = resolve_model_dir("")
        model = load_model(model_dir, plan)
    results: dict[str, Any] = {"device": args.device, "dtype": plan.dtype_name, "cpu_isa": plan.level,
                               "context": args.context}
    print(f"decode step, {args.device} cpu_isa={plan.level} {plan.dtype_name}, context {args.context} "
          f"tokens, median of {args.steps}")
    print(f"{'batch':>5} {'eager ms':>9} {'traced ms':>10} {'eager/traced':>13} {'max |dlogit|':>13}")
    for batch in (int(b) for b in args.batches.split(",")):
        eager, eager_logits = step_times(model, "none", batch, args.context, args.steps, plan)
        traced, traced_logits = step_times(model, "decode_only", batch, args.context, args.steps, plan)
        diff = (eager_logits - traced_logits).abs().max().item()
        print(f"{batch:>5} {eager * 1e3:>9.2f} {traced * 1e3:>10.2f} {eager / traced:>13.2f} {diff:>13.3g}",
              flush=True)
        results[f"batch{batch}"] = {"eager_ms": eager * 1e3, "traced_ms": traced * 1e3,
                                     "max_logit_diff": diff}
    if args.concurrency and model_dir is not None:
        off = engine_throughput(model_dir, args.dtype, args.device, args.concurrency, args.max_tokens, False,
                                cpu_isa=args.cpu_isa)
        on = engine_throughput(model_dir, args.dtype, args.device, args.concurrency, args.max_tokens, True,
                               cpu_isa=args.cpu_isa)
        print(f"engine, concurrency {args.concurrency}, {args.max_tokens} tokens each: "
              f"async off {off:.1f} tok/s, "
              f"async on {on:.1f} tok/s, on/off {on / off:.2f}")
        results["engine"] = {"concurrency": args.concurrency, "async_off_tok_s": off, "async_on_tok_s": on}
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
