"""What the engine reports after each step, for metrics. Counters are deltas since the last
report; gauges are current values; finished requests carry their latencies."""

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
    num_parked: int = 0
    """Waiting requests parked in skipped_waiting (their grammar is compiling); in num_waiting too."""
    grammar_compile_seconds: tuple[float, ...] = ()
    """Structured-output grammars compiled since the last report (engine-wide: on lane 0)."""
    grammar_cache_hits: int = 0
    finished: tuple[FinishedRequestStats, ...] = field(default_factory=tuple)
