"""One lane under the LaneCoordinator's mode policy: exact steps, blocks, slots and preemptions."""

from tt_backend.contract.modes import RequestStatus, StepMode
from tt_backend.sampling.params import SamplingParams
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import SchedulerConfig


def make(num_blocks: int = 16, budget: int = 64, max_seqs: int = 4, block_size: int = 4,
         chunked: bool = True, prefill_tokens: int = 0) -> LaneCoordinator:
    return LaneCoordinator(SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget,
                                           max_model_len=64, block_size=block_size,
                                           num_blocks=num_blocks, enable_chunked_prefill=chunked,
                                           max_prefill_tokens=prefill_tokens), 1)


def req(rid: str, n: int, max_tokens: int = 8) -> Request:
    return Request(rid, tuple(range(100, 100 + n)), SamplingParams(max_tokens=max_tokens))


def test_prefill_then_decode_with_exact_blocks() -> None:
    s = make()
    s.add(req("a", 6))
    s.add(req("b", 3))
    step = s.schedule()
    assert step.plan.mode == "prefill" and step.request_ids == ("a", "b")
    a, b = step.plan.rows
    assert (a.token_ids, a.start_position, a.block_ids, a.sample) == (tuple(range(100, 106)), 0, (0, 1), True)
    assert (b.block_ids, b.sample) == ((2,), True)
    assert [(row.lane, row.slot) for row in step.plan.rows] == [(0, 0), (0, 1)]
    s.update(step, [7, 8])
    step = s.schedule()
    assert step.plan.mode == "decode" and step.request_ids == ("a", "b")
    a, b = step.plan.rows
    assert (a.token_ids, a.start_position, a.block_ids) == ((7,), 6, (0, 1))
    # b's 4th token (position 3) still fits its first block.
    assert (b.token_ids, b.start_position, b.block_ids) == ((8,), 3, (2,))
    assert [(row.lane, row.slot) for row in step.plan.rows] == [(0, 0), (0, 1)]
    s.update(step, [9, 10])
    assert s.schedule().plan.rows[1].block_ids == (2, 3)  # position 4 opens b's second block


def test_long_prompt_is_chunked_and_decode_interleaves() -> None:
    s = make(num_blocks=32, budget=8)
    s.add(req("short", 2))
    first = s.schedule()
    s.update(first, [1])
    s.add(req("long", 20))
    modes, chunks = [], []
    for _ in range(6):
        step = s.schedule()
        modes.append(step.plan.mode)
        if step.plan.mode == "prefill":
            row = step.plan.rows[0]
            chunks.append((row.start_position, len(row.token_ids), row.sample, row.slot))
        s.update(step, [5] * sum(r.sample for r in step.plan.rows))
    # A decode step after each chunk that leaves the prompt partial; none before its first chunk.
    assert modes == ["prefill", "decode", "prefill", "decode", "prefill", "decode"]
    assert chunks == [(0, 8, False, 1), (8, 8, False, 1), (16, 4, True, 1)]  # every chunk in long's slot


def test_a_burst_is_prefilled_back_to_back_before_decode() -> None:
    s = make(budget=6)
    s.add(req("a", 6))
    s.update(s.schedule(), [1])  # a decodes from now on
    for rid in "bcd":
        s.add(req(rid, 6))  # one prompt per step fits the budget
    modes, ids = [], []
    for _ in range(4):
        step = s.schedule()
        modes.append(step.plan.mode)
        ids.append(step.request_ids)
        s.update(step, [5] * sum(r.sample for r in step.plan.rows))
    # Each prompt completes in its step, so no decode step is owed between them.
    assert modes == ["prefill", "prefill", "prefill", "decode"]
    assert ids == [("b",), ("c",), ("d",), ("a", "b", "c", "d")]


