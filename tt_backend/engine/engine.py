"""LLMEngine: request intake, the step loop on its own thread, stop conditions, streaming.

Thread-safe entry points are `add_request` and `abort`; they only enqueue. Everything else runs
on the engine thread:

    schedule → execute → sample → update → emit

With `async_scheduling`, steady decode runs one step ahead of the host: step N+1 is scheduled and
launched (its input tokens fed back from step N on the device) before step N's tokens are read,
so the host's update/detokenize/emit of step N overlaps the device's step N+1. At most two steps
are in flight. The pipeline drains (finishes what is in flight, then schedules normally) when a
prefill is due, a request finishes or is aborted, a request would reach its length limit, or a
block for the next position is not free.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tt_backend.config import EngineConfig
from tt_backend.engine.outputs import FINISH_REASONS, FinishReason, Logprob, PositionLogprobs, RequestOutput
from tt_backend.engine.stats import EngineStats, FinishedRequestStats
from tt_backend.engine.step_sampling import (
    HostResults,
    RequestSampling,
    SamplingRow,
    plan_sampling,
    samples_on_device,
)
from tt_backend.engine.stop_strings import OutputText
from tt_backend.runtime.executor import StepSampling
from tt_backend.runtime.plan import StepMode
from tt_backend.runtime.runner import ModelRunner
from tt_backend.sampling.host_sampler import TokenLogprobs, bad_word_token_ids
from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.processors import lookup
from tt_backend.scheduler.lane_coordinator import LaneCoordinator, MergedStep
from tt_backend.scheduler.phase_scheduler import SampledToken, ScheduledStep, SchedulerConfig, SchedulerStats
from tt_backend.scheduler.request import Request, RequestStatus
from tt_backend.text.detokenizer import IncrementalDetokenizer, Tokenizer

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.005
OutputCallback = Callable[[RequestOutput], None]
StatsListener = Callable[[EngineStats], None]


@dataclass
class _Live:
    """Engine-side state of one request that the scheduler does not need."""

    request: Request
    detokenizer: IncrementalDetokenizer
    on_output: OutputCallback
    sampling: RequestSampling
    text: OutputText
    arrival: float
    admitted: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    logprobs: list[PositionLogprobs] = dataclasses.field(default_factory=list)
    """Logprobs of tokens not yet handed out (the detokenizer may hold tokens back)."""
    cumulative_logprob: float = 0.0

    @property
    def row(self) -> SamplingRow:
        return SamplingRow(self.request, self.sampling)


@dataclass(frozen=True)
class _Add:
    request: Request
    on_output: OutputCallback
    arrival: float


@dataclass(frozen=True)
class _Abort:
    request_id: str


@dataclass(frozen=True)
class _InFlight:
    step: ScheduledStep
    handle: int
    host: HostResults | None = None


class LLMEngine:
    def __init__(self, config: EngineConfig, runner: ModelRunner, tokenizer: Tokenizer,
                 vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        assert config.max_model_len is not None and config.num_kv_blocks is not None, \
            "resolve the config for the model first"
        self.config = config
        self.max_model_len: int = config.max_model_len
        self.runner = runner
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.scheduler = LaneCoordinator(SchedulerConfig(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=config.max_model_len,
            block_size=config.block_size,
            num_blocks=config.num_kv_blocks,
            enable_chunked_prefill=bool(config.enable_chunked_prefill),
            enable_prefix_caching=bool(config.enable_prefix_caching),
            decode_steps_between_prefills=config.decode_steps_between_prefills,
        ), config.data_parallel_size)
        self._inflight: deque[_InFlight] = deque()
        self.decode_drains = 0
        self.host_sampling_steps = 0
        self._seeds = random.Random(config.seed)
        self._live: dict[str, _Live] = {}
        self._intake: deque[_Add | _Abort] = deque()
        self._known_ids: set[str] = set()  # ids added and not yet finished (guarded by _cv)
        self._cv = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._stats_listener: StatsListener | None = None
        self._failure_listener: Callable[[BaseException], None] | None = None
        self._failure: BaseException | None = None
        lanes = range(config.data_parallel_size)
        self._finished_stats: dict[int, list[FinishedRequestStats]] = {lane: [] for lane in lanes}
        self._prompt_tokens = dict.fromkeys(lanes, 0)  # since the last report
        self._generation_tokens = dict.fromkeys(lanes, 0)
        self._reported = {lane: SchedulerStats() for lane in lanes}
        self._reported_steps = (0, 0, 0, 0)  # eager steps, traced steps, decode drains, host sampling

    # ---- thread-safe entry points ----------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    on_output: OutputCallback) -> None:
        """Validate and enqueue; raises ValueError (naming the field) for bad input."""
        self.validate(prompt_token_ids, params)
        request = Request(request_id, tuple(prompt_token_ids), params)
        with self._cv:
            if self._failure is not None:
                raise RuntimeError(f"the engine failed and serves no requests: {self._failure!r}")
            if self._stopping:
                raise RuntimeError("the engine is shutting down")
            if request_id in self._known_ids:
                raise ValueError(f"request id {request_id!r} is already in use")
            seats = self.config.data_parallel_size * self.config.max_num_seqs
            limit = seats + self.config.max_waiting_requests
            if len(self._known_ids) >= limit:
                raise RuntimeError(f"the server is at capacity ({len(self._known_ids)} requests in "
                                   f"flight, max_waiting_requests={self.config.max_waiting_requests}); "
                                   "retry later")
            self._known_ids.add(request_id)
            self._intake.append(_Add(request, on_output, time.monotonic()))
            self._cv.notify()

    def abort(self, request_id: str) -> None:
        """End the request in any state; its final output has finish_reason 'abort'."""
        with self._cv:
            self._intake.append(_Abort(request_id))
            self._cv.notify()

    @property
    def has_unfinished(self) -> bool:
        """Requests added (or aborts queued) and not yet finished."""
        with self._cv:
            return bool(self._intake) or self.scheduler.has_work

    def set_failure_listener(self, listener: Callable[[BaseException], None]) -> None:
        """Called once on the engine thread if the loop dies, after every pending request got
        its error output."""
        self._failure_listener = listener

    def set_stats_listener(self, listener: StatsListener) -> None:
        """Receive an EngineStats after every step (on the engine thread); set before start."""
        self._stats_listener = listener

    def validate(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        if not prompt_token_ids:
            raise ValueError("the prompt is empty (0 tokens)")
        bad = [t for t in prompt_token_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"input_ids hold {bad[0]}, outside the vocabulary [0, {self.vocab_size})")
        if len(prompt_token_ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"the prompt ({len(prompt_token_ids)} tokens) plus max_tokens ({params.max_tokens}) "
                f"exceeds max_model_len ({self.max_model_len})")
        for field, token in params.token_ids():
            if not 0 <= token < self.vocab_size:
                raise ValueError(f"{field} holds {token}, outside the vocabulary [0, {self.vocab_size})")
        for name in params.logits_processors:
            lookup(name)

    # ---- thread lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        assert self._thread is None
        self._thread = threading.Thread(target=self._run, name="tt-engine", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the loop; every unfinished request ends with finish_reason 'abort'."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._drain_intake()
        self._abandon_inflight()
        for request_id in list(self._live):
            self._finish(request_id, RequestStatus.FINISHED_ABORTED)
        self.runner.close()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the loop itself broke: fail everything, refuse new work
            logger.exception("the engine thread failed")
            with self._cv:
                self._failure = exc
                self._stopping = True
            self._drain_intake()
            self._abandon_inflight()
            for request_id in list(self._live):
                self._finish(request_id, RequestStatus.FINISHED_ERROR, error=f"engine failed: {exc!r}")
            self._report(None)
            if self._failure_listener is not None:
                self._failure_listener(exc)

    def _loop(self) -> None:
        idle = False
        while True:
            with self._cv:
                while not self._stopping and not self._intake and not self.scheduler.has_work:
                    self._cv.wait()
                if idle and not self._intake and not self._stopping:
                    self._cv.wait(IDLE_WAIT_S)  # every request is parked: poll, do not spin
                if self._stopping:
                    return
            idle = self.step() == "empty"

    # ---- the step -----------------------------------------------------------------------------
    def step(self) -> StepMode | None:
        """Take in new requests and aborts, then run one scheduled step and report stats.
        Return the step's mode, or None when there was nothing to schedule."""
        had_work = self._drain_intake()
        if not self.scheduler.has_work or any(self._finished_stats.values()):
            self._report(None)  # aborts applied: report now, not after the next step
        if not self.scheduler.has_work:
            return None
        if self._inflight:
            self._advance_pipeline()
            return "decode"
        step = self.scheduler.schedule()
        if (step.plan.mode == "decode" and self.config.async_scheduling and not step.preempted
                and self._device_decode(step, ahead=0)):
            self._note_admitted(step)
            self._launch(step, after=None)
            return "decode"
        if step.plan.mode != "empty" or had_work:
            self._run_step(step)
            self._report(step)
        return step.plan.mode

    # ---- async decode: at most two steps in flight -----------------------------------------------
    def _launch(self, step: ScheduledStep, after: int | None) -> None:
        sampling, host = self._sampling(step, ahead=len(self._inflight))
        handle = self.runner.launch(step.plan, sampling, after)
        self._inflight.append(_InFlight(step, handle, host))

    def _device_decode(self, step: ScheduledStep, ahead: int) -> bool:
        """Whether a decode step of these requests samples on the device (async decode needs it:
        the host path needs the previous tokens on the host)."""
        rows = [self._live[rid].row for rid in step.request_ids if rid in self._live]
        return samples_on_device(self.runner.sampling, "decode", rows, ahead)

    def _advance_pipeline(self) -> None:
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
        try:
            tokens: list[int] = self.runner.complete(oldest.handle).tolist()
        except Exception as exc:
            self._abandon_inflight()
            self._fail_step(oldest.step, exc)
            self._report(oldest.step)
            return
        self._apply(oldest.step, tokens, oldest.host)
        self._report(oldest.step)

    def _can_continue(self, step: ScheduledStep) -> bool:
        """Whether every request of `step` is live and may take one more token after those in flight."""
        ahead = len(self._inflight)
        for request_id in step.request_ids:
            live = self._live.get(request_id)
            if live is None:
                return False
            request = live.request
            if (len(request.output_token_ids) + ahead + 1 > request.sampling.max_tokens
                    or request.num_tokens + ahead + 1 > self.max_model_len):
                return False
        return self._device_decode(step, ahead)

    def _abandon_inflight(self) -> None:
        """Wait for whatever is in flight and drop its results (failure, shutdown)."""
        self.runner.drain()
        self._inflight.clear()

    def _fail_step(self, step: ScheduledStep, exc: Exception) -> None:
        """A step failed: end its (still live) requests with the error; the engine goes on."""
        logger.exception("step failed (%s, %d rows)", step.plan.mode, len(step.plan.rows))
        for request_id in step.request_ids:
            if request_id in self._live:
                self._finish(request_id, RequestStatus.FINISHED_ERROR, error=f"step failed: {exc}")

    def _note_admitted(self, step: ScheduledStep) -> None:
        now = time.monotonic()
        for request_id in step.request_ids:
            live = self._live[request_id]
            live.admitted = live.admitted or now

    def _run_step(self, step: ScheduledStep) -> None:
        if step.plan.mode == "empty":
            return
        self._note_admitted(step)
        for request_id in step.preempted:
            lane = self.scheduler.lane_of[request_id]
            logger.info("lane %d: preempted %s by recompute (its KV blocks are exhausted; %d preemptions "
                        "so far)", lane, request_id, self.scheduler.lanes[lane].stats.preemptions)
        try:
            sampling, host = self._sampling(step, ahead=0)
            tokens: list[int] = self.runner.run_and_sample(step.plan, sampling).tolist()
        except Exception as exc:  # fail only this step's requests; the engine goes on
            self._fail_step(step, exc)
            return
        self._apply(step, tokens, host)

    def _sampling(self, step: ScheduledStep, ahead: int) -> tuple[StepSampling, HostResults | None]:
        """The step's sampling: on the device, or the host path when a row needs it. `ahead`: tokens
        already in flight for each request (async decode), which count toward min_tokens."""
        rows = [self._live[rid].row if row.sample else None
                for rid, row in zip(step.request_ids, step.plan.rows, strict=True)]
        sampling, host = plan_sampling(self.runner.sampling, step.plan.mode, rows, ahead)
        if host is not None:
            self.host_sampling_steps += 1
        return sampling, host

    def _apply(self, step: ScheduledStep, tokens: list[int], host: HostResults | None) -> None:
        """Hand the step's tokens to the scheduler, then process each (with its logprobs)."""
        logprobs: dict[str, TokenLogprobs] = {}
        if host is not None and host.sample is not None:
            rows = zip(step.request_ids, step.plan.rows, strict=True)
            sampled_ids = [rid for rid, row in rows if row.sample]
            logprobs = {rid: lp for rid, lp in zip(sampled_ids, host.sample.logprobs, strict=True)
                        if lp is not None}
        for token in self.scheduler.update(step, tokens):
            self._process_token(token, logprobs.get(token.request.request_id))

    def _position_logprobs(self, lp: TokenLogprobs) -> PositionLogprobs:
        """The sampled token first (as vLLM orders them), then the top alternatives."""
        decode = self.tokenizer.decode
        entries = {lp.token_id: Logprob(lp.logprob, lp.rank, decode([lp.token_id]))}
        for rank, (token, value) in enumerate(lp.top, start=1):
            entries.setdefault(token, Logprob(value, rank, decode([token])))
        return entries

    def _process_token(self, sampled: SampledToken, lp: TokenLogprobs | None = None) -> None:
        request, token = sampled.request, sampled.token_id
        params = request.sampling
        live = self._live[request.request_id]
        if lp is not None:
            live.logprobs.append(self._position_logprobs(lp))
            live.cumulative_logprob += lp.logprob
        now = time.monotonic()
        lane = self.scheduler.lane_of[request.request_id]
        if live.first_token is None:
            live.first_token = now
            self._prompt_tokens[lane] += len(request.prompt_token_ids)
        live.last_token = now
        self._generation_tokens[lane] += 1
        reason: RequestStatus | None = None
        if (token in self.eos_token_ids and not params.ignore_eos) or token in params.stop_token_ids:
            reason = RequestStatus.FINISHED_STOPPED
        elif len(request.output_token_ids) >= params.max_tokens or request.num_tokens >= self.max_model_len:
            reason = RequestStatus.FINISHED_LENGTH
        delta = live.detokenizer.add(token, flush=reason is not None)
        if delta is None:
            return
        context, new, text = delta
        if live.text.append(text) is not None:
            reason = RequestStatus.FINISHED_STOPPED
        if reason is not None:
            self._finish(request.request_id, reason, (context, new))
        else:
            live.on_output(self._output(live, context, new))

    def _output(self, live: _Live, context: tuple[int, ...], new: tuple[int, ...],
                reason: FinishReason | None = None, error: str | None = None) -> RequestOutput:
        """The output carrying `new` tokens, the text not handed out yet, and pending logprobs."""
        asked = live.request.sampling.logprobs is not None
        logprobs = None
        if asked:
            logprobs, live.logprobs = tuple(live.logprobs), []
        return RequestOutput(live.request.request_id, new, context, live.text.take(reason is not None),
                             len(live.request.prompt_token_ids), reason, error, logprobs,
                             live.cumulative_logprob if asked else None)

    def _drain_intake(self) -> bool:
        """Apply queued adds and aborts; return whether there were any."""
        with self._cv:
            items = list(self._intake)
            self._intake.clear()
        for item in items:
            if isinstance(item, _Add):
                self._live[item.request.request_id] = self._admit(item)
                self.scheduler.add(item.request)
            elif item.request_id in self._live:
                self._finish(item.request_id, RequestStatus.FINISHED_ABORTED)
        return bool(items)

    def _admit(self, item: _Add) -> _Live:
        params = item.request.sampling
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(64)
        bannable = (() if params.ignore_eos else tuple(sorted(self.eos_token_ids))) + params.stop_token_ids
        bad_words = bad_word_token_ids(lambda text: self.tokenizer(text, add_special_tokens=False).input_ids,
                                       params.bad_words) if params.bad_words else ()
        detokenizer = IncrementalDetokenizer(self.tokenizer, item.request.prompt_token_ids,
                                             params.skip_special_tokens)
        return _Live(item.request, detokenizer, item.on_output, RequestSampling(seed, bannable, bad_words),
                     OutputText(params.stop, params.include_stop_str_in_output), item.arrival)

    def _finish(self, request_id: str, status: RequestStatus,
                tokens: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
                error: str | None = None) -> None:
        """Free the request everywhere and send its one final output (with `tokens`: the context
        and new token ids it still carries)."""
        lane = self.scheduler.lane_of[request_id]
        self.scheduler.finish(request_id, status)
        live = self._live.pop(request_id)
        with self._cv:
            self._known_ids.discard(request_id)
        context, new = tokens or ((), ())
        reason = next(r for r in FINISH_REASONS if r == status.value)
        self._finished_stats[lane].append(_finished_stats(live, reason, time.monotonic()))
        live.on_output(self._output(live, context, new, reason, error))

    def _report(self, step: ScheduledStep | None) -> None:
        """One EngineStats per lane. A lane's step mode is the step's if it had rows in it, else
        `empty`; execution counters (eager/traced steps, drains) go to the lanes that had rows."""
        if self._stats_listener is None:
            return
        took_part = {part.lane for part in step.lanes} if isinstance(step, MergedStep) else set()
        now = (self.runner.eager_steps, self.runner.traced_steps, self.decode_drains,
               self.host_sampling_steps)
        executed = tuple(a - b for a, b in zip(now, self._reported_steps, strict=True))
        self._reported_steps = now
        for lane, sched in enumerate(self.scheduler.lanes):
            last = self._reported[lane]
            mode: StepMode | None = None
            if step is not None:
                mode = step.plan.mode if lane in took_part else "empty"
            counts = executed if lane in took_part else (0, 0, 0, 0)
            stats = EngineStats(
                lane=lane, step_mode=mode, num_running=len(sched.running),
                num_waiting=len(sched.waiting) + len(sched.skipped), kv_cache_usage=sched.pool.usage,
                prompt_tokens=self._prompt_tokens[lane], generation_tokens=self._generation_tokens[lane],
                preemptions=sched.stats.preemptions - last.preemptions,
                prefix_cache_queries=sched.stats.prefix_cache_queries - last.prefix_cache_queries,
                prefix_cache_hits=sched.stats.prefix_cache_hits - last.prefix_cache_hits,
                eager_steps=counts[0], traced_steps=counts[1], decode_drains=counts[2],
                host_sampling_steps=counts[3],
                finished=tuple(self._finished_stats[lane]))
            self._reported[lane] = dataclasses.replace(sched.stats)
            self._prompt_tokens[lane] = self._generation_tokens[lane] = 0
            self._finished_stats[lane] = []
            self._stats_listener(stats)


def _finished_stats(live: _Live, reason: FinishReason, now: float) -> FinishedRequestStats:
    n = len(live.request.output_token_ids)
    tpot = None
    if n > 1 and live.first_token is not None and live.last_token is not None:
        tpot = (live.last_token - live.first_token) / (n - 1)
    return FinishedRequestStats(
        reason=reason, num_prompt_tokens=len(live.request.prompt_token_ids), num_generation_tokens=n,
        queue_time_s=None if live.admitted is None else live.admitted - live.arrival,
        ttft_s=None if live.first_token is None else live.first_token - live.arrival,
        e2e_s=now - live.arrival, time_per_output_token_s=tpot)
