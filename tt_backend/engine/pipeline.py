"""StepPipeline: schedule → execute → sample, one step per call, and the async decode overlap.

With `async_scheduling`, steady decode runs one step ahead of the host: step N+1 is scheduled and
launched (its input tokens fed back from step N on the device) before step N's tokens are read,
so the host's update/detokenize/emit of step N overlaps the device's step N+1. At most two steps
are in flight. The pipeline drains (finishes what is in flight, then schedules normally) when a
prefill is due, a request finishes or is aborted, a request would reach its length limit, or a
block for the next position is not free. Steps run ahead only over an AsyncStepRunner, decided
once at construction.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

from tt_backend.contract.modes import StepMode
from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.engine.requests import RequestTable, tokens_left
from tt_backend.engine.step_sampling import plan_sampling, samples_on_device
from tt_backend.runtime.step_runner import AsyncStepRunner, StepRunner
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.scheduled_step import ScheduledStep

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepResult:
    mode: StepMode
    """The mode of the step this call scheduled, launched or completed."""
    done: ScheduledStep | None = None
    """The step whose results are in; None when a step was only launched, or nothing ran."""
    sampled: SampledTokens | None = None
    error: Exception | None = None
    """Why `done` failed (its requests end with it; the engine goes on)."""


@dataclass(frozen=True)
class _InFlight:
    step: ScheduledStep
    handle: int


class StepPipeline:
    def __init__(self, scheduler: LaneCoordinator, runner: StepRunner, requests: RequestTable,
                 async_scheduling: bool, max_model_len: int) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.requests = requests
        self.max_model_len = max_model_len
        self.ahead: AsyncStepRunner | None = None
        """The runner that runs decode ahead; None without async_scheduling."""
        if async_scheduling:
            if not isinstance(runner, AsyncStepRunner):
                raise ValueError(f"async_scheduling=true, but the {type(runner).__name__} cannot launch a "
                                 "step before the previous one is read (no async decode); set "
                                 "async_scheduling=false")
            self.ahead = runner
        self.decode_drains = 0
        self.host_sampling_steps = 0
        self.current: ScheduledStep | None = None
        """The step last handed to the runner or waited on (what a hung step is)."""
        self._inflight: deque[_InFlight] = deque()

    def next(self, run_empty: bool) -> StepResult:
        """Advance by one step. An empty step counts as done only with `run_empty` (new requests
        or aborts came in, so a report follows)."""
        if self._inflight:
            return self._advance()
        step = self.scheduler.schedule()
        if (step.mode is StepMode.DECODE and self.ahead is not None and not step.preempted
                and self._device_decode(step, ahead=0)):
            self._note_admitted(step)
            try:
                self._launch(step, after=None)
            except Exception as exc:  # it never got in flight: it fails as a synchronous step would
                return StepResult(step.mode, step, error=exc)
            return StepResult(step.mode)
        if step.mode is StepMode.EMPTY:
            return StepResult(step.mode, step if run_empty else None)
        self._note_admitted(step)
        self._log_preemptions(step)
        self.current = step
        try:
            sampled = self.runner.run_and_sample(step.plan, self._sampling(step, ahead=0))
        except Exception as exc:  # fail only this step's requests; the engine goes on
            return StepResult(step.mode, step, error=exc)
        return StepResult(step.mode, step, sampled)

    def abandon(self) -> None:
        """Wait for whatever is in flight and drop its results (failure, shutdown)."""
        self.runner.drain()
        self._inflight.clear()

    # ---- async decode: at most two steps in flight -----------------------------------------------
    def _advance(self) -> StepResult:
        """Launch the next decode step if the steady path carries it, then complete the oldest."""
        last = self._inflight[-1]
        if len(self._inflight) < 2:
            follow = None
            if self._can_continue(last.step):
                follow = self.scheduler.schedule_decode_continuation(last.step)
            if follow is None:
                self.decode_drains += 1
            else:
                self._launch(follow, after=last.handle)
        oldest = self._inflight.popleft()
        self.current = oldest.step
        assert self.ahead is not None, "only an async runner has steps in flight"
        try:
            sampled = self.ahead.complete(oldest.handle)
        except Exception as exc:
            self.abandon()
            return StepResult(oldest.step.mode, oldest.step, error=exc)
        return StepResult(oldest.step.mode, oldest.step, sampled)

    def _launch(self, step: ScheduledStep, after: int | None) -> None:
        assert self.ahead is not None, "only an async runner launches ahead"
        self.current = step
        handle = self.ahead.launch(step.plan, self._sampling(step, ahead=len(self._inflight)), after)
        self._inflight.append(_InFlight(step, handle))

    def _device_decode(self, step: ScheduledStep, ahead: int) -> bool:
        """Whether a decode step of these requests samples on the device (async decode needs it:
        the host path needs the previous tokens on the host)."""
        rows = [self.requests[rid].row for rid in step.request_ids if rid in self.requests]
        return samples_on_device(self.runner.sampling, StepMode.DECODE, rows, ahead)

    def _can_continue(self, step: ScheduledStep) -> bool:
        """Whether every request of `step` is live and may take one more token after those in flight."""
        ahead = len(self._inflight)
        for request_id in step.request_ids:
            live = self.requests.get(request_id)
            if live is None or tokens_left(live.request, self.max_model_len) < ahead + 1:
                return False
        return self._device_decode(step, ahead)

    def _sampling(self, step: ScheduledStep, ahead: int) -> SamplingPlan:
        """The step's sampling: on the device, or the host path when a row needs it. `ahead`: tokens
        already in flight for each request (async decode), which count toward min_tokens."""
        rows = [self.requests[rid].row if row.sample else None
                for rid, row in zip(step.request_ids, step.plan.rows, strict=True)]
        sampling = plan_sampling(self.runner.sampling, step.mode, rows, ahead)
        if sampling.host is not None:
            self.host_sampling_steps += 1
        return sampling

    def _note_admitted(self, step: ScheduledStep) -> None:
        now = time.monotonic()
        for request_id in step.request_ids:
            live = self.requests[request_id]
            live.admitted = live.admitted or now

    def _log_preemptions(self, step: ScheduledStep) -> None:
        for request_id in step.preempted:
            lane = self.scheduler.lane_of[request_id]
            logger.info("lane %d: preempted %s by recompute (its KV blocks are exhausted; %d preemptions "
                        "so far)", lane, request_id, self.scheduler.lanes[lane].stats.preemptions)
