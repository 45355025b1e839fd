"""LLMEngine: request intake, the step loop on its own thread, shutdown and failure.

Thread-safe entry points are `add_request` and `abort`; they only enqueue. Everything else runs
on the engine thread, one step at a time:

    admit                         (RequestTable: the live requests, grammar parking, finishing)
    schedule → execute → sample   (StepPipeline, with the async decode overlap)
    update → emit                 (OutputProcessor: stop and length checks, text, logprobs)
    report                        (StatsCollector: one EngineStats per lane)

A Watchdog thread fails the engine when a step hangs; with fault_injection the runner is wrapped
once, here, in a FaultInjectingRunner.
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
from tt_backend.contract.step import ImageSpan
from tt_backend.engine.faults import FaultSpec, inject_faults
from tt_backend.engine.grammar_compiler import GrammarCompiler
from tt_backend.engine.output_processor import OutputProcessor
from tt_backend.engine.pipeline import StepPipeline
from tt_backend.engine.requests import OutputCallback, RequestTable
from tt_backend.engine.stats import CacheInfo
from tt_backend.engine.stats_collector import StatsCollector, StatsListener
from tt_backend.engine.watchdog import StepTimeout, Watchdog
from tt_backend.models.checkpoint import served_model_name
from tt_backend.models.image_prompts import ImagePrompts
from tt_backend.runtime.step_runner import StepRunner
from tt_backend.sampling.grammar import GrammarBackend
from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.processors import lookup
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import SchedulerConfig
from tt_backend.text.detokenizer import Tokenizer
from tt_backend.text.images import ImageInput

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.005


@dataclass(frozen=True)
class _Add:
    request: Request
    on_output: OutputCallback
    arrival: float
    images: tuple[ImageInput, ...] = ()


@dataclass(frozen=True)
class _Abort:
    request_id: str


class LLMEngine:
    def __init__(self, config: EngineConfig, scheduler_config: SchedulerConfig, runner: StepRunner,
                 tokenizer: Tokenizer, vocab_size: int, eos_token_ids: frozenset[int],
                 takes_images: bool = False, image_prompts: ImagePrompts | None = None) -> None:
        assert config.max_model_len is not None, "resolve the config for the model first"
        self.config = config
        self.takes_images = takes_images
        """The model's ModelCapabilities.takes_images: without it a request with images is refused."""
        self.image_prompts = image_prompts
        """The model's processor, which expands each image's placeholder in a prompt."""
        cross = image_prompts is not None and image_prompts.cross_tokens_per_tile > 0
        self._cross_placeholder = image_prompts.placeholder_id if cross and image_prompts else None
        """Mllama's `<|image|>`: past the head's vocabulary, in the embedding table's extra rows."""
        self.max_model_len: int = config.max_model_len
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.scheduler = LaneCoordinator(scheduler_config, config.data_parallel_size)
        self.grammars = GrammarCompiler(GrammarBackend(tokenizer, vocab_size, eos_token_ids).compile,
                                        config.grammar_compile_timeout_s, config.grammar_cache_bytes)
        self.stats = StatsCollector(self.scheduler, self._execution_counters, self.grammars.take_stats)
        self.requests = RequestTable(config, self.scheduler, tokenizer, eos_token_ids, self.stats,
                                     self.grammars)
        self.outputs = OutputProcessor(self.scheduler, self.requests, tokenizer, eos_token_ids,
                                       self.max_model_len, self.stats)
        self._shutting_down = threading.Event()
        """Set once at shutdown: ends the watchdog, releases an injected hang."""
        faults = FaultSpec.parse(config.fault_injection)
        self.runner = runner if not faults else inject_faults(
            runner, faults, lambda: self.requests.first_tokens(self._current_request_ids()),
            self._shutting_down)
        self.pipeline = StepPipeline(self.scheduler, self.runner, self.requests,
                                     bool(config.async_scheduling), self.max_model_len)
        self.watchdog = Watchdog(config.step_timeout_s, lambda: self.pipeline.current, self._fail,
                                 self._shutting_down)
        self._intake: deque[_Add | _Abort] = deque()
        self._cv = threading.Condition()
        """Guards the intake, _stopping and _failure; held over an add's id check and reservation."""
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._failure_listener: Callable[[BaseException], None] | None = None
        self._failure: BaseException | None = None

    @property
    def cache_info(self) -> CacheInfo:
        return CacheInfo(self.scheduler.config.block_size, self.scheduler.config.num_blocks,
                         self.runner.cache_dtype, self.scheduler.config.enable_prefix_caching)

    # ---- thread-safe entry points ----------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    on_output: OutputCallback, images: tuple[ImageInput, ...] = (),
                    prompt_text: str | None = None) -> None:
        """Validate and enqueue; raises ValueError (naming the field) for bad input. `images`: the
        request's (validated, in prompt order), for a model that takes images; `prompt_text`: the
        text `prompt_token_ids` were tokenized from, if they were (its processor then reads it)."""
        self.validate(prompt_token_ids, params, images)
        spans: tuple[ImageSpan, ...] = ()
        if images and self.image_prompts is not None:
            prompt = self.image_prompts.prepare(prompt_token_ids, images, prompt_text)
            prompt_token_ids, spans = prompt.token_ids, prompt.images
            self.validate(prompt_token_ids, params)  # the expanded prompt, against max_model_len
            self._check_whole_images(spans)
        request = Request(request_id, tuple(prompt_token_ids), params, images=spans)
        with self._cv:
            if self._failure is not None:
                raise UnavailableError(f"the engine failed and serves no requests: {self._failure!r}")
            if self._stopping:
                raise UnavailableError("the engine is shutting down")
            self.requests.check_id(request_id)  # in use, or no id free (total_num_seqs + waiting)
            if params.structured_outputs is not None:  # it parks until its grammar compiles
                self._check_parked()
            self.requests.reserve(request_id)
            self._intake.append(_Add(request, on_output, time.monotonic(), images))
            self._cv.notify()

    def _check_whole_images(self, spans: tuple[ImageSpan, ...]) -> None:
        cross = sum(span.cross_tokens for span in spans)
        if cross > self.max_model_len:
            raise ValueError(f"image: the request's {len(spans)} image(s) take {cross} tokens of "
                             f"cross-attention KV, more than max_model_len={self.max_model_len}")
        budget = self.scheduler.config.max_num_batched_tokens
        for i, span in enumerate(spans):
            if span.bidirectional and span.length > budget:
                raise ValueError(f"image[{i}] is {span.length} tokens, prefilled in one step (they attend to "
                                 f"each other), more than max_num_batched_tokens={budget}")

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
        """Called once: on the engine thread if the loop dies, after every pending request got its
        error output; or on the watchdog's thread if a step hangs (the engine thread stays hung)."""
        self._failure_listener = listener

    def set_stats_listener(self, listener: StatsListener) -> None:
        """Receive an EngineStats after every step (on the engine thread); set before start."""
        self.stats.listener = listener

    def validate(self, prompt_token_ids: list[int], params: SamplingParams,
                 images: tuple[ImageInput, ...] = ()) -> None:
        if images and not self.takes_images:  # refused before it holds an id, a slot or a KV block
            model = served_model_name(self.config.model, self.config.served_model_name)
            raise ValueError(f"image: the model {model!r} takes no images (a text-only model), got "
                             f"{len(images)}; send the prompt alone")
        if not prompt_token_ids:
            raise ValueError("the prompt is empty (0 tokens)")
        placeholder = self._cross_placeholder
        bad = [t for t in prompt_token_ids if not 0 <= t < self.vocab_size and t != placeholder]
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
        self.watchdog.start()

    def shutdown(self) -> None:
        """Stop the loop; every unfinished request ends with finish_reason 'abort'."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        self._shutting_down.set()  # an injected hang returns; a real one would keep the join waiting
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._drain_intake()
        self.pipeline.abandon()
        self.requests.finish_all(RequestStatus.FINISHED_ABORTED)
        self.grammars.shutdown()
        self.runner.close()

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the loop itself broke: fail everything, refuse new work
            logger.exception("the engine thread failed")
            self._refuse_work(exc)
            self._drain_intake()
            self.pipeline.abandon()
            self.requests.finish_all(RequestStatus.FINISHED_ERROR, error=f"engine failed: {exc!r}",
                                     error_kind=ErrorKind.UNAVAILABLE)
            self.stats.report(None)
            if self._failure_listener is not None:
                self._failure_listener(exc)

    def _fail(self, exc: StepTimeout) -> None:
        """The watchdog's verdict (on its thread): the engine thread stays where it hangs, so the
        failure listener ends every request in flight and the model instance exits."""
        self._refuse_work(exc)
        if self._failure_listener is not None:
            self._failure_listener(exc)

    def _refuse_work(self, exc: BaseException) -> None:
        with self._cv:
            self._failure = exc
            self._stopping = True

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
        with self.watchdog.timing():
            result = self.pipeline.next(run_empty=had_intake)  # schedule → execute → sample
        if result.done is not None:
            self.outputs.record(result.done, result.sampled, result.error)  # update → emit
            self.stats.report(result.done)
        return result.mode

    def _take_intake(self) -> bool:
        """Apply queued adds and aborts (reporting at once what they changed), and admit the
        requests whose grammars compiled; return whether there were any adds or aborts."""
        had_intake = self._drain_intake()
        self.requests.resolve_grammars()
        if not self.scheduler.has_work or self.stats.has_finished:
            self.stats.report(None)  # aborts applied: report now, not after the next step
        return had_intake

    def _drain_intake(self) -> bool:
        with self._cv:
            items = list(self._intake)
            self._intake.clear()
        for item in items:
            if isinstance(item, _Add):
                self.requests.admit(item.request, item.on_output, item.arrival, item.images)
            elif item.request_id in self.requests:
                self.requests.finish(item.request_id, RequestStatus.FINISHED_ABORTED)
        return bool(items)

    def _current_request_ids(self) -> tuple[str, ...]:
        """The requests of the step being handed to the runner (the fault injector's batch)."""
        step = self.pipeline.current
        return () if step is None else step.request_ids

    def _execution_counters(self) -> tuple[int, ...]:
        return (self.runner.eager_steps, self.runner.traced_steps, self.pipeline.decode_drains,
                self.pipeline.host_sampling_steps, *self.runner.mm_cache_counts)
