"""LaneCoordinator: in-process data-parallel lanes, one PhaseScheduler each, one step for all.

Each lane has its own waiting/running queues, admission, slots and KV block pool with lane-local
block ids. A new request goes to the least-loaded lane (fewest requests; the lowest lane on a
tie) and stays there. The coordinator owns the mode policy (from the serving design), the same
for one lane or many; every step has one mode for all lanes:
- prefill first: if any lane could admit prefill work, every lane that could runs a prefill step
  (the others contribute an empty slice), so decode steps run with bigger batches and new
  requests get their first token without waiting behind decode steps;
- but after a prefill step that leaves a prompt partly prefilled in any lane, while any lane has
  requests ready to decode, the next `decode_steps_between_prefills` steps are decode steps, so
  running streams keep advancing between the chunks of a long prompt;
- a prefill step that admits nothing while a lane has requests ready to decode is retried as a
  decode step in the same call (decode frees blocks; KV pressure in one lane cannot stall the loop);
- a prefill step that admits nothing while no lane can decode means every running request is a
  partial prefill holding blocks none can extend: each such lane preempts its newest, and the
  step is scheduled again;
- otherwise every lane runs a decode step.
The lanes' slices are merged into one plan: rows lane by lane, each lane's rows in its own order
(decode: slot order), each row carrying its lane and slot, block ids lane-local (each runner maps
a lane's ids onto its own cache region). One forward runs the merged batch; its sampled tokens are
split back by lane.
"""

from __future__ import annotations

from dataclasses import replace

from tt_backend.contract.modes import RequestStatus, StepMode
from tt_backend.contract.step import EMPTY_STEP, StepPlan
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
        self.lanes = tuple(PhaseScheduler(config, lane) for lane in range(num_lanes))
        self.lane_of: dict[str, int] = {}
        self.cadence = DecodeCadence(config.decode_steps_between_prefills)
        """Decode steps owed, for all lanes at once: recorded here only, for every step handed out."""

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
        """The next step of every lane, one mode for all (the policy above)."""
        wants_prefill = [lane.wants_prefill() for lane in self.lanes]
        decode_ready = any(lane.decode_ready for lane in self.lanes)
        if not any(wants_prefill) or (decode_ready and self.cadence.owed > 0):
            steps = [lane.schedule(StepMode.DECODE) for lane in self.lanes]
        else:
            steps = [lane.schedule(StepMode.PREFILL) if want else ScheduledStep(EMPTY_STEP, ())
                     for lane, want in zip(self.lanes, wants_prefill, strict=True)]
            if not any(step.request_ids for step in steps):  # (a prefill step preempts nothing)
                if decode_ready:  # zero-admit prefill: decode instead, it frees blocks
                    steps = [lane.schedule(StepMode.DECODE) for lane in self.lanes]
                elif victims := [lane.preempt_newest() for lane in self.lanes if lane.running]:
                    retry = self.schedule()  # (it records the cadence)
                    return replace(retry, preempted=(*victims, *retry.preempted))
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
        rows = tuple(row for part in parts for row in part.step.plan.rows)
        ids = tuple(rid for part in parts for rid in part.step.request_ids)
        return ScheduledStep(StepPlan(modes.pop(), rows), ids, preempted, parts)

    def lanes_in(self, step: ScheduledStep) -> set[int]:
        """The lanes that have rows in `step`."""
        return {part.lane for part in step.lanes}
