"""Checks of the contract generator's device sampling (tt_contract_llama `sampling` variant), called
directly on a mock n150, one subprocess for all of them (test_contract_sampling.py runs it):

    python tests/tt/sampling_checks.py  ->  one line "SAMPLING-RESULT {json}"

Each check returns plain values; the test asserts them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import ttnn
from transformers import AutoConfig

from tt_backend.config import EngineConfig
from tt_backend.devices.tt.mesh import TTMesh
from tt_backend.mesh_options import MeshOptions
from tt_backend.models.checkpoint import resolve_model_dir

MARK = "SAMPLING-RESULT "
VARIANTS = Path(__file__).resolve().parent / "bundles" / "tt_contract_llama" / "variants"
BATCH, BLOCKS, WIDTH = 4, 64, 4  # decode batch (max_num_seqs), KV blocks, page-table width
PROMPTS = ([9906, 11, 1268, 527, 499, 3432, 30], [791, 6864, 315, 9822, 374],
           [40, 1093, 311, 1373, 264, 2363])
Rows = list[tuple[int, list[int], dict[str, Any]]]  # (slot, prompt, sampling fields)


def variant(name: str) -> type:
    path = VARIANTS / name / "llama" / "variant.py"
    spec = importlib.util.spec_from_file_location(f"sampling_checks_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls: type = module.TTLlamaForCausalLM
    return cls


def generator(mesh: Any, name: str) -> tuple[Any, Any]:
    hf = AutoConfig.from_pretrained(resolve_model_dir(""))
    gen = variant(name).initialize_vllm_model(hf, mesh, BATCH, 512)
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    kv = gen.allocate_kv_cache((BLOCKS, hf.num_key_value_heads, 32, head_dim), torch.bfloat16,
                               hf.num_hidden_layers)
    return gen, kv


def table(slot: int) -> torch.Tensor:
    """Slot s owns blocks [1 + WIDTH s, 1 + WIDTH (s + 1)): block 0 is the warmups'."""
    return torch.arange(1 + WIDTH * slot, 1 + WIDTH * (slot + 1), dtype=torch.int32)


def prefill(gen: Any, kv: Any, rows: list[tuple[int, list[int]]], sampling: Any = None) -> Any:
    width = max(len(p) for _, p in rows)
    tokens = torch.tensor([p + [0] * (width - len(p)) for _, p in rows])
    return gen.prefill_forward(tokens, page_table=torch.stack([table(s) for s, _ in rows]), kv_cache=kv,
                               prompt_lens=[len(p) for _, p in rows], empty_slots=[s for s, _ in rows],
                               enable_trace=False, sampling_params=sampling, start_pos=[0] * len(rows),
                               warmup_prefill=False)


def decode_steps(gen: Any, kv: Any, live: dict[int, tuple[int, int]], steps: int,
                 step: Callable[..., Any], stale: bool = False) -> dict[int, list[int]]:
    """live: slot -> (first token, its position). `step(tokens, positions, tables)` -> [BATCH] tokens.
    stale: send zeros as host tokens (the device's own tokens must be used)."""
    out = {s: [t] for s, (t, _) in live.items()}
    for i in range(steps):
        tokens = torch.zeros(BATCH, 1, dtype=torch.int32)
        positions = torch.full((BATCH,), -1, dtype=torch.int32)
        for s, (_, pos) in live.items():
            tokens[s, 0] = 0 if stale and i > 0 else out[s][-1]
            positions[s] = pos + i
        next_tokens = step(tokens, positions, torch.stack([table(s) for s in range(BATCH)]))
        for s in live:
            out[s].append(int(next_tokens[s]))
    return out


def params(rows: list[dict[str, Any]], cls: Any) -> Any:
    """Per-slot lists of BATCH entries; slots not in rows get the greedy padding P sends."""
    pad = {"temperature": 0.0, "top_k": 1, "top_p": 1.0, "seed": None}
    full = [rows[i] if i < len(rows) else pad for i in range(BATCH)]
    return cls(**{k: [r.get(k, pad[k]) for r in full] for k in pad})


