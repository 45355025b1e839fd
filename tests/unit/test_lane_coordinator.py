"""LaneCoordinator: assignment, one mode per step, the zero-admit retry, the deadlock preemption,
merge/split with lane-local block ids and each row's lane and slot, async continuation, isolation."""

from __future__ import annotations

from tt_backend.contract.modes import RequestStatus
from tt_backend.sampling.params import SamplingParams
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import ScheduledStep, SchedulerConfig

BLOCK = 4


def make(lanes: int, num_blocks: int = 16, max_seqs: int = 4, chunked: bool = True,
         budget: int = 64) -> LaneCoordinator:
    return LaneCoordinator(SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget,
                                           max_model_len=64, block_size=BLOCK, num_blocks=num_blocks,
                                           enable_chunked_prefill=chunked), lanes)


def req(rid: str, n: int, max_tokens: int = 32) -> Request:
    return Request(rid, tuple(range(100, 100 + n)), SamplingParams(max_tokens=max_tokens))


def advance(c: LaneCoordinator, step: ScheduledStep, token: int = 7) -> None:
    c.update(step, [token] * sum(row.sample for row in step.plan.rows))


def test_least_loaded_assignment_is_sticky() -> None:
    c = make(3)
    assert [c.add(req(f"r{i}", 3)) for i in range(5)] == [0, 1, 2, 0, 1]
    c.finish("r2", RequestStatus.FINISHED_ABORTED)  # lane 2 is empty now
    assert c.add(req("r5", 3)) == 2
    for _ in range(3):
        advance(c, c.schedule())
    assert c.lane_of == {"r0": 0, "r1": 1, "r3": 0, "r4": 1, "r5": 2}
    for rid, lane in c.lane_of.items():
        assert rid in c.lanes[lane].requests and all(rid not in other.requests
                                                    for i, other in enumerate(c.lanes) if i != lane)


def test_one_mode_for_all_lanes_with_the_decode_cadence() -> None:
    c = make(2, budget=8, num_blocks=32)
    c.add(req("a", 5))  # lane 0
    step = c.schedule()
    assert step.plan.mode == "prefill" and [p.lane for p in step.lanes] == [0]
    advance(c, step)
    c.add(req("b", 12))  # lane 1 (lane 0 holds a): lane 1 wants prefill; 12 tokens take two chunks
    step = c.schedule()
    # Lane 1's prefill makes the whole step a prefill step (a's complete prompt owes no decode step
    # first); lane 0 contributes an empty slice.
    assert step.plan.mode == "prefill" and step.request_ids == ("b",) and [p.lane for p in step.lanes] == [1]
    assert len(step.plan.rows[0].token_ids) == 8
    advance(c, step)
    step = c.schedule()
    assert step.plan.mode == "decode" and step.request_ids == ("a",)  # owed after b's partial chunk
    advance(c, step)
    step = c.schedule()
    assert step.plan.mode == "prefill" and step.request_ids == ("b",)
    assert len(step.plan.rows[0].token_ids) == 4
    advance(c, step)
    step = c.schedule()
    assert step.plan.mode == "decode" and step.request_ids == ("a", "b")


def test_zero_admit_prefill_is_retried_as_decode() -> None:
    # Lane 1 has one free block and its waiting request needs two (no chunking), so it admits no
    # token; it still wants prefill (waiting, with free seats). Without the retry every step would
    # be an empty prefill step and nothing would decode again.
    c = make(2, num_blocks=4, chunked=False)
    for rid, n in (("a", 4), ("z", 9), ("x", 2), ("d", 8)):  # lanes 0, 1, 0, 1
        c.add(req(rid, n))
    assert [c.lane_of[r] for r in "azxd"] == [0, 1, 0, 1]
    step = c.schedule()
    assert step.request_ids == ("a", "x", "z")  # d does not fit lane 1 (3 of 4 blocks are z's)
    advance(c, step)
    for _ in range(4):
        assert c.lanes[1].wants_prefill() and c.lanes[1].waiting[0].request_id == "d"
        step = c.schedule()
        assert step.plan.mode == "decode" and step.request_ids == ("a", "x", "z")
        advance(c, step)
    assert c.lanes[1].requests["d"].status is RequestStatus.WAITING


