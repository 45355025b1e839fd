"""Output processing: the live state of each request the scheduler does not need, the tokens a
step sampled turned into outputs (stop and length checks, detokenising, logprobs), and finishing.

A request's stream is a sequence of `RequestOutput`s ending with exactly one final output (its
finish reason set), whichever way it ends: a stop condition, its length limit, an abort, an error.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from tt_backend.contract.errors import ErrorKind
from tt_backend.contract.modes import FinishReason, RequestStatus
from tt_backend.contract.sampling import SampledTokens, TokenLogprobs
from tt_backend.engine.grammar_compiler import GrammarCompiler
from tt_backend.engine.outputs import Logprob, PositionLogprobs, RequestOutput
from tt_backend.engine.stats import FinishedRequestStats
from tt_backend.engine.stats_collector import StatsCollector
from tt_backend.engine.step_sampling import RequestSampling, SamplingRow
from tt_backend.engine.stop_strings import OutputText
from tt_backend.sampling.grammar import GrammarMatcher
from tt_backend.sampling.host_sampler import bad_word_token_ids
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.request import Request
from tt_backend.scheduler.scheduled_step import SampledToken, ScheduledStep
from tt_backend.text.detokenizer import IncrementalDetokenizer, Tokenizer

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

    @property
    def row(self) -> SamplingRow:
        return SamplingRow(self.request, self.sampling, self.grammar)


def tokens_left(request: Request, max_model_len: int) -> int:
    """Tokens the request may still generate within max_tokens and max_model_len (the one length
    check: at 0 it finishes with `length`; async decode runs ahead only while it is positive)."""
    return min(request.sampling.max_tokens - len(request.output_token_ids),
               max_model_len - request.num_tokens)


class OutputProcessor:
    def __init__(self, scheduler: LaneCoordinator, tokenizer: Tokenizer, eos_token_ids: frozenset[int],
                 max_model_len: int, stats: StatsCollector, seed: int,
                 on_finished: Callable[[str], None], grammars: GrammarCompiler | None = None) -> None:
        self.scheduler = scheduler
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.stats = stats
        self.live: dict[str, LiveRequest] = {}
        self._seeds = random.Random(seed)
        self._on_finished = on_finished
        self.grammars = grammars
        self._compiling: dict[str, Future[Any]] = {}
        """The grammar compiles of parked requests, by request id."""

    def admit(self, request: Request, on_output: OutputCallback, arrival: float) -> None:
        """Start tracking the request and hand it to the scheduler. What admission computes from
        the request's own values (its bad words' tokens, its detokenizer) runs guarded: if it
        raises, that request alone ends with the error and nothing else is touched."""
        try:
            live = self._live_request(request, on_output, arrival)
        except Exception as exc:  # noqa: BLE001 (this request's values: it alone ends)
            logger.warning("request %s refused at admission: %s", request.request_id, type(exc).__name__)
            self._on_finished(request.request_id)
            on_output(RequestOutput(request.request_id, (), (), "", len(request.prompt_token_ids),
                                    FinishReason.ERROR, f"the request cannot be served: {exc}",
                                    error_kind=ErrorKind.INVALID_ARGUMENT))
            return
        self.live[request.request_id] = live
        params = request.sampling
        if params.structured_outputs is not None:
            assert self.grammars is not None, "the engine validates structured outputs on add"
            self._compiling[request.request_id] = self.grammars.submit(params.structured_outputs)
            request.precondition = lambda: live.grammar is not None  # parked until compiled
        self.scheduler.add(request)

    def _live_request(self, request: Request, on_output: OutputCallback, arrival: float) -> LiveRequest:
        params = request.sampling
        seed = params.seed if params.seed is not None else self._seeds.getrandbits(64)
        bannable = (() if params.ignore_eos else tuple(sorted(self.eos_token_ids))) + params.stop_token_ids
        bad_words = bad_word_token_ids(lambda text: self.tokenizer(text, add_special_tokens=False).input_ids,
                                       params.bad_words) if params.bad_words else ()
        detokenizer = IncrementalDetokenizer(self.tokenizer, request.prompt_token_ids,
                                             params.skip_special_tokens)
        return LiveRequest(request, detokenizer, on_output, RequestSampling(seed, bannable, bad_words),
                           OutputText(params.stop, params.include_stop_str_in_output), arrival)

    def resolve_grammars(self) -> None:
        """Give each request whose grammar compiled its matcher (so the scheduler admits it); end
        those whose grammar failed to compile with the compile error."""
        for request_id, compiling in list(self._compiling.items()):
            if not compiling.done():
                continue
            del self._compiling[request_id]
            try:
                self.live[request_id].grammar = GrammarMatcher(compiling.result())
            except Exception as exc:  # noqa: BLE001 (the compile error ends only this request)
                self.finish(request_id, RequestStatus.FINISHED_ERROR, error=str(exc),
                            error_kind=ErrorKind.INVALID_ARGUMENT)

    def apply(self, step: ScheduledStep, sampled: SampledTokens) -> None:
        """Hand the step's tokens to the scheduler, then process each (with its logprobs)."""
        rows = zip(step.request_ids, step.plan.rows, strict=True)
        sampled_ids = [rid for rid, row in rows if row.sample]
        logprobs: dict[str, TokenLogprobs] = {}
        if sampled.logprobs is not None:
            logprobs = {rid: lp for rid, lp in zip(sampled_ids, sampled.logprobs, strict=True)
                        if lp is not None}
        errors: dict[str, str] = {}
        if sampled.errors is not None:  # rows whose own sampling inputs failed: they alone end
            errors = {rid: e for rid, e in zip(sampled_ids, sampled.errors, strict=True) if e is not None}
        for token in self.scheduler.update(step, list(sampled.tokens)):
            request_id = token.request.request_id
            if request_id in errors:
                self.finish(request_id, RequestStatus.FINISHED_ERROR, error=errors[request_id],
                            error_kind=ErrorKind.INTERNAL)
            else:
                self._process_token(token, logprobs.get(request_id))

    def record(self, step: ScheduledStep, sampled: SampledTokens | None, error: Exception | None) -> None:
        """A step's results are in: its tokens (none for an empty step), or the error it failed with."""
        if error is not None:
            self.fail(step, error)
        elif sampled is not None:
            self.apply(step, sampled)

    def fail(self, step: ScheduledStep, exc: Exception) -> None:
        """A step failed: end its (still live) requests with the error; the engine goes on."""
        logger.error("step failed (%s, %d rows)", step.mode, len(step.plan.rows), exc_info=exc)
        for request_id in step.request_ids:
            if request_id in self.live:
                self.finish(request_id, RequestStatus.FINISHED_ERROR, error=f"step failed: {exc}",
                            error_kind=ErrorKind.INTERNAL)

    def finish_all(self, status: RequestStatus, error: str | None = None,
                   error_kind: ErrorKind | None = None) -> None:
        for request_id in list(self.live):
            self.finish(request_id, status, error=error, error_kind=error_kind)

    def finish(self, request_id: str, status: RequestStatus,
               tokens: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
               error: str | None = None, error_kind: ErrorKind | None = None) -> None:
        """Free the request everywhere and send its one final output (with `tokens`: the context
        and new token ids it still carries)."""
        lane = self.scheduler.lane_of[request_id]
        self.scheduler.finish(request_id, status)
        live = self.live.pop(request_id)
        compiling = self._compiling.pop(request_id, None)
        if compiling is not None and self.grammars is not None:
            self.grammars.release(compiling)  # a compile nobody else waits for is cancelled or dropped
        self._on_finished(request_id)
        context, new = tokens or ((), ())
        reason = status.finish_reason
        self.stats.on_finished(lane, _finished_stats(live, reason, time.monotonic()))
        if error is not None and error_kind is None:
            error_kind = ErrorKind.INTERNAL
        live.on_output(self._output(live, context, new, reason, error, error_kind))

    def _process_token(self, sampled: SampledToken, lp: TokenLogprobs | None = None) -> None:
        request, token = sampled.request, sampled.token_id
        params = request.sampling
        live = self.live[request.request_id]
        if lp is not None:
            live.logprobs.append(self._position_logprobs(lp))
            live.cumulative_logprob += lp.logprob
        now = time.monotonic()
        self.stats.on_token(self.scheduler.lane_of[request.request_id], len(request.prompt_token_ids),
                            None if live.last_token is None else now - live.last_token)
        live.first_token = live.first_token or now
        live.last_token = now
        reason: RequestStatus | None = None
        if (token in self.eos_token_ids and not params.ignore_eos) or token in params.stop_token_ids:
            reason = RequestStatus.FINISHED_STOPPED
        elif tokens_left(request, self.max_model_len) <= 0:
            reason = RequestStatus.FINISHED_LENGTH
        error = None
        if live.grammar is not None:
            if not live.grammar.accept(token):
                reason, error = RequestStatus.FINISHED_ERROR, f"structured_outputs: the grammar stopped at " \
                    f"token {token}: {live.grammar.error or 'the token is not allowed here'}"
            elif live.grammar.is_terminated:  # the output is complete
                reason = reason or RequestStatus.FINISHED_STOPPED
        delta = live.detokenizer.add(token, flush=reason is not None)
        if delta is None:
            return
        context, new, text = delta
        if live.text.append(text) is not None and error is None:
            reason = RequestStatus.FINISHED_STOPPED
        if reason is not None:
            self.finish(request.request_id, reason, (context, new), error, ErrorKind.INVALID_ARGUMENT)
        else:
            live.on_output(self._output(live, context, new))

    def _position_logprobs(self, lp: TokenLogprobs) -> PositionLogprobs:
        """The sampled token first (as vLLM orders them), then the top alternatives."""
        decode = self.tokenizer.decode
        entries = {lp.token_id: Logprob(lp.logprob, lp.rank, decode([lp.token_id]))}
        for rank, (token, value) in enumerate(lp.top, start=1):
            entries.setdefault(token, Logprob(value, rank, decode([token])))
        return entries

    def _output(self, live: LiveRequest, context: tuple[int, ...], new: tuple[int, ...],
                reason: FinishReason | None = None, error: str | None = None,
                error_kind: ErrorKind | None = None) -> RequestOutput:
        """The output carrying `new` tokens, the text not handed out yet, and pending logprobs."""
        asked = live.request.sampling.logprobs is not None
        logprobs = None
        if asked:
            logprobs, live.logprobs = tuple(live.logprobs), []
        return RequestOutput(live.request.request_id, new, context, live.text.take(reason is not None),
                             len(live.request.prompt_token_ids), reason, error, logprobs,
                             live.cumulative_logprob if asked else None, error_kind if error else None)


def _finished_stats(live: LiveRequest, reason: FinishReason, now: float) -> FinishedRequestStats:
    n = len(live.request.output_token_ids)
    first, last, admitted = live.first_token, live.last_token, live.admitted
    tpot = None
    if n > 1 and first is not None and last is not None:
        tpot = (last - first) / (n - 1)
    return FinishedRequestStats(
        reason=reason, num_prompt_tokens=len(live.request.prompt_token_ids), num_generation_tokens=n,
        queue_time_s=None if admitted is None else admitted - live.arrival,
        ttft_s=None if first is None else first - live.arrival,
        e2e_s=now - live.arrival, time_per_output_token_s=tpot,
        prefill_time_s=None if first is None or admitted is None else first - admitted,
        decode_time_s=None if first is None or last is None else last - first,
        inference_time_s=None if last is None or admitted is None else last - admitted)
