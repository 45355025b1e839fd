"""RequestTable: the requests the engine serves, from their id's reservation to their one final output.

It owns what the scheduler does not need of each request (its `LiveRequest`: detokenizer, stop
strings, sampling seeds, timings, grammar matcher), admission, the parking of requests until their
grammar compiles, and finishing. A request's stream ends with exactly one final output, whichever
way it ends: a stop condition, its length limit, an abort, an error; `finish` is the only place
that sends it.

The ids in use are the one part other threads touch (`add_request` reserves an id on the caller's
thread; finishing releases it on the engine thread), so they have their own lock. An id is released
before its final output goes out, so a client may reuse it as soon as it sees the end.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from tt_backend.config import EngineConfig
from tt_backend.contract.errors import CapacityError, ErrorKind
from tt_backend.contract.modes import FinishReason, RequestStatus
from tt_backend.engine.grammar_compiler import GrammarCompiler
from tt_backend.engine.outputs import PositionLogprobs, RequestOutput
from tt_backend.engine.stats import FinishedRequestStats
from tt_backend.engine.stats_collector import StatsCollector
from tt_backend.engine.step_sampling import RequestSampling, SamplingRow
from tt_backend.engine.stop_strings import OutputText
from tt_backend.sampling.grammar import GrammarMatcher
from tt_backend.sampling.host_sampler import bad_word_token_ids
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.request import Request
from tt_backend.text.detokenizer import IncrementalDetokenizer, Tokenizer
from tt_backend.text.images import ImageInput

logger = logging.getLogger(__name__)

OutputCallback = Callable[[RequestOutput], None]


@dataclass
class LiveRequest:
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
    grammar: GrammarMatcher | None = None
    """Its structured-output matcher, once compiled (the request is parked until then)."""
    images: tuple[ImageInput, ...] = ()
    """Its images, validated, in prompt order (for the vision encoder of a model that takes them;
    each one's sha256 keys the encoder-output cache)."""

    @property
    def row(self) -> SamplingRow:
        return SamplingRow(self.request, self.sampling, self.grammar)

    def output(self, context: tuple[int, ...], new: tuple[int, ...], reason: FinishReason | None = None,
               error: str | None = None, error_kind: ErrorKind | None = None) -> RequestOutput:
        """The output carrying `new` tokens, the text not handed out yet, and pending logprobs."""
        asked = self.request.sampling.logprobs is not None
        logprobs = None
        if asked:
            logprobs, self.logprobs = tuple(self.logprobs), []
        return RequestOutput(self.request.request_id, new, context, self.text.take(reason is not None),
                             len(self.request.prompt_token_ids), reason, error, logprobs,
                             self.cumulative_logprob if asked else None, error_kind if error else None)

    def finished_stats(self, reason: FinishReason, now: float) -> FinishedRequestStats:
        n = len(self.request.output_token_ids)
        first, last, admitted = self.first_token, self.last_token, self.admitted
        tpot = None
        if n > 1 and first is not None and last is not None:
            tpot = (last - first) / (n - 1)
        return FinishedRequestStats(
            reason=reason, num_prompt_tokens=len(self.request.prompt_token_ids), num_generation_tokens=n,
            queue_time_s=None if admitted is None else admitted - self.arrival,
            ttft_s=None if first is None else first - self.arrival,
            e2e_s=now - self.arrival, time_per_output_token_s=tpot,
            prefill_time_s=None if first is None or admitted is None else first - admitted,
            decode_time_s=None if first is None or last is None else last - first,
            inference_time_s=None if last is None or admitted is None else last - admitted)


def tokens_left(request: Request, max_model_len: int) -> int:
    """Tokens the request may still generate within max_tokens and max_model_len (the one length
    check: at 0 it finishes with `length`; async decode runs ahead only while it is positive)."""
    return min(request.sampling.max_tokens - len(request.output_token_ids),
               max_model_len - request.num_tokens)


class RequestTable:
    def __init__(self, config: EngineConfig, scheduler: LaneCoordinator, tokenizer: Tokenizer,
                 eos_token_ids: frozenset[int], stats: StatsCollector,
                 grammars: GrammarCompiler | None = None) -> None:
        self.scheduler = scheduler
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.stats = stats
        self.grammars = grammars
        self.max_waiting_requests = config.max_waiting_requests
        self.capacity = config.total_num_seqs + config.max_waiting_requests
        """Ids in use at most: every running seat of every lane, and the waiting queue's limit."""
        self._live: dict[str, LiveRequest] = {}
        self._seeds = random.Random(config.seed)
        self._compiling: dict[str, Future[Any]] = {}
        """The grammar compiles of parked requests, by request id."""
        self._ids: set[str] = set()
        """Ids reserved and not yet finished: queued for admission, or live (guarded by _ids_lock)."""
        self._ids_lock = threading.Lock()

    # ---- ids (any thread) --------------------------------------------------------------------
    def check_id(self, request_id: str) -> None:
        """Raise ValueError if the id is in use, CapacityError if no id is free. Callers serialise
        check_id ... reserve (the engine holds its intake lock over both); meanwhile the engine
        thread only releases ids, which keeps a passed check true until its reserve."""
        with self._ids_lock:
            if request_id in self._ids:
                raise ValueError(f"request id {request_id!r} is already in use")
            if len(self._ids) >= self.capacity:
                raise CapacityError(f"the server is at capacity ({len(self._ids)} requests in flight, "
                                    f"max_waiting_requests={self.max_waiting_requests}); retry later")

    def reserve(self, request_id: str) -> None:
        """Hold the id until the request finishes (after a passed check_id)."""
        with self._ids_lock:
            self._ids.add(request_id)

    def _release(self, request_id: str) -> None:
        with self._ids_lock:
            self._ids.discard(request_id)

    # ---- the live requests (the engine thread) -------------------------------------------------
    def __contains__(self, request_id: str) -> bool:
        return request_id in self._live

    def __getitem__(self, request_id: str) -> LiveRequest:
        return self._live[request_id]

    def get(self, request_id: str) -> LiveRequest | None:
        return self._live.get(request_id)

    def first_tokens(self, request_ids: Iterable[str]) -> frozenset[int]:
        """The first prompt tokens of those of these requests that are live (fault triggers)."""
        prompts = (self._live[rid].request.prompt_token_ids for rid in request_ids if rid in self._live)
        return frozenset(p[0] for p in prompts if p)

    def admit(self, request: Request, on_output: OutputCallback, arrival: float,
              images: tuple[ImageInput, ...] = ()) -> None:
        """Start tracking the request (its id reserved) and hand it to the scheduler. What admission
        computes from the request's own values (its bad words' tokens, its detokenizer) runs
        guarded: if it raises, that request alone ends with the error and nothing else is touched."""
        try:
            live = self._live_request(request, on_output, arrival, images)
        except Exception as exc:  # noqa: BLE001 (this request's values: it alone ends)
            logger.warning("request %s refused at admission: %s", request.request_id, type(exc).__name__)
            self._release(request.request_id)
            on_output(RequestOutput(request.request_id, (), (), "", len(request.prompt_token_ids),
                                    FinishReason.ERROR, f"the request cannot be served: {exc}",
                                    error_kind=ErrorKind.INVALID_ARGUMENT))
            return
        self._live[request.request_id] = live
        params = request.sampling
        if params.structured_outputs is not None:
            assert self.grammars is not None, "the engine validates structured outputs on add"
            self._compiling[request.request_id] = self.grammars.submit(params.structured_outputs)
            request.precondition = lambda: live.grammar is not None  # parked until compiled
        self.scheduler.add(request)

    def _live_request(self, request: Request, on_output: OutputCallback, arrival: float,
                      images: tuple[ImageInput, ...]) -> LiveRequest:
        params = request.sampling
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(64)
        bannable = (() if params.ignore_eos else tuple(sorted(self.eos_token_ids))) + params.stop_token_ids
        bad_words = bad_word_token_ids(lambda text: self.tokenizer(text, add_special_tokens=False).input_ids,
                                       params.bad_words) if params.bad_words else ()
        detokenizer = IncrementalDetokenizer(self.tokenizer, request.prompt_token_ids,
                                             params.skip_special_tokens)
        return LiveRequest(request, detokenizer, on_output, RequestSampling(seed, bannable, bad_words),
                           OutputText(params.stop, params.include_stop_str_in_output), arrival, images=images)

    def resolve_grammars(self) -> None:
        """Give each request whose grammar compiled its matcher (so the scheduler admits it); end
        those whose grammar failed to compile with the compile error."""
        for request_id, compiling in list(self._compiling.items()):
            if not compiling.done():
                continue
            del self._compiling[request_id]
            try:
                self._live[request_id].grammar = GrammarMatcher(compiling.result())
            except Exception as exc:  # noqa: BLE001 (the compile error ends only this request)
                self.finish(request_id, RequestStatus.FINISHED_ERROR, error=str(exc),
                            error_kind=ErrorKind.INVALID_ARGUMENT)

    def finish(self, request_id: str, status: RequestStatus,
               tokens: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
               error: str | None = None, error_kind: ErrorKind | None = None) -> None:
        """Free the request everywhere and send its one final output (with `tokens`: the context
        and new token ids it still carries)."""
        lane = self.scheduler.lane_of[request_id]
        self.scheduler.finish(request_id, status)
        live = self._live.pop(request_id)
        compiling = self._compiling.pop(request_id, None)
        if compiling is not None and self.grammars is not None:
            self.grammars.release(compiling)  # a compile nobody else waits for is cancelled or dropped
        self._release(request_id)
        context, new = tokens or ((), ())
        reason = status.finish_reason
        self.stats.on_finished(lane, live.finished_stats(reason, time.monotonic()))
        if error is not None and error_kind is None:
            error_kind = ErrorKind.INTERNAL
        live.on_output(live.output(context, new, reason, error, error_kind))

    def finish_all(self, status: RequestStatus, error: str | None = None,
                   error_kind: ErrorKind | None = None) -> None:
        for request_id in list(self._live):
            self.finish(request_id, status, error=error, error_kind=error_kind)
