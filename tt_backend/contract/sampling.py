"""How a step chooses its tokens (`SamplingPlan`) and what it hands back (`SampledTokens`).

A device variant chooses tokens inside the step from the plan's `SamplingTensors`; the `logits`
variant returns the sampling rows' logits, and the plan's host sampler turns them into tokens
(and logprobs). Either way the runner returns one `SampledTokens` value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from tt_backend.contract.modes import StepVariant


@dataclass(frozen=True)
class SamplingTensors:
    """Per-row sampling inputs of a step, host or device, one entry per row (built from the
    requests' parameters by `sampling.device_sampler.sampling_tensors`)."""

    temperature: torch.Tensor  # float32; < GREEDY_EPS decodes greedily
    top_k: torch.Tensor  # int64; 0 disables
    top_p: torch.Tensor  # float32
    min_p: torch.Tensor  # float32
    seed: torch.Tensor  # int64 (the bits of a uint64 seed)
    counter: torch.Tensor  # int64: the position of the token being sampled

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.temperature, self.top_k, self.top_p, self.min_p, self.seed, self.counter)

    def rows(self, index: list[int], batch: int) -> SamplingTensors:
        """The given rows, padded with greedy rows to `batch`."""
        ids = torch.tensor(index + [0] * (batch - len(index)), dtype=torch.long)
        picked = [t.index_select(0, ids) for t in self.tensors]
        picked[0][len(index):] = 0.0  # padding rows decode greedily
        return SamplingTensors(*picked)

    def to(self, device: torch.device) -> SamplingTensors:
        return SamplingTensors(*(t.to(device, non_blocking=True) for t in self.tensors))


@dataclass(frozen=True)
class TokenLogprobs:
    """The sampled token's raw logprob and rank (1 = most likely), and the top-n alternatives."""

    token_id: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float], ...]
    """(token id, logprob) of the n most likely tokens, most likely first; rank = index + 1."""


@dataclass(frozen=True)
class SampledTokens:
    """The tokens a step chose for its sampling rows, in row order, on the host."""

    tokens: tuple[int, ...]
    logprobs: tuple[TokenLogprobs | None, ...] | None = None
    """Per sampling row, when the host path ran (None for rows that asked for none)."""
    errors: tuple[str | None, ...] | None = None
    """Per sampling row, when the host path ran: why that row's own processing failed (its custom
    processor raised, its grammar's mask failed); such a row's token is meaningless and the
    request ends with the error, while the step's other rows go on."""

    @classmethod
    def read(cls, tokens: torch.Tensor, logprobs: tuple[TokenLogprobs | None, ...] | None = None,
             errors: tuple[str | None, ...] | None = None) -> SampledTokens:
        """From a step's token ids [rows] (read to the host here, if they are not there yet)."""
        return cls(tuple(tokens.tolist()), logprobs, errors if errors and any(errors) else None)


class HostSampling(Protocol):
    """The host path of one step: its sampling rows' logits in, their tokens out."""

    def sample(self, logits: torch.Tensor) -> SampledTokens: ...


@dataclass(frozen=True)
class SamplingPlan:
    """How one step chooses its tokens."""

    variant: StepVariant
    tensors: SamplingTensors
    """One row per plan row (rows that sample nothing decode greedily)."""
    host: HostSampling | None = None
    """The host path, with the `logits` variant."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "variant", StepVariant(self.variant))
        assert self.host is None or self.variant is StepVariant.LOGITS, "the host path samples logits"