def violation(call: Callable[[], Any]) -> str | None:
    try:
        call()
    except (RuntimeError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def check_greedy(mesh: Any) -> dict[str, Any]:
    """Greedy device tokens vs the argmax of the current variant's logits, same inputs."""
    cur, kv = generator(mesh, "current")
    first = int(prefill(cur, kv, [(0, PROMPTS[0])])[0, 0].argmax())

    def logits_step(tokens: torch.Tensor, positions: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
        logits, _ = cur.decode_forward(tokens, positions, tables, kv, enable_trace=False)
        return logits[:, 0].argmax(-1)

    want = decode_steps(cur, kv, {0: (first, len(PROMPTS[0]))}, 6, logits_step)[0]
    gen, kv2 = generator(mesh, "sampling")
    cls = type_of_params(gen)
    tokens, log_probs = prefill(gen, kv2, [(0, PROMPTS[0])], cls(temperature=0.0, top_k=1, top_p=1.0))
    forms = {"prefill": [list(tokens.shape), str(tokens.dtype), list(log_probs.shape)]}

    def token_step(t: torch.Tensor, p: torch.Tensor, tb: torch.Tensor) -> torch.Tensor:
        out, lp = gen.decode_forward(t, p, tb, kv2, enable_trace=False, sampling_params=params([{}], cls))
        forms["decode"] = [list(out.shape), str(out.dtype), list(lp.shape)]
        return out

    got = decode_steps(gen, kv2, {0: (int(tokens[0, 0]), len(PROMPTS[0]))}, 6, token_step)[0]
    positions = torch.full((BATCH,), -1, dtype=torch.int32)
    positions[0] = len(PROMPTS[0]) + 6
    tokens_in = torch.zeros(BATCH, 1, dtype=torch.int32)
    tokens_in[0, 0] = got[-1]
    gen.decode_forward(tokens_in, positions, torch.stack([table(s) for s in range(BATCH)]), kv2,
                       enable_trace=False)  # sampling_params None: logits
    return {"want": want, "got": got, "forms": forms, "reads": gen.reads[:3] + gen.reads[-1:]}


def type_of_params(gen: Any) -> Any:
    """The bundle's SamplingParams (tt-metal's field names), loaded with the generator."""
    return sys.modules["tt_contract_llama_device_sampler"].SamplingParams


def sampled_run(mesh: Any, rows: Rows, steps: int) -> dict[int, list[int]]:
    """Prefill rows (slot, prompt, params) with device sampling, then decode through P's async path."""
    gen, kv = generator(mesh, "sampling")
    cls = type_of_params(gen)
    fields = ("temperature", "top_k", "top_p", "seed")
    sp_rows = cls(**{k: [r[k] for _, _, r in rows] for k in fields})
    first, _ = prefill(gen, kv, [(s, p) for s, p, _ in rows], sp_rows)
    per_slot = {s: r for s, _, r in rows}
    sp = params([per_slot.get(s, {}) for s in range(BATCH)], cls)

    def async_step(t: torch.Tensor, p: torch.Tensor, tb: torch.Tensor) -> torch.Tensor:
        out = gen.decode_forward(t, p, tb, kv, enable_trace=False, read_from_device=False, sampling_params=sp)
        host, events = gen.read_decode_output(out, async_read=True)
        for event in events:
            ttnn.event_synchronize(event)
        return gen.process_decode_output_host(host, is_tokens=True)[0]

    return decode_steps(gen, kv, {s: (int(first[i, 0]), len(p)) for i, (s, p, _) in enumerate(rows)}, steps,
                        async_step)


def check_seeds(mesh: Any) -> dict[str, Any]:
    seeded = {"temperature": 1.0, "top_k": 32, "top_p": 1.0, "seed": 1234}
    alone = sampled_run(mesh, [(0, PROMPTS[0], seeded)], 8)[0]
    batch = sampled_run(mesh, [(0, PROMPTS[1], {**seeded, "seed": None}), (2, PROMPTS[0], seeded),
                               (1, PROMPTS[2], {**seeded, "seed": 99})], 8)[2]
    other = sampled_run(mesh, [(0, PROMPTS[0], {**seeded, "seed": 4321})], 8)[0]
    return {"alone": alone, "batch": batch, "other_seed": other}


def check_traced_feedback(mesh: Any) -> dict[str, Any]:
    """P's two warmup phases with can_sample_on_device, then traced greedy decodes whose host tokens are
    stale (zeros after the first step): tt-metal feeds its own sampled tokens back on the device."""
    gen, kv = generator(mesh, "sampling")
    cls = type_of_params(gen)
    gen.warmup_model_prefill(kv_cache=kv, enable_trace=False, can_sample_on_device=True)
    for trace in (False, True):
        gen.warmup_model_decode(kv_cache=kv, enable_trace=trace, max_batch_size=BATCH, num_blocks=WIDTH,
                                can_sample_on_device=True, non_greedy_decoding_on_device=True)
    first, _ = prefill(gen, kv, [(0, PROMPTS[0])], cls(temperature=0.0, top_k=1, top_p=1.0))

    def traced(t: torch.Tensor, p: torch.Tensor, tb: torch.Tensor) -> torch.Tensor:
        return gen.decode_forward(t, p, tb, kv, enable_trace=True, sampling_params=params([{}], cls))[0]

    tokens = decode_steps(gen, kv, {0: (int(first[0, 0]), len(PROMPTS[0]))}, 6, traced, stale=True)[0]
    return {"tokens": tokens, "sources": gen.decode_token_sources, "reads": gen.reads[-1]}


def check_refusals(mesh: Any) -> dict[str, Any]:
    gen, kv = generator(mesh, "sampling")
    cls = type_of_params(gen)
    vocab = gen.hf.vocab_size
    t, p, tb = torch.zeros(BATCH, 1, dtype=torch.int32), torch.full((BATCH,), -1, dtype=torch.int32), \
        torch.stack([table(s) for s in range(BATCH)])

    def decode(sp: Any) -> Any:
        return gen.decode_forward(t, p, tb, kv, enable_trace=False, sampling_params=sp)

    out = {
        "prefill_top_k_50": violation(lambda: prefill(gen, kv, [(0, PROMPTS[0])],
                                                      cls(temperature=0.8, top_k=50, top_p=1.0))),
        "decode_top_k_50": violation(lambda: decode(params([{"temperature": 0.8, "top_k": 50}], cls))),
        "decode_top_k_vocab": violation(lambda: decode(params([{"temperature": 0.8, "top_k": vocab}], cls))),
        "decode_short_list": violation(lambda: gen.decode_forward(
            t, p, tb, kv, enable_trace=False, sampling_params=cls([0.0] * 3, [1] * 3, [1.0] * 3))),
        "decode_scalar": violation(lambda: gen.decode_forward(
            t, p, tb, kv, enable_trace=False, sampling_params=cls(0.0, 1, 1.0))),
        "wrong_is_tokens": violation(lambda: gen.process_decode_output_host(gen.decode_forward(
            t, p, tb, kv, enable_trace=False, read_from_device=False, sampling_params=params([{}], cls)))),
    }
    cur, kv_cur = generator(mesh, "current")
    out["current"] = violation(lambda: prefill(cur, kv_cur, [(0, PROMPTS[0])], cls(0.0, 1, 1.0)))
    out["current_decode"] = violation(lambda: cur.decode_forward(
        t, p, tb, kv_cur, enable_trace=False, sampling_params=params([{}], cls)))
    old, kv_old = generator(mesh, "older")
    out["older"] = violation(lambda: old.decode_forward(t, p, tb, kv_old, enable_trace=False,
                                                        sampling_params=params([{}], cls)))
    out["capabilities"] = {name: getattr(variant(name), "model_capabilities", None)
                           for name in ("current", "sampling")}
    return out


def main() -> None:
    config = EngineConfig(device="tt", block_size=32)
    mesh = TTMesh.open(config.mesh_options(MeshOptions.shape_from(config.mesh_device)))
    try:
        result = {name: check(mesh.mesh) for name, check in (
            ("greedy", check_greedy), ("seeds", check_seeds), ("traced", check_traced_feedback),
            ("refusals", check_refusals))}
    finally:
        mesh.close()
    print(MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
