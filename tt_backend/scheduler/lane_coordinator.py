"""LaneCoordinator: in-process data-parallel lanes, one PhaseScheduler each, one step for all.

Each lane has its own waiting/running queues, admission, slots and KV block pool with lane-local
block ids. A new request goes to the least-loaded lane (fewest requests; the lowest lane on a
tie) and stays there. Every step has one mode for all lanes:
- if any lane could admit prefill work, and no decode steps are owed, every lane runs a prefill
  step (a lane without prefill work contributes an empty slice); after a prefill step that leaves
  a prompt partly prefilled in any lane, while any lane has requests ready to decode, the next
  `decode_steps_between_prefills` steps are decode steps (the one-lane cadence, applied to all);
- a prefill step that admits nothing while a lane has running decode work is retried as decode
  (so KV pressure in one lane cannot stall the loop);
- otherwise every lane runs a decode step.
The lanes' slices are merged into one plan: rows lane by lane, each lane's rows in its own order
(decode: slot order), block ids offset into the lane's region of one physical cache (lane l's
block b is physical block l × blocks_per_lane + b). One forward runs the merged batch; its
sampled tokens are split back by lane.
"""

from __future__ import annotations

from dataclasses import replace

from tt_backend.contract.modes import RequestStatus, StepMode
from tt_backend.contract.step import EMPTY_STEP, PlannedRow, StepPlan
from tt_backend.scheduler.phase_scheduler import PhaseScheduler
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import (
    DecodeCadence,
    LaneSlice,
    SampledToken,
    ScheduledStep,
    SchedulerConfig,
)


class LaneCoordinator:
    def __init__(self, config: SchedulerConfig, num_lanes: int) -> None:
        assert num_lanes >= 1
        self.config = config
        """Per lane: max_num_seqs and num_blocks are each lane's."""
        self.lanes = tuple(PhaseScheduler(config) for _ in range(num_lanes))
        self.lane_of: dict[str, int] = {}
        self.cadence = DecodeCadence(config.decode_steps_between_prefills)

    # ---- intake and exit -------------------------------------------------------------------
    def add(self, request: Request) -> int:
        """Bind the request to the least-loaded lane; return that lane."""
        lane = min(range(len(self.lanes)), key=lambda i: (len(self.lanes[i].requests), i))
        self.lanes[lane].add(request)
        self.lane_of[request.request_id] = lane
        return lane

    def finish(self, request_id: str, status: RequestStatus) -> Request | None:
        lane = self.lane_of.pop(request_id, None)
        return None if lane is None else self.lanes[lane].finish(request_id, status)

    @property
    def has_work(self) -> bool:
        return bool(self.lane_of)

    @property
    def requests(self) -> dict[str, Request]:
        return {rid: self.lanes[lane].requests[rid] for rid, lane in self.lane_of.items()}

    # ---- scheduling -----------------------------------------------------------------------
    def schedule(self) -> ScheduledStep:
        if len(self.lanes) == 1:  # one lane keeps its own policy (the same rules, in one place)
            return self._merge([self.lanes[0].schedule()])
        wants_prefill = [lane.wants_prefill() for lane in self.lanes]
        decode_ready = any(lane.decode_ready for lane in self.lanes)
        if any(wants_prefill) and not (decode_ready and self.cadence.owed > 0):
            steps = [lane.schedule(StepMode.PREFILL) if want else ScheduledStep(EMPTY_STEP, ())
                     for lane, want in zip(self.lanes, wants_prefill, strict=True)]
            preempted = [rid for step in steps for rid in step.preempted]
            if not any(step.request_ids for step in steps) and decode_ready:
                steps = [lane.schedule(StepMode.DECODE) for lane in self.lanes]  # zero-admit: decode instead
                steps[0] = replace(steps[0], preempted=(*preempted, *steps[0].preempted))
            elif not any(step.request_ids for step in steps):
                # Every running request is a partial prefill holding blocks none can extend: let
                # each lane resolve its own deadlock (it preempts its newest and retries).
                steps = [lane.schedule() if lane.running else ScheduledStep(EMPTY_STEP, ())
                         for lane in self.lanes]
        else:
            steps = [lane.schedule(StepMode.DECODE) for lane in self.lanes]
        merged = self._merge(steps)
        self.cadence.record(merged.plan.mode, any(lane.prompt_left_partial(step)
                                                  for lane, step in zip(self.lanes, steps, strict=True)))
        return merged

    def schedule_decode_continuation(self, previous: ScheduledStep) -> ScheduledStep | None:
        """The next decode step of every lane that took part in `previous` (async decode), or
        None if any of them cannot continue."""
        steps: list[ScheduledStep] = []
        for part in previous.lanes:
            follow = self.lanes[part.lane].schedule_decode_continuation(part.step)
            if follow is None:
                return None
            steps.append(follow)
        self.cadence.record(StepMode.DECODE)
        return self._merge(steps, [part.lane for part in previous.lanes])

    def update(self, step: ScheduledStep, sampled: list[int]) -> list[SampledToken]:
        """Split the merged step's sampled tokens by lane and record each lane's part."""
        out: list[SampledToken] = []
        first = 0
        for part in step.lanes:
            n = part.step.plan.num_sampled
            out.extend(self.lanes[part.lane].update(part.step, sampled[first:first + n]))
            first += n
        assert first == len(sampled), "more sampled tokens than sampling rows"
        return out

    # ---- merge ------------------------------------------------------------------------------
    def _merge(self, steps: list[ScheduledStep], lanes: list[int] | None = None) -> ScheduledStep:
        lanes = list(range(len(steps))) if lanes is None else lanes
        parts = tuple(LaneSlice(lane, step) for lane, step in zip(lanes, steps, strict=True)
                      if step.request_ids)
        preempted = tuple(rid for step in steps for rid in step.preempted)
        if not parts:
            return ScheduledStep(EMPTY_STEP, (), preempted)
        modes = {part.step.plan.mode for part in parts}
        assert len(modes) == 1, f"lanes disagree on the step's mode: {modes}"
        rows = tuple(self._physical(part.lane, row) for part in parts for row in part.step.plan.rows)
        ids = tuple(rid for part in parts for rid in part.step.request_ids)
        return ScheduledStep(StepPlan(modes.pop(), rows), ids, preempted, parts)

    def lanes_in(self, step: ScheduledStep) -> set[int]:
        """The lanes that have rows in `step`."""
        return {part.lane for part in step.lanes}

    def _physical(self, lane: int, row: PlannedRow) -> PlannedRow:
        if lane == 0:
            return row
        base = lane * self.config.num_blocks
        return replace(row, block_ids=tuple(base + b for b in row.block_ids))