def test_a_prompt_that_fits_a_step_of_its_own_is_not_chunked_to_fill_one() -> None:
    s = make(budget=8)
    for rid in "abc":
        s.add(req(rid, 3))
    first = s.schedule()
    # c fits no more than 2 of the budget's last tokens: it waits whole for the next step, which
    # follows at once (no decode step is owed: no prompt was left partial).
    assert first.request_ids == ("a", "b") and [len(r.token_ids) for r in first.plan.rows] == [3, 3]
    s.update(first, [1, 2])
    second = s.schedule()
    assert second.plan.mode == "prefill" and second.request_ids == ("c",)
    assert [(r.start_position, len(r.token_ids), r.sample) for r in second.plan.rows] == [(0, 3, True)]


def test_max_prefill_tokens_splits_a_burst_into_smaller_prefill_steps() -> None:
    """5 prompts of 6 tokens, max_prefill_tokens=13 of a 64-token budget: two prompts a step (a
    third would make 18), the last alone; a prompt longer than the cap starts a step alone, whole,
    not chunked to it; decode follows once every prompt has its first token."""
    s = make(num_blocks=32, budget=64, max_seqs=8, prefill_tokens=13)
    assert s.config.max_prefill_tokens == 13 and make().config.max_prefill_tokens == 64  # 0: the budget
    for rid in "abcde":
        s.add(req(rid, 6))
    s.add(req("long", 20))
    steps = []
    for _ in range(5):
        step = s.schedule()
        steps.append((step.plan.mode, step.request_ids, [len(r.token_ids) for r in step.plan.rows]))
        s.update(step, [5] * sum(r.sample for r in step.plan.rows))
    assert steps == [("prefill", ("a", "b"), [6, 6]), ("prefill", ("c", "d"), [6, 6]),
                     ("prefill", ("e",), [6]), ("prefill", ("long",), [20]),
                     ("decode", ("a", "b", "c", "d", "e", "long"), [1] * 6)]


def test_a_prompt_longer_than_the_budget_is_still_chunked_behind_others() -> None:
    s = make(num_blocks=32, budget=8)
    s.add(req("a", 3))
    s.add(req("long", 12))
    first = s.schedule()
    assert first.request_ids == ("a",)  # long opens the next step, as a chunk of the whole budget
    s.update(first, [1])
    second = s.schedule()
    assert second.request_ids == ("long",)
    assert [(r.start_position, len(r.token_ids), r.sample) for r in second.plan.rows] == [(0, 8, False)]


def test_unchunked_prompt_waits_for_budget() -> None:
    s = make(budget=8, chunked=False)
    s.add(req("big", 9))
    assert s.schedule().plan.mode == "empty"


def test_decode_preempts_newest_and_resume_recomputes() -> None:
    s = make(num_blocks=3, block_size=4)
    lane = s.lanes[0]
    s.add(req("old", 4))
    s.add(req("new", 4))
    step = s.schedule()
    assert [r.block_ids for r in step.plan.rows] == [(0,), (1,)]
    s.update(step, [1, 2])
    # Both need a second block for position 4; only one is free: "new" is preempted.
    step = s.schedule()
    assert step.plan.mode == "decode" and step.request_ids == ("old",)
    assert step.preempted == ("new",)
    assert step.plan.rows[0].block_ids == (0, 2)
    new = s.requests["new"]
    assert (new.status, lane.kv.block_ids("new"), new.num_computed_tokens) == (RequestStatus.PREEMPTED, (), 0)
    s.update(step, [3])
    s.finish("old", RequestStatus.FINISHED_STOPPED)
    step = s.schedule()
    # Resume: prompt and the token sampled before preemption are prefilled again.
    assert step.plan.mode == "prefill" and step.request_ids == ("new",)
    assert step.plan.rows[0].token_ids == (100, 101, 102, 103, 2)
    assert lane.pool.num_free == 3 - 2


