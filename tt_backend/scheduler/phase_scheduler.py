"""PhaseScheduler: one lane's step of a given mode: prefill-only or decode-only (or empty).

The mode of each step (prefill first, the decode cadence, the zero-admit fallback to decode, the
deadlock preemption) is the `LaneCoordinator`'s, for one lane or many: it asks every lane what
it could do (`wants_prefill`, `decode_ready`, `prompt_left_partial`), imposes one mode on all of
them (`schedule(mode)`) and, when nothing can progress, has them `preempt_newest`. Within a step
this lane decides (from the serving design):
- A prompt longer than the step's token budget is split into chunks over several prefill steps
  (`enable_chunked_prefill`). A waiting prompt that does not fit what is left of a step's budget
  opens the next step rather than filling this one as a partial chunk: a chunk would add a wave of
  its own, owe a decode step before the next prefill (the cadence), and delay its own first token
  by both (a burst of 32 100-token prompts at budget 2048: 20 + 12 rows in two steps, not
  20 + a 48-token chunk, a decode step, then 12).
- A waiting prompt joins a step that already has rows only while the step stays within
  `max_prefill_tokens` (at most max_num_batched_tokens; a prompt longer than it starts a step alone).
  Where prefill is compute-bound (a CPU), a smaller step gives its prompts their first tokens sooner
  and costs the later ones little: a burst of 8 100-token prompts in 4 steps of 2 instead of one.
- When a decode step runs out of KV blocks, the most recently admitted running request is
  preempted by recompute (its blocks freed, its tokens prefilled again on resume), so the oldest
  requests always progress.
- With prefix caching, an admitted request reuses the cached blocks of its longest cached
  prefix of full blocks and computes only the rest (at least its last token).
- A running request holds a slot (0 ≤ slot < max_num_seqs), released when it finishes or is
  preempted; every row carries the lane and its request's slot, and decode rows are in slot order.
Lifecycle: waiting → (skipped_waiting ↔ waiting) → running → (preempted → waiting) → finished.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from tt_backend.contract.modes import RequestStatus, StepMode
from tt_backend.contract.step import EMPTY_STEP, ImageSpan, PlannedRow, StepPlan
from tt_backend.scheduler.block_pool import BlockPool
from tt_backend.scheduler.kv_manager import NO_COMPUTED_BLOCKS, ComputedBlocks, KVCacheManager
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import SampledToken, ScheduledStep, SchedulerConfig


@dataclass
class SchedulerStats:
    preemptions: int = 0
    prefix_cache_queries: int = 0
    """Prompt tokens looked up in the prefix cache at admission."""
    prefix_cache_hits: int = 0
    """Of those, tokens found cached."""


class PhaseScheduler:
    def __init__(self, config: SchedulerConfig, lane: int = 0) -> None:
        self.config = config
        self.lane = lane
        """The lane this scheduler plans; every row it plans carries it."""
        self.kv = KVCacheManager(config.num_blocks, config.block_size, config.enable_prefix_caching)
        self.waiting: deque[Request] = deque()
        self.skipped: list[Request] = []
        self.running: list[Request] = []  # admission order
        self.requests: dict[str, Request] = {}
        self.stats = SchedulerStats()
        self._free_slots = list(range(config.max_num_seqs))  # a heap: the lowest slot first

    # ---- intake and exit -------------------------------------------------------------------
    def add(self, request: Request) -> None:
        assert request.request_id not in self.requests, f"duplicate id {request.request_id}"
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def finish(self, request_id: str, status: RequestStatus) -> Request | None:
        """End a request in any state and free everything it holds; None if unknown."""
        assert status.finished
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        if request.status is RequestStatus.RUNNING:
            self._leave_running(request)
        elif request.status is RequestStatus.SKIPPED_WAITING:
            self.skipped.remove(request)
        else:
            self.waiting.remove(request)
        self.kv.free(request)
        self.kv.free_block_hashes(request)
        request.status = status
        return request

    @property
    def pool(self) -> BlockPool:
        """The lane's block pool (its usage and free blocks, for stats and checks)."""
        return self.kv.pool

    @property
    def has_work(self) -> bool:
        return bool(self.requests)

    @property
    def decode_ready(self) -> bool:
        """Whether a running request has its prompt prefilled (a decode step would have its row)."""
        return any(not r.is_prefilling for r in self.running)

    def wants_prefill(self) -> bool:
        """Whether prefill work could be admitted now (ignoring the decode cadence). It first moves
        the parked requests whose precondition now holds back to waiting: asked once per step,
        before `schedule(mode)`, so each precondition is polled as often as one step needs."""
        self._unpark_ready()
        return self._prefill_pending()

    # ---- scheduling -----------------------------------------------------------------------
    def schedule(self, mode: StepMode) -> ScheduledStep:
        """This lane's step of `mode` (PREFILL or DECODE), empty when it has no such work, with no
        fallback to the other mode: the coordinator owns the choice, the fallback and the cadence.
        A prefill step preempts nothing; a decode step may preempt (KV exhaustion)."""
        mode = StepMode(mode)
        if mode is StepMode.DECODE:
            return self._schedule_decode()
        assert mode is StepMode.PREFILL, f"a lane schedules prefill or decode, not {mode}"
        return self._schedule_prefill()

    def preempt_newest(self) -> str:
        """Preempt the most recently admitted running request; return its id. For a lane whose
        running requests are all partial prefills holding every free block, none of which can
        continue: freeing the newest lets the older ones finish."""
        assert self.running, "nothing runs in the lane"
        victim = self.running[-1]
        self._preempt(victim)
        return victim.request_id

    def prompt_left_partial(self, step: ScheduledStep) -> bool:
        """Whether a running prompt is still partly prefilled once `step` has run: a chunk of
        the step ends before its prompt does, or a prefilling request did not fit the step."""
        in_step = set(step.request_ids)
        return any(not row.sample for row in step.plan.rows) or any(
            r.is_prefilling and r.request_id not in in_step for r in self.running)

    def schedule_decode_continuation(self, previous: ScheduledStep) -> ScheduledStep | None:
        """The decode step after `previous`, scheduled before its tokens are known (async decode):
        the same requests one position further, their input tokens fed back on the device (the
        rows hold a placeholder). None when the steady path cannot carry it: a prefill is due, a
        request is no longer running, or a block for the next position is not free."""
        self._unpark_ready()
        if previous.plan.mode is not StepMode.DECODE or self._prefill_pending():
            return None
        requests = [self.requests.get(rid) for rid in previous.request_ids]
        if any(r is None or r.status is not RequestStatus.RUNNING for r in requests):
            return None
        need = sum(max(0, self.kv.blocks_needed(r, row.context_len + 1))
                   for r, row in zip(requests, previous.plan.rows, strict=True) if r is not None)
        if need > self.kv.num_free_blocks:
            return None
        rows = []
        for request, row in zip(requests, previous.plan.rows, strict=True):
            assert request is not None
            slots = self.kv.allocate_slots(request, row.context_len + 1)
            assert slots is not None
            rows.append(self._row(request, (0,), row.start_position + 1, slots.block_ids, True))
        return ScheduledStep(StepPlan(StepMode.DECODE, tuple(rows)), previous.request_ids)

    def update(self, step: ScheduledStep, sampled: list[int]) -> list[SampledToken]:
        """Record a finished step: advance computed tokens, append sampled tokens (row order).
        Rows of requests that finished meanwhile (async decode ran them a step ahead) are dropped."""
        tokens = iter(sampled)
        out: list[SampledToken] = []
        for row, request_id in zip(step.plan.rows, step.request_ids, strict=True):
            request = self.requests.get(request_id)
            if request is None or request.status is not RequestStatus.RUNNING:  # (or a reused id)
                if row.sample:
                    next(tokens)
                continue
            request.num_computed_tokens += len(row.token_ids)
            if row.sample:
                token = next(tokens)
                request.output_token_ids.append(token)
                out.append(SampledToken(request, token))
            if self.kv.enable_caching:
                self.kv.cache_full_blocks(request)
        assert next(tokens, None) is None, "more sampled tokens than sampling rows"
        return out

    def _unpark_ready(self) -> None:
        ready = [r for r in self.skipped if r.precondition is None or r.precondition()]
        for request in reversed(ready):  # back to the front, in their original order
            self.skipped.remove(request)
            request.status = RequestStatus.WAITING
            self.waiting.appendleft(request)

    def _prefill_pending(self) -> bool:
        return any(r.is_prefilling for r in self.running) or (
            bool(self.waiting) and len(self.running) < self.config.max_num_seqs)

    def _schedule_prefill(self) -> ScheduledStep:
        budget = self.config.max_num_batched_tokens
        rows: list[PlannedRow] = []
        ids: list[str] = []
        for request in [r for r in self.running if r.is_prefilling]:
            n = self._reserve_chunk(request, budget)
            if n:
                rows.append(self._prefill_row(request, n))
                ids.append(request.request_id)
                budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            if request.precondition is not None and not request.precondition():
                self.waiting.popleft()
                request.status = RequestStatus.SKIPPED_WAITING
                self.skipped.append(request)
                continue
            request.prefill_target = request.num_tokens
            computed = self.kv.get_computed_blocks(request)
            cached = computed.num_tokens(self.config.block_size)
            need = request.prefill_target - cached
            if rows and need > budget:
                break  # it would start as a partial chunk: it opens the next step instead
            if rows and self.config.max_num_batched_tokens - budget + need > self.config.max_prefill_tokens:
                break  # the step is full enough: it opens the next one
            n = self._reserve_chunk(request, budget, cached, computed)
            if n == 0:
                break
            self.waiting.popleft()
            self.running.append(request)
            request.status = RequestStatus.RUNNING
            request.slot = heapq.heappop(self._free_slots)
            self.stats.prefix_cache_queries += request.prefill_target if self.kv.enable_caching else 0
            self.stats.prefix_cache_hits += cached
            rows.append(self._prefill_row(request, n))
            ids.append(request.request_id)
            budget -= n
        if not rows:
            return ScheduledStep(EMPTY_STEP, ())
        return ScheduledStep(StepPlan(StepMode.PREFILL, tuple(rows)), tuple(ids))

    def _reserve_chunk(self, request: Request, budget: int, start: int | None = None,
                       computed: ComputedBlocks = NO_COMPUTED_BLOCKS) -> int:
        """Allocate blocks for the request's next prefill chunk (from `start`, the tokens a cached
        prefix `computed` holds, on admission); return its length (0: none, nothing changed)."""
        start = request.num_computed_tokens if start is None else start
        remaining = request.prefill_target - start
        n = min(remaining, budget, self.kv.fitting_tokens(request, start, computed))
        if 0 < n < remaining and request.images:
            n = request.chunk_stop(start, start + n) - start
        if n <= 0 or (n < remaining and not self.config.enable_chunked_prefill):
            return 0
        slots = self.kv.allocate_slots(request, start + n, computed)
        assert slots is not None
        request.num_computed_tokens = start
        return n

    def _prefill_row(self, request: Request, n: int) -> PlannedRow:
        start = request.num_computed_tokens
        return self._row(request, request.token_slice(start, start + n), start,
                         self.kv.block_ids(request.request_id), sample=start + n == request.prefill_target,
                         prefix=request.token_slice(0, start), images=request.images_in(start, start + n))

    def _row(self, request: Request, token_ids: tuple[int, ...], start: int, block_ids: tuple[int, ...],
             sample: bool, prefix: tuple[int, ...] = (), images: tuple[ImageSpan, ...] = ()) -> PlannedRow:
        """A row of a running request: in this lane, at the request's slot."""
        assert request.slot is not None, f"{request.request_id} holds no slot"
        return PlannedRow(token_ids, start, block_ids, sample, lane=self.lane, slot=request.slot,
                          prefix_token_ids=prefix, images=images, rope_images=request.rope_images,
                          cross_images=request.cross_images)

    def _schedule_decode(self) -> ScheduledStep:
        rows: list[PlannedRow] = []
        ids: list[str] = []
        preempted: list[str] = []
        scheduled: set[str] = set()
        for request in [r for r in self.running if not r.is_prefilling]:
            if request.status is not RequestStatus.RUNNING:
                continue  # preempted earlier in this loop
            while (slots := self.kv.allocate_slots(request, request.num_tokens)) is None:
                victim = next((r for r in reversed(self.running) if r.request_id not in scheduled), None)
                assert victim is not None
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is request:
                    break
            if slots is None:
                continue  # it preempted itself
            position = request.num_tokens - 1
            rows.append(self._row(request, (request.token_id(position),), position, slots.block_ids, True))
            ids.append(request.request_id)
            scheduled.add(request.request_id)
        order = sorted(range(len(ids)), key=lambda i: rows[i].slot)
        plan = StepPlan(StepMode.DECODE, tuple(rows[i] for i in order)) if rows else EMPTY_STEP
        return ScheduledStep(plan, tuple(ids[i] for i in order), tuple(preempted))

    # ---- slots and preemption ------------------------------------------------------------
    def _leave_running(self, request: Request) -> None:
        self.running.remove(request)
        assert request.slot is not None
        heapq.heappush(self._free_slots, request.slot)
        request.slot = None

    def _preempt(self, request: Request) -> None:
        """Preempt by recompute: drop the KV, resume later by prefilling every token again."""
        self._leave_running(request)
        self.kv.free(request)
        request.num_computed_tokens = 0
        request.prefill_target = 0
        request.status = RequestStatus.PREEMPTED
        self.waiting.appendleft(request)
        self.stats.preemptions += 1
