"""LLMEngine: request intake, the step loop on its own thread, shutdown and failure.

Thread-safe entry points are `add_request` and `abort`; they only enqueue. Everything else runs
on the engine thread, one step at a time:

    schedule → execute → sample   (StepPipeline, with the async decode overlap)
    update → emit                 (OutputProcessor: stop and length checks, text, final outputs)
    report                        (StatsCollector: one EngineStats per lane)
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tt_backend.config import EngineConfig
from tt_backend.contract.errors import CapacityError, ErrorKind, UnavailableError
from tt_backend.contract.modes import RequestStatus, StepMode
from tt_backend.engine.faults import FaultInjector, FaultSpec
from tt_backend.engine.grammar_compiler import GrammarCompiler
from tt_backend.engine.output_processor import OutputCallback, OutputProcessor
from tt_backend.engine.pipeline import StepPipeline
from tt_backend.engine.stats import CacheInfo
from tt_backend.engine.stats_collector import StatsCollector, StatsListener
from tt_backend.runtime.step_runner import StepRunner
from tt_backend.sampling.grammar import GrammarBackend
from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.processors import lookup
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import SchedulerConfig
from tt_backend.text.detokenizer import Tokenizer

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.005


@dataclass(frozen=True)
class _Add:
    request: Request
    on_output: OutputCallback
    arrival: float


@dataclass(frozen=True)
class _Abort:
    request_id: str


class StepTimeout(RuntimeError):
    """A step ran past step_timeout_s (the watchdog's verdict)."""


class LLMEngine:
    def __init__(self, config: EngineConfig, scheduler_config: SchedulerConfig, runner: StepRunner,
                 tokenizer: Tokenizer, vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        assert config.max_model_len is not None, "resolve the config for the model first"
        self.config = config
        self.max_model_len: int = config.max_model_len
        self.runner = runner
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.scheduler = LaneCoordinator(scheduler_config, config.data_parallel_size)
        self.grammars = GrammarCompiler(GrammarBackend(tokenizer, vocab_size, eos_token_ids).compile,
                                        config.grammar_compile_timeout_s, config.grammar_cache_bytes)
        self.stats = StatsCollector(self.scheduler, self._execution_counters, self.grammars.take_stats)
        self.outputs = OutputProcessor(self.scheduler, tokenizer, eos_token_ids, self.max_model_len,
                                       self.stats, config.seed, self._release_id, self.grammars)
        self.faults = FaultInjector(FaultSpec.parse(config.fault_injection))
        self.pipeline = StepPipeline(self.scheduler, runner, self.outputs.live, bool(config.async_scheduling),
                                     self.max_model_len, self.faults)
        self._intake: deque[_Add | _Abort] = deque()
        self._known_ids: set[str] = set()  # ids added and not yet finished (guarded by _cv)
        self._cv = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failure_listener: Callable[[BaseException], None] | None = None
        self._failure: BaseException | None = None
        self._step_started: float | None = None  # while the pipeline runs a step (the watchdog reads it)
        self._watchdog: threading.Thread | None = None
        self._watchdog_stop = threading.Event()

    @property
    def cache_info(self) -> CacheInfo:
        return CacheInfo(self.scheduler.config.block_size, self.scheduler.config.num_blocks,
                         self.runner.cache_dtype, self.scheduler.config.enable_prefix_caching)

    # ---- thread-safe entry points ----------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    on_output: OutputCallback) -> None:
        """Validate and enqueue; raises ValueError (naming the field) for bad input."""
        self.validate(prompt_token_ids, params)
        request = Request(request_id, tuple(prompt_token_ids), params)
        with self._cv:
            if self._failure is not None:
                raise UnavailableError(f"the engine failed and serves no requests: {self._failure!r}")
            if self._stopping:
                raise UnavailableError("the engine is shutting down")
            if request_id in self._known_ids:
                raise ValueError(f"request id {request_id!r} is already in use")
            seats = self.config.data_parallel_size * self.config.max_num_seqs
            limit = seats + self.config.max_waiting_requests
            if len(self._known_ids) >= limit:
                raise CapacityError(f"the server is at capacity ({len(self._known_ids)} requests in "
                                   f"flight, max_waiting_requests={self.config.max_waiting_requests}); "
                                   "retry later")
            if params.structured_outputs is not None:  # it parks until its grammar compiles
                self._check_parked()
            self._known_ids.add(request_id)
            self._intake.append(_Add(request, on_output, time.monotonic()))
            self._cv.notify()

    def _check_parked(self) -> None:
        """(With self._cv held.) Refuse a request with structured outputs past max_parked_requests
        waiting for their grammar: those the compiler holds and those still in the intake (the
        batch the engine thread is admitting at that moment is in neither: it may overshoot by it)."""
        limit = self.config.max_parked_requests
        parked = self.grammars.num_waiting + sum(
            1 for item in self._intake
            if isinstance(item, _Add) and item.request.sampling.structured_outputs is not None)
        if parked >= limit:
            raise CapacityError(f"the server is at capacity for structured outputs ({parked} requests "
                                f"wait for a grammar compile, max_parked_requests={limit}); retry later")

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
        self.stats.listener = listener

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
        params.check_limits(self.config.request_limits)
        for name in params.logits_processors:
            lookup(name)

    # ---- thread lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        assert self._thread is None
        self._thread = threading.Thread(target=self._run, name="tt-engine", daemon=True)
        self._thread.start()
        if self.config.step_timeout_s > 0:
            self._watchdog = threading.Thread(target=self._watch, name="tt-watchdog", daemon=True)
            self._watchdog.start()

    def shutdown(self) -> None:
        """Stop the loop; every unfinished request ends with finish_reason 'abort'."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._watchdog_stop.set()
        self.faults.release()  # an injected hang returns; a real one would keep the join waiting
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._drain_intake()
        self.pipeline.abandon()
        self.outputs.finish_all(RequestStatus.FINISHED_ABORTED)
        self.grammars.shutdown()
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
            self.pipeline.abandon()
            self.outputs.finish_all(RequestStatus.FINISHED_ERROR, error=f"engine failed: {exc!r}",
                                    error_kind=ErrorKind.UNAVAILABLE)
            self.stats.report(None)
            if self._failure_listener is not None:
                self._failure_listener(exc)

    def _watch(self) -> None:
        """The step watchdog (its own thread): a step past step_timeout_s fails the engine. The
        engine thread stays where it hangs; the failure listener ends every request in flight and
        the model instance exits (tt_backend/triton/llm_model.py), as a hung device leaves no
        other way out."""
        timeout = self.config.step_timeout_s
        while not self._watchdog_stop.wait(min(1.0, timeout / 4)):
            started = self._step_started
            if started is None or time.monotonic() - started <= timeout:
                continue
            step = self.pipeline.current
            what = f"the {step.mode} step of {len(step.request_ids)} request(s)" if step else "a step"
            exc = StepTimeout(f"{what} has run {time.monotonic() - started:.1f} s, past "
                              f"step_timeout_s={timeout}: the device or the model is hung")
            logger.critical("%s; the engine fails", exc)
            with self._cv:
                self._failure = exc
                self._stopping = True
            if self._failure_listener is not None:
                self._failure_listener(exc)
            return

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
            idle = self.step() is StepMode.EMPTY

    # ---- the step -----------------------------------------------------------------------------
    def step(self) -> StepMode | None:
        """Take in new requests and aborts, then advance one step and report; return the step's
        mode, or None when there was nothing to schedule."""
        had_intake = self._take_intake()
        if not self.scheduler.has_work:
            return None
        self._step_started = time.monotonic()
        try:
            result = self.pipeline.next(run_empty=had_intake)  # schedule → execute → sample
        finally:
            self._step_started = None
        if result.done is not None:
            self.outputs.record(result.done, result.sampled, result.error)  # update → emit
            self.stats.report(result.done)
        return result.mode

    def _take_intake(self) -> bool:
        """Apply queued adds and aborts (reporting at once what they changed), and admit the
        requests whose grammars compiled; return whether there were any adds or aborts."""
        had_intake = self._drain_intake()
        self.outputs.resolve_grammars()
        if not self.scheduler.has_work or self.stats.has_finished:
            self.stats.report(None)  # aborts applied: report now, not after the next step
        return had_intake

    def _drain_intake(self) -> bool:
        with self._cv:
            items = list(self._intake)
            self._intake.clear()
        for item in items:
            if isinstance(item, _Add):
                self.outputs.admit(item.request, item.on_output, item.arrival)
            elif item.request_id in self.outputs.live:
                self.outputs.finish(item.request_id, RequestStatus.FINISHED_ABORTED)
        return bool(items)

    def _release_id(self, request_id: str) -> None:
        with self._cv:
            self._known_ids.discard(request_id)

    def _execution_counters(self) -> tuple[int, int, int, int]:
        return (self.runner.eager_steps, self.runner.traced_steps, self.pipeline.decode_drains,
                self.pipeline.host_sampling_steps)
