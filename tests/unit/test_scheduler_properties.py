"""Property tests: one lane's scheduler, under the coordinator's mode policy and random workloads,
keeps its invariants.

A small simulation plays the engine: it adds requests as they arrive, aborts some, runs each
scheduled step with a fake sampler, finishes requests at their output length, and checks after
every step that
- no step mixes prefill and decode, and rows continue exactly where each request stopped, in
  the lane and at the slot their request holds;
- KV is never over capacity, and each block is referenced exactly by the requests holding it;
- when decode work exists, a decode step comes within the configured cadence;
and at the end that every request finished or was aborted and every block is free.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tt_backend.contract.modes import RequestStatus
from tt_backend.sampling.params import SamplingParams
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.phase_scheduler import PhaseScheduler
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import SchedulerConfig

BLOCK = 4
MAX_LEN = 48


@dataclass(frozen=True)
class Arrival:
    step: int
    prefix: int  # which shared prefix the prompt starts with
    prompt_len: int
    output_len: int
    abort_after: int | None
    parked_steps: int


arrivals = st.builds(
    Arrival,
    step=st.integers(0, 30),
    prefix=st.integers(0, 2),
    prompt_len=st.integers(1, 30),
    output_len=st.integers(1, 18),
    abort_after=st.none() | st.integers(0, 25),
    parked_steps=st.sampled_from([0, 0, 0, 3]),
)


@dataclass(frozen=True)
class Setup:
    num_blocks: int
    budget: int
    max_seqs: int
    chunked: bool
    caching: bool
    cadence: int


setups = st.builds(
    Setup,
    num_blocks=st.integers(MAX_LEN // BLOCK, 40),
    budget=st.sampled_from([8, 16, 64]),
    max_seqs=st.integers(1, 6),
    chunked=st.booleans(),
    caching=st.booleans(),
    cadence=st.integers(0, 2),
)


def prompt(a: Arrival, index: int) -> tuple[int, ...]:
    shared = [1000 * (a.prefix + 1) + i for i in range(12)]
    return tuple((shared + [index * 100 + i for i in range(30)])[: a.prompt_len])


def fake_token(request: Request) -> int:
    return (hash(request.request_id) + request.num_tokens) % 997


@settings(max_examples=150, deadline=None)
@given(setup=setups, workload=st.lists(arrivals, min_size=1, max_size=12))
def test_scheduler_invariants(setup: Setup, workload: list[Arrival]) -> None:
    budget = setup.budget if setup.chunked else max(setup.budget, MAX_LEN)
    c = LaneCoordinator(SchedulerConfig(
        max_num_seqs=setup.max_seqs, max_num_batched_tokens=budget, max_model_len=MAX_LEN,
        block_size=BLOCK, num_blocks=setup.num_blocks, enable_chunked_prefill=setup.chunked,
        enable_prefix_caching=setup.caching, decode_steps_between_prefills=setup.cadence), 1)
    s = c.lanes[0]
    live: dict[str, Arrival] = {}
    added_at: dict[str, int] = {}
    ended: set[str] = set()
    decode_owed = 0
    total = sum(a.prompt_len + a.output_len for a in workload)
    for step_no in range(60 * total + 200):
        for i, a in enumerate(workload):
            if a.step == step_no:
                rid = f"r{i}"
                ready_at = step_no + a.parked_steps
                req = Request(rid, prompt(a, i), SamplingParams(max_tokens=a.output_len),
                              precondition=(lambda t=ready_at, n=[step_no]: _tick(n) >= t)
                              if a.parked_steps else None)
                c.add(req)
                live[rid], added_at[rid] = a, step_no
        for rid, a in list(live.items()):
            if a.abort_after is not None and step_no - added_at[rid] == a.abort_after:
                assert c.finish(rid, RequestStatus.FINISHED_ABORTED) is not None
                del live[rid]
                ended.add(rid)
        if not c.has_work and all(a.step < step_no for a in workload):
            break

        decode_ready_before = any(not r.is_prefilling for r in s.running)
        computed_before = {rid: r.num_computed_tokens for rid, r in s.requests.items()}
        step = c.schedule()
        mode = step.plan.mode
        if decode_owed > 0 and decode_ready_before:
            assert mode == "decode", "a decode step was owed after prefill"
        for row, rid in zip(step.plan.rows, step.request_ids, strict=True):
            req = s.requests[rid]
            assert req.status is RequestStatus.RUNNING
            assert (row.lane, row.slot) == (0, req.slot)
            if rid not in step.preempted:
                # Rows continue exactly where the request stopped (prefix hits count as done).
                assert row.start_position == req.num_computed_tokens
                assert row.start_position >= computed_before[rid] or computed_before[rid] == 0
            if mode == "decode":
                assert not req.is_prefilling and row.start_position == req.num_tokens - 1
            else:
                assert req.is_prefilling and row.context_len <= req.prefill_target
            assert len(row.block_ids) * BLOCK >= row.context_len
        check_blocks(s)
        if mode == "prefill":  # owed only while a prompt is left partly prefilled
            partial = any(not row.sample for row in step.plan.rows) or any(
                r.is_prefilling and r.request_id not in step.request_ids for r in s.running)
            decode_owed = setup.cadence if partial else 0
        elif mode == "decode":
            decode_owed = max(0, decode_owed - 1)

        sampled = [fake_token(s.requests[rid]) for rid, row in zip(step.request_ids, step.plan.rows,
                                                                   strict=True) if row.sample]
        for token in c.update(step, sampled):
            req = token.request
            if len(req.output_token_ids) >= live[req.request_id].output_len:
                c.finish(req.request_id, RequestStatus.FINISHED_LENGTH)
                del live[req.request_id]
                ended.add(req.request_id)
        check_blocks(s)
    event(f"preempted: {s.stats.preemptions > 0}")
    event(f"prefix hits: {s.stats.prefix_cache_hits > 0}")
    event(f"parked: {any(a.parked_steps for a in workload)}")
    event(f"chunked prompt: {setup.chunked and any(a.prompt_len > setup.budget for a in workload)}")
    assert not c.has_work, f"unfinished: {[(r.request_id, r.status) for r in s.requests.values()]}"
    assert ended == {f"r{i}" for i in range(len(workload))}
    assert s.pool.num_free == setup.num_blocks


def _tick(counter: list[int]) -> int:
    counter[0] += 1
    return counter[0]


def check_blocks(s: PhaseScheduler) -> None:
    held = Counter(b for r in s.requests.values() for b in s.kv.block_ids(r.request_id))
    assert all(s.pool.ref_count(b) == n for b, n in held.items())
    assert len(held) + s.pool.num_free == s.pool.num_blocks
    for r in s.requests.values():
        if r.status is not RequestStatus.RUNNING:
            assert s.kv.block_ids(r.request_id) == (), f"{r.request_id} holds blocks while {r.status}"
