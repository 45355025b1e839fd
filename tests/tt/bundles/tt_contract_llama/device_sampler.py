"""tt-metal's device sampler, computed on the host for the contract generator's `sampling` variant.

Sources (read, not copied; RULES.md "Device sampling" cites each rule):
- SG  tt-metal models/common/sampling/generator.py @ 00b0fa3f (SamplingParams, format_sampling_params,
      broadcast_sampling_params, SeedManager)
- OP  ttnn.sampling (sampling_nanobind.cpp doc; kernels compute/sampling.cpp, dataflow/writer_interleaved.cpp)
- FV  tt-metal models/common/sampling/full_vocab_contract.py @ 2befd795 (classify_sampling_batch)
- LP  tt-metal models/common/sampling/tt_log_probs.py (log-probs only on 8 or 32 chips)

A row is sampled as the kernel does it: the 32 highest logits (ties: lowest token id first), the first
top_k of them, scaled by 1/temperature, softmaxed, cut to the shortest prefix whose cumulative
probability exceeds top_p (the crossing token kept), renormalised, and drawn with one uniform number.
The uniform number comes from the slot's RNG (SG SeedManager: one per slot, reseeded by a sampled
prefill, advanced once per draw), so a seeded request's tokens depend on its seed and its step count
only. The stand-in's uniform draw is its own; hardware gives other tokens for the same seed.
"""

from __future__ import annotations

import random
import secrets
import sys
from dataclasses import dataclass
from typing import Any

import torch

rules = sys.modules["tt_contract_llama_rules"]  # contract_core.py loads it first
require = rules.require

MAX_TOP_K = 32
"""OP: k in (0, 32] per user; SG format_sampling_params caps top_k at 32 ("TT sampling supports up to 32")."""

FIELDS: dict[str, Any] = {
    "temperature": None, "top_k": None, "top_p": None, "presence_penalty": 0.0, "frequency_penalty": 0.0,
    "repetition_penalty": 1.0, "seed": None, "enable_log_probs": False, "num_logprobs": 0}
"""SG SamplingParams' fields and defaults (None: required). G reads them by name, falling back to these
defaults when an attribute is missing, so any object with these attributes works (P's TTSamplingParams)."""


@dataclass(frozen=True)
class SamplingParams:
    """SG SamplingParams (tt-metal's field names and defaults; per-slot lists in decode)."""

    temperature: float | list[float]
    top_k: int | list[int]
    top_p: float | list[float]
    presence_penalty: float | list[float] = 0.0
    frequency_penalty: float | list[float] = 0.0
    repetition_penalty: float | list[float] = 1.0
    seed: int | list[int | None] | None = None
    enable_log_probs: bool | list[bool] = False
    num_logprobs: int | list[int] = 0


@dataclass(frozen=True)
class RowParams:
    """One slot's parameters after SG format_sampling_params."""

    top_k: int  # 1..32; 1 = greedy
    top_p: float  # clamped to [0, 1]
    inv_temperature: float  # the device takes 1/T; 1.0 for greedy
    seed: int | None


def _field(params: Any, name: str) -> Any:
    value = getattr(params, name, FIELDS[name])
    require(value is not None or FIELDS[name] is not None or name == "seed",
            f"sampling_params.{name} is required (tt-metal SamplingParams has no default for it)")
    return value.tolist() if isinstance(value, torch.Tensor) else value


def _row(values: dict[str, Any], where: str, vocab: int) -> RowParams:
    """SG format_sampling_params for one row, with FV's rule for top_k beyond the device's 32."""
    temperature, top_k, top_p = float(values["temperature"]), int(values["top_k"]), float(values["top_p"])
    require(temperature >= 0, f"{where}: temperature={temperature} is negative")
    # FV: top_k <= 0 or >= vocab means unrestricted (SG samples the top 32 then); 32 < k < vocab has no
    # exact device algorithm (SG would silently cap it to 32)
    require(top_k <= MAX_TOP_K or top_k >= vocab or top_k < 1,
            f"{where}: top_k={top_k} exceeds the device sampler's limit of {MAX_TOP_K} (ttnn.sampling takes "
            f"k in (0, {MAX_TOP_K}]; tt-metal would silently sample from the top {MAX_TOP_K}); sample this "
            "row on the host")
    penalties = (float(values["presence_penalty"]), float(values["frequency_penalty"]),
                 float(values["repetition_penalty"]))
    require(penalties in ((0.0, 0.0, 1.0), (0.0, 0.0, 0.0)),
            f"{where}: presence/frequency/repetition penalties {penalties}: tt-metal applies them on the "
            "device (TTPenalties over prompt_tokens/output_tokens); the contract generator does not "
            "emulate them")
    require(not values["enable_log_probs"], f"{where}: enable_log_probs: tt-metal computes device log-probs "
            "only on 8 or 32 chips (LogProbsCalculator._is_supported; tt-metal#34077); sample on the host")
    if temperature == 0:  # SG: temperature 0 -> top_k 1, temperature 1
        return RowParams(1, min(max(top_p, 0.0), 1.0), 1.0, values["seed"])
    k = MAX_TOP_K if top_k < 1 or top_k > MAX_TOP_K else top_k
    return RowParams(k, min(max(top_p, 0.0), 1.0), 1.0 / temperature, values["seed"])


