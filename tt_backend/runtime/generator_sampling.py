"""A step's device sampling in tt-metal's form: `TTSamplingParams` lists over the generator's batch
rows, from the plan's per-row `SamplingTensors`.

tt-metal's sampler (models/common/sampling/generator.py `format_sampling_params`,
tt_sampling.py) takes per-slot lists; it turns temperature 0 into greedy (top-1), an unrestricted
top_k into its 32 candidates and caps larger ones there: the engine sends a batch to the device
only when every row is within those limits (`SamplingConfig.device_max_top_k`), so what the
device draws from is exactly each row's distribution. A top-1 row also gets top_p 0, as the
Tenstorrent vLLM plugin sends it (tt-metal#46827: a per-row k of 1 did not narrow the candidates
before the draw; top_p 0 keeps exactly the top token). Padding rows decode greedily. Seeds go as
unsigned 64-bit values (tt-metal seeds each slot's host generator with them at prefill).
"""

from __future__ import annotations

from tt_backend.contract.sampling import SamplingTensors
from tt_backend.devices.tt.generator import TTSamplingParams
from tt_backend.sampling.params import GREEDY_EPS

TT_MAX_TOP_K = 32
"""The most candidates tt-metal's device sampler draws from (ttnn.sampling: k in (0, 32])."""

_MASK64 = (1 << 64) - 1


def tt_sampling_params(tensors: SamplingTensors, rows: list[int], positions: list[int],
                       batch: int) -> TTSamplingParams:
    """The params of a `batch`-row call whose row positions[i] is the plan's row rows[i]."""
    temperature = [0.0] * batch
    top_k = [1] * batch
    top_p = [0.0] * batch
    seed = [0] * batch
    for row, position in zip(rows, positions, strict=True):
        t = float(tensors.temperature[row])
        k = int(tensors.top_k[row])
        greedy = t < GREEDY_EPS or k == 1
        temperature[position] = 0.0 if greedy else t
        top_k[position] = 1 if greedy else (k if k > 0 else TT_MAX_TOP_K)
        top_p[position] = 0.0 if greedy else float(tensors.top_p[row])
        seed[position] = int(tensors.seed[row]) & _MASK64
    return TTSamplingParams(temperature, top_k, top_p, seed)