def test_merge_keeps_lane_local_block_ids_with_each_rows_lane_and_slot_and_split_returns_tokens_by_lane(
) -> None:
    c = make(2, num_blocks=16)
    c.add(req("a", 6))
    c.add(req("b", 3))
    c.add(req("c", 2))
    step = c.schedule()
    assert step.request_ids == ("a", "c", "b")  # lane 0 (a, c), then lane 1 (b)
    a, cc, b = step.plan.rows
    assert (a.block_ids, cc.block_ids, b.block_ids) == ((0, 1), (2,), (0,))  # lane 1's own block 0
    assert [(row.lane, row.slot) for row in step.plan.rows] == [(0, 0), (0, 1), (1, 0)]
    c.update(step, [11, 12, 13])
    assert [c.requests[rid].output_token_ids for rid in "acb"] == [[11], [12], [13]]
    assert c.lanes[1].kv.block_ids("b") == (0,)  # the same ids inside the lane
    step = c.schedule()
    assert step.plan.mode == "decode" and [r.block_ids for r in step.plan.rows] == [(0, 1), (2,), (0,)]
    assert [(row.lane, row.slot) for row in step.plan.rows] == [(0, 0), (0, 1), (1, 0)]
    assert [p.step.request_ids for p in step.lanes] == [("a", "c"), ("b",)]


def test_decode_continuation_keeps_each_rows_lane_and_slot() -> None:
    c = make(2, num_blocks=16, budget=8)
    for rid, n in (("a", 3), ("z", 2), ("b", 3)):  # lanes 0, 1, 0
        c.add(req(rid, n))
    advance(c, c.schedule())
    decode = c.schedule()
    assert decode.plan.mode == "decode" and decode.request_ids == ("a", "b", "z")
    follow = c.schedule_decode_continuation(decode)
    assert follow is not None and follow.request_ids == ("a", "b", "z")
    assert [(row.token_ids, row.start_position, row.lane, row.slot) for row in follow.plan.rows] == [
        ((0,), 4, 0, 0), ((0,), 4, 0, 1), ((0,), 3, 1, 0)]  # one position on; tokens fed back on device
    assert [row.block_ids for row in follow.plan.rows] == [(0, 2), (1, 3), (0,)]  # position 4 opens a block
    assert [p.lane for p in follow.lanes] == [0, 1]
    c.add(req("long", 20))  # lane 1: wants prefill, so the steady path ends
    assert c.schedule_decode_continuation(follow) is None


def test_partial_prefills_that_cannot_continue_preempt_each_lanes_newest_and_reschedule() -> None:
    # Each lane's 20-token prompt outgrows its 4 free blocks after two chunks: nothing can be
    # prefilled and nothing decodes, so each lane preempts its newest (here its only) request and
    # the step is scheduled again, prefilling both from the start.
    c = make(2, num_blocks=4, budget=8)
    c.add(req("a", 20))  # lane 0
    c.add(req("z", 20))  # lane 1
    for start in (0, 8):
        step = c.schedule()
        assert step.plan.mode == "prefill" and step.request_ids == ("a", "z") and not step.preempted
        assert [(row.start_position, len(row.token_ids)) for row in step.plan.rows] == [(start, 8)] * 2
        advance(c, step)
    step = c.schedule()
    assert step.preempted == ("a", "z")
    assert step.plan.mode == "prefill" and step.request_ids == ("a", "z")
    assert [(row.start_position, len(row.token_ids), row.lane, row.slot) for row in step.plan.rows] == [
        (0, 8, 0, 0), (0, 8, 1, 0)]
    assert [lane.stats.preemptions for lane in c.lanes] == [1, 1]


def test_kv_exhaustion_preempts_only_the_lanes_own_requests() -> None:
    c = make(2, num_blocks=3)
    c.add(req("a", 4))  # lane 0
    c.add(req("z", 4))  # lane 1
    c.add(req("b", 4))  # lane 0
    advance(c, c.schedule())  # a and b hold 2 of lane 0's 3 blocks, z 1 of lane 1's
    preempted: list[str] = []
    decodes = 0
    for _ in range(6):  # a and b each need a second block; lane 0 has one left
        step = c.schedule()
        preempted.extend(step.preempted)
        decodes += step.plan.mode == "decode"
        advance(c, step)
    assert preempted and set(preempted) == {"b"}
    assert c.lanes[1].stats.preemptions == 0 and c.lanes[0].stats.preemptions >= 1
    assert c.lanes[1].requests["z"].status is RequestStatus.RUNNING
    # z decoded in every decode step (the others re-prefilled b, in lane 0 alone)
    assert len(c.lanes[1].requests["z"].output_token_ids) == 1 + decodes and decodes >= 4