def decode_rows(params: Any, batch: int, vocab: int) -> list[RowParams]:
    """Per-slot rows of a decode's sampling_params: every field a list of `batch` entries (G chunks the
    lists per submesh; SG pads a scalar as [scalar] + defaults, so a scalar would reach slot 0 only)."""
    columns: dict[str, list[Any]] = {}
    for name in FIELDS:
        value = _field(params, name)
        if name in ("presence_penalty", "frequency_penalty", "repetition_penalty", "seed",
                    "enable_log_probs", "num_logprobs") and not isinstance(value, (list, tuple)):
            value = [value] * batch  # defaults left as scalars change nothing
        require(isinstance(value, (list, tuple)), f"decode sampling_params.{name}={value!r:.60} is a scalar: "
                f"tt-metal pads it to [value] + greedy defaults, so it reaches slot 0 only; pass {batch} "
                "per-slot values")
        require(len(value) == batch, f"decode sampling_params.{name} has {len(value)} entries for the decode "
                f"batch of {batch} (data_parallel x max_batch_size, inactive rows included)")
        columns[name] = list(value)
    return [_row({n: columns[n][i] for n in FIELDS}, f"decode slot {i}", vocab) for i in range(batch)]


def prefill_rows(params: Any, rows: int, vocab: int) -> list[RowParams]:
    """Per-row params of a prefill: G broadcast_sampling_params takes value[idx] of a list (row order, not
    slot order) or a scalar as is. A list must have one entry per row (G would take value[0] for a
    short one)."""
    columns: dict[str, list[Any]] = {}
    for name in FIELDS:
        value = _field(params, name)
        if isinstance(value, (list, tuple)):
            require(len(value) == rows, f"prefill sampling_params.{name} has {len(value)} entries for "
                    f"{rows} prompts (one per row, in row order)")
            columns[name] = list(value)
        else:
            columns[name] = [value] * rows
    return [_row({n: columns[n][i] for n in FIELDS}, f"prefill row {i}", vocab) for i in range(rows)]


class SlotRngs:
    """SG SeedManager for one submesh: a random.Random per slot. A sampled prefill reseeds its slot (None:
    a fresh random seed) and draws once for it; a sampled decode draws once for every slot."""

    def __init__(self, slots: int) -> None:
        self.rngs = [random.Random(secrets.randbits(64)) for _ in range(slots)]

    def reset(self, slot: int, seed: int | None) -> None:
        self.rngs[slot].seed(seed if seed is not None else secrets.randbits(64))

    def draw(self, slot: int) -> float:
        """The slot's next uniform number in [0, 1): SG pushes rng.randint(0, 1000000) as the device seed."""
        value = self.rngs[slot].randint(0, 1000000)
        return float(torch.rand(1, generator=torch.Generator().manual_seed(value)))

    def step(self) -> list[float]:
        return [self.draw(slot) for slot in range(len(self.rngs))]

    def remap(self, remap: list[int]) -> None:
        """SG apply_slot_remap: slot i now holds the request that was at slot remap[i]."""
        old = list(self.rngs)
        for new, was in enumerate(remap):
            if was != new:
                self.rngs[new] = random.Random()
                self.rngs[new].setstate(old[was].getstate())


def sample(logits: torch.Tensor, row: RowParams, u: float) -> int:
    """One token from [vocab] logits (OP kernel order: top-32, top-k, x 1/T, softmax, top-p, draw)."""
    order = torch.sort(logits.float(), descending=True, stable=True)  # ties: lowest token id first
    ids, values = order.indices[:MAX_TOP_K], order.values[:MAX_TOP_K]
    probs = torch.softmax(values[: row.top_k] * row.inv_temperature, dim=0)
    over = (torch.cumsum(probs, 0) > row.top_p).nonzero()
    kept = probs[: int(over[0]) + 1] if len(over) else probs
    picked = (torch.cumsum(kept / kept.sum(), 0) > u).nonzero()
    return int(ids[int(picked[0])]) if len(picked) else int(ids[0])