def test_zero_admit_prefill_falls_back_to_decode() -> None:
    s = make(num_blocks=2, block_size=4)
    s.add(req("a", 4))
    s.update(s.schedule(), [1])  # a prefilled into block 0
    step = s.schedule()  # the decode after a prefill: position 4 takes block 1
    assert step.plan.mode == "decode" and step.plan.rows[0].block_ids == (0, 1)
    s.update(step, [2])
    s.add(req("b", 8))  # waiting, and no block is free for any of its tokens
    step = s.schedule()
    # Prefill is due (last step was decode) but admits nothing: the step is a decode of "a",
    # not an empty step that would stall it forever.
    assert step.plan.mode == "decode" and step.request_ids == ("a",)
    assert s.requests["b"].status is RequestStatus.WAITING


def test_abort_in_every_state_frees_blocks() -> None:
    s = make(num_blocks=8, budget=4)
    s.add(req("w", 4))
    s.add(req("r", 4))
    s.add(req("c", 8))
    step = s.schedule()  # admits w only (budget 4)
    s.update(step, [1])
    step = s.schedule()  # prefill r, not yet run: w decodes, r prefills, c waits
    assert step.request_ids == ("r",)
    for rid in ("w", "r", "c"):
        assert s.finish(rid, RequestStatus.FINISHED_ABORTED) is not None
    assert s.lanes[0].pool.num_free == 8 and not s.has_work
    assert s.finish("w", RequestStatus.FINISHED_ABORTED) is None


def test_slots_are_taken_lowest_first_released_on_finish_and_preemption() -> None:
    s = make(num_blocks=16, max_seqs=3)
    lane = s.lanes[0]
    for rid in "abc":
        s.add(req(rid, 3))
    step = s.schedule()
    s.update(step, [1, 2, 3])
    assert [s.requests[r].slot for r in "abc"] == [0, 1, 2]
    s.finish("a", RequestStatus.FINISHED_ABORTED)
    s.add(req("d", 3))
    step = s.schedule()  # d is admitted into a's slot
    assert step.plan.mode == "prefill" and s.requests["d"].slot == 0 and step.plan.rows[0].slot == 0
    s.update(step, [6])
    step = s.schedule()
    assert step.plan.mode == "decode" and step.request_ids == ("d", "b", "c")  # slot order
    assert [row.slot for row in step.plan.rows] == [0, 1, 2]
    lane._preempt(lane.requests["b"])
    assert s.requests["b"].slot is None and s.requests["b"].status is RequestStatus.PREEMPTED
    resumed = lane.schedule(StepMode.PREFILL)
    assert resumed.request_ids == ("b",) and s.requests["b"].slot == 1  # resumed into a free slot
    assert (resumed.plan.rows[0].lane, resumed.plan.rows[0].slot) == (0, 1)


def test_a_cross_attention_request_holds_its_images_blocks_from_admission() -> None:
    """A request whose images' cross-attention keys and values take 22 tokens (kv_floor) holds 6
    blocks of 4 from its first chunk on, though its prompt needs 2, and its rows carry the images;
    a second such request waits while its floor does not fit, and gets in once the first finishes."""
    from tt_backend.contract.step import ImageSpan

    image = ImageSpan("pic", 2, 1, cross_tokens=22, cross_seen=15)
    s = make(num_blocks=10)
    first = Request("a", tuple(range(100, 106)), SamplingParams(max_tokens=8), images=(image,))
    second = Request("b", tuple(range(100, 106)), SamplingParams(max_tokens=8), images=(image,))
    assert first.kv_floor == 22 and first.cross_images == (image,) and first.rope_images == ()
    s.add(first)
    s.add(second)
    step = s.schedule()
    assert step.request_ids == ("a",) and step.plan.rows[0].block_ids == tuple(range(6))
    assert step.plan.rows[0].cross_images == (image,)
    s.update(step, [7])
    step = s.schedule()
    assert step.plan.mode == "decode" and step.request_ids == ("a",)  # b's 6 blocks do not fit the 4 left
    assert step.plan.rows[0].block_ids == tuple(range(6)) and step.plan.rows[0].cross_images == (image,)
    s.finish("a", RequestStatus.FINISHED_ABORTED)
    lane = s.lanes[0]
    assert lane.pool.num_free == 10
    step = s.schedule()
    assert step.request_ids == ("b",) and len(step.plan.rows[0].block_ids) == 6
