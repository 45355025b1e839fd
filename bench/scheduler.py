"""Microseconds per scheduling step of one lane (a one-lane LaneCoordinator, no model).

256 requests run (max_num_seqs=256) and 1,000 wait; each measured step is schedule() plus
update() with fake sampled tokens, finishing requests at their output length so waiting ones
get admitted. Prefix caching off and on are run side by side; the ratio is on/off.

    .venv/bin/python bench/scheduler.py
"""

from __future__ import annotations

import random
import time
from collections import Counter

from tt_backend.contract.modes import RequestStatus
from tt_backend.sampling.params import SamplingParams
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import SchedulerConfig

RUNNING, WAITING, STEPS = 256, 1000, 400


def build(caching: bool) -> LaneCoordinator:
    rng = random.Random(0)
    s = LaneCoordinator(SchedulerConfig(
        max_num_seqs=RUNNING, max_num_batched_tokens=8192, max_model_len=4096, block_size=16,
        num_blocks=RUNNING * 64 * 2, enable_prefix_caching=caching), 1)
    lane = s.lanes[0]
    for i in range(RUNNING + WAITING):
        prompt = tuple(rng.randrange(49152) for _ in range(rng.randrange(64, 512)))
        s.add(Request(f"r{i}", prompt, SamplingParams(max_tokens=rng.randrange(32, 256))))
    while lane.waiting and len(lane.running) < RUNNING:  # admit the first 256 before measuring
        step = s.schedule()
        s.update(step, [1] * sum(r.sample for r in step.plan.rows))
    return s


def measure(caching: bool) -> tuple[float, Counter[str]]:
    s = build(caching)
    lane = s.lanes[0]
    assert len(lane.running) == RUNNING and len(lane.waiting) >= WAITING - RUNNING
    modes: Counter[str] = Counter()
    start = time.perf_counter()
    for _ in range(STEPS):
        step = s.schedule()
        modes[step.plan.mode] += 1
        for token in s.update(step, [7] * sum(r.sample for r in step.plan.rows)):
            req = token.request
            if len(req.output_token_ids) >= req.sampling.max_tokens:
                s.finish(req.request_id, RequestStatus.FINISHED_LENGTH)
    return (time.perf_counter() - start) / STEPS * 1e6, modes


def main() -> None:
    off, modes = measure(caching=False)
    on, _ = measure(caching=True)
    print(f"scheduler step (schedule + update), {RUNNING} running / {WAITING} waiting, "
          f"{STEPS} steps {dict(modes)}:")
    print(f"  prefix caching off: {off:8.1f} us/step")
    print(f"  prefix caching on:  {on:8.1f} us/step   ratio on/off {on / off:.2f}")


if __name__ == "__main__":
    main()
