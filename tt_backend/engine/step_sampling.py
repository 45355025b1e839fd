"""The per-batch sampling decision: inside the step (device path) or on the host (the processor
chain), and the inputs of either.

A batch takes the device path when the operation may sample on the device
(`sample_on_device_mode`, `always_compat_sampling`) and no row needs the host: logprobs,
penalties, logit bias, allowed ids, bad words, custom processors, a structured-output grammar,
min_tokens still banning EOS, or parameters beyond the device sampler's limits (tt-metal's: top_k
up to 32, no min_p; `SamplingConfig`).
One such row sends the whole batch through the host path for that step; the next batch decides
again. On torch both paths choose tokens with the same function, so a row's token does not
depend on the path its batch took; tt-metal's device sampler draws with its own per-slot
generator, so there a seeded row is reproducible on either path but the two paths differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tt_backend.contract.modes import StepMode, StepVariant
from tt_backend.contract.sampling import SamplingPlan
from tt_backend.runtime.config import SamplingConfig
from tt_backend.sampling.device_sampler import sampling_tensors, variant_for
from tt_backend.sampling.grammar import GrammarMatcher
from tt_backend.sampling.host_sampler import HostBatch, HostRow
from tt_backend.sampling.params import SamplingParams
from tt_backend.scheduler.request import Request


@dataclass(frozen=True)
class RequestSampling:
    """What sampling needs of a request beyond its SamplingParams, fixed at admission."""

    seed: int
    """Its seed, or one drawn from the engine's seeded generator."""
    bannable: tuple[int, ...]
    """EOS (unless ignore_eos) and stop_token_ids: banned until min_tokens tokens exist."""
    bad_words: tuple[tuple[int, ...], ...] = ()

    def banned(self, params: SamplingParams, num_output: int) -> tuple[int, ...]:
        return self.bannable if num_output < params.min_tokens else ()

    def needs_host(self, params: SamplingParams, num_output: int) -> bool:
        return params.needs_host or bool(self.banned(params, num_output))


@dataclass(frozen=True)
class SamplingRow:
    request: Request
    sampling: RequestSampling
    grammar: GrammarMatcher | None = None


def device_computes(config: SamplingConfig, params: SamplingParams) -> bool:
    """Whether the device sampler draws this row's token from exactly its distribution: a greedy
    row always; a sampled one within the sampler's top_k and min_p limits."""
    if params.greedy:
        return True
    limit = config.device_max_top_k
    return (limit is None or 1 <= params.top_k <= limit) and (config.device_min_p or params.min_p == 0)


def samples_on_device(config: SamplingConfig, op: StepMode, rows: Sequence[SamplingRow], ahead: int) -> bool:
    """Whether a step of these sampling rows takes the device path: the operation may sample on
    the device, the device sampler computes every row exactly, and no row needs the host."""
    return config.on_device(op) and not any(
        r.sampling.needs_host(r.request.sampling, len(r.request.output_token_ids) + ahead)
        or not device_computes(config, r.request.sampling) for r in rows)


def plan_sampling(config: SamplingConfig, op: StepMode, rows: Sequence[SamplingRow | None],
                  ahead: int = 0) -> SamplingPlan:
    """The step's sampling over its plan rows (None: a row that samples nothing). `ahead`: tokens
    already in flight for each request (async decode). The plan carries a host path (`host`) when
    a row needs the host."""
    sampling = [r for r in rows if r is not None]
    tensors = sampling_tensors(
        [None if r is None else r.request.sampling for r in rows],
        [0 if r is None else r.sampling.seed for r in rows],
        [0 if r is None else r.request.num_tokens + ahead for r in rows])
    if samples_on_device(config, op, sampling, ahead):
        return SamplingPlan(variant_for([r.request.sampling for r in sampling]), tensors)
    host_rows = tuple(HostRow(r.request.sampling, r.request.prompt_token_ids,
                              tuple(r.request.output_token_ids),
                              r.sampling.banned(r.request.sampling, len(r.request.output_token_ids) + ahead),
                              r.sampling.bad_words, r.grammar) for r in sampling)
    sampled_tensors = tensors.rows([i for i, r in enumerate(rows) if r is not None], len(sampling))
    return SamplingPlan(StepVariant.LOGITS, tensors, HostBatch(host_rows, sampled_tensors))
