"""What the engine reports after each step, for metrics. Counters are deltas since the last
report; gauges are current values; finished requests carry their latencies, measured as vLLM
measures them: queue = arrival to first scheduled, prefill = first scheduled to first token,
decode = first to last token, inference = first scheduled to last token."""

from __future__ import annotations

from dataclasses import dataclass, field

from tt_backend.contract.modes import FinishReason, StepMode


@dataclass(frozen=True)
class FinishedRequestStats:
    reason: FinishReason
    num_prompt_tokens: int
    num_generation_tokens: int
    queue_time_s: float | None
    """Arrival to first admission; None if never admitted."""
    ttft_s: float | None
    """Arrival to first generated token; None if none was generated."""
    e2e_s: float
    time_per_output_token_s: float | None
    """Mean interval between generated tokens; None with fewer than two."""
    prefill_time_s: float | None = None
    """First scheduled to first token; None if either never happened."""
    decode_time_s: float | None = None
    """First to last token; None if none was generated."""
    inference_time_s: float | None = None
    """First scheduled to last token; None if no token was generated."""


@dataclass(frozen=True)
class EngineStats:
    lane: int
    step_mode: StepMode | None
    """Mode of the step this report follows; None when no step ran (e.g. an abort arrived)."""
    num_running: int
    num_waiting: int
    kv_cache_usage: float
    """Fraction of KV blocks referenced by requests (cached, unreferenced blocks count as free)."""
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    eager_steps: int = 0
    traced_steps: int = 0
    """Steps executed by replaying traces (the others ran eagerly)."""
    decode_drains: int = 0
    """Times the async decode pipeline stopped running ahead and drained."""
    host_sampling_steps: int = 0
    """Steps whose batch sampled on the host (a row needed logits: logprobs, penalties, ...)."""
    mm_cache_queries: int = 0
    """Images whose encoder output a prefill asked for (vLLM's name; here the encoder cache)."""
    mm_cache_hits: int = 0
    """Of those, the ones read from the cache without running the encoder."""
    num_parked: int = 0
    """Waiting requests parked in skipped_waiting (their grammar is compiling); in num_waiting too."""
    grammar_compile_seconds: tuple[float, ...] = ()
    """Structured-output grammars compiled since the last report (engine-wide: on lane 0)."""
    grammar_cache_hits: int = 0
    finished: tuple[FinishedRequestStats, ...] = field(default_factory=tuple)
    step_tokens: int | None = None
    """Tokens the lane computed in this step (prompt tokens prefilled, one per decode row); None
    when the lane had no rows in it."""
    inter_token_latencies: tuple[float, ...] = ()
    """For each token generated since the last report after a request's first: the seconds since
    that request's previous token."""


@dataclass(frozen=True)
class CacheInfo:
    """The KV cache's configuration, for `vllm:cache_config_info`."""

    block_size: int
    num_blocks: int
    """Per lane."""
    dtype: str
    prefix_caching: bool
