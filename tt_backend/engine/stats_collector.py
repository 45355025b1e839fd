"""StatsCollector: one EngineStats per lane after each step, gathered from the lane coordinator
(queues, KV usage, preemptions, prefix-cache counters), the execution counters (eager and traced
steps, decode drains, host-sampling steps) and what output processing tells it (tokens, finished
requests)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tt_backend.contract.modes import StepMode
from tt_backend.engine.stats import EngineStats, FinishedRequestStats
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.phase_scheduler import SchedulerStats
from tt_backend.scheduler.scheduled_step import ScheduledStep

StatsListener = Callable[[EngineStats], None]
ExecutionCounters = Callable[[], tuple[int, ...]]
"""Totals so far, as _NO_EXECUTION lists them."""

GrammarCounters = Callable[[], tuple[list[float], int]]
"""Grammar compile times and compile-cache hits since the last call."""

_NO_EXECUTION: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
"""eager steps, traced steps, decode drains, host-sampling steps, encoder-cache queries and hits."""


class StatsCollector:
    def __init__(self, scheduler: LaneCoordinator, counters: ExecutionCounters,
                 grammars: GrammarCounters | None = None) -> None:
        self.scheduler = scheduler
        self.listener: StatsListener | None = None
        self._counters = counters
        self._grammars = grammars
        lanes = range(len(scheduler.lanes))
        self._finished: dict[int, list[FinishedRequestStats]] = {lane: [] for lane in lanes}
        self._prompt_tokens = dict.fromkeys(lanes, 0)  # since the last report
        self._generation_tokens = dict.fromkeys(lanes, 0)
        self._intervals: dict[int, list[float]] = {lane: [] for lane in lanes}
        self._reported = {lane: SchedulerStats() for lane in lanes}
        self._reported_counters = _NO_EXECUTION

    def on_token(self, lane: int, num_prompt_tokens: int, since_previous: float | None) -> None:
        """A generated token, `since_previous` seconds after the request's previous one; the
        request's first (None) also counts its prompt."""
        if since_previous is None:
            self._prompt_tokens[lane] += num_prompt_tokens
        else:
            self._intervals[lane].append(since_previous)
        self._generation_tokens[lane] += 1

    def on_finished(self, lane: int, stats: FinishedRequestStats) -> None:
        self._finished[lane].append(stats)

    @property
    def has_finished(self) -> bool:
        """Whether finished requests wait for the next report."""
        return any(self._finished.values())

    def report(self, step: ScheduledStep | None) -> None:
        """One EngineStats per lane. A lane's step mode is the step's if it had rows in it, else
        `empty`; execution counters (eager/traced steps, drains) go to the lanes that had rows."""
        if self.listener is None:
            return
        took_part = set() if step is None else self.scheduler.lanes_in(step)
        now = self._counters()
        executed = tuple(a - b for a, b in zip(now, self._reported_counters, strict=True))
        self._reported_counters = now
        compiled, hits = self._grammars() if self._grammars is not None else ([], 0)
        for lane, sched in enumerate(self.scheduler.lanes):
            last = self._reported[lane]
            mode: StepMode | None = None
            if step is not None:
                mode = step.mode if lane in took_part else StepMode.EMPTY
            counts = executed if lane in took_part else _NO_EXECUTION
            tokens = None
            if step is not None and lane in took_part:
                tokens = sum(len(row.token_ids) for part in step.lanes if part.lane == lane
                             for row in part.step.plan.rows)
            stats = EngineStats(
                lane=lane, step_mode=mode, num_running=len(sched.running),
                num_waiting=len(sched.waiting) + len(sched.skipped), kv_cache_usage=sched.pool.usage,
                prompt_tokens=self._prompt_tokens[lane], generation_tokens=self._generation_tokens[lane],
                preemptions=sched.stats.preemptions - last.preemptions,
                prefix_cache_queries=sched.stats.prefix_cache_queries - last.prefix_cache_queries,
                prefix_cache_hits=sched.stats.prefix_cache_hits - last.prefix_cache_hits,
                eager_steps=counts[0], traced_steps=counts[1], decode_drains=counts[2],
                host_sampling_steps=counts[3], mm_cache_queries=counts[4], mm_cache_hits=counts[5],
                num_parked=len(sched.skipped),
                grammar_compile_seconds=tuple(compiled) if lane == 0 else (),
                grammar_cache_hits=hits if lane == 0 else 0,
                finished=tuple(self._finished[lane]), step_tokens=tokens,
                inter_token_latencies=tuple(self._intervals[lane]))
            self._reported[lane] = dataclasses.replace(sched.stats)
            self._prompt_tokens[lane] = self._generation_tokens[lane] = 0
            self._finished[lane] = []
            self._intervals[lane] = []
            self.listener(stats)
