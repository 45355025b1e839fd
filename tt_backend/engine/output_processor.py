"""Output processing: the tokens a step sampled turned into outputs (stop and length checks,
detokenising, logprobs). A request that ends here is finished by the request table, which sends
its one final output."""

from __future__ import annotations

import logging
import time

from tt_backend.contract.errors import ErrorKind
from tt_backend.contract.modes import RequestStatus
from tt_backend.contract.sampling import SampledTokens, TokenLogprobs
from tt_backend.engine.outputs import Logprob, PositionLogprobs
from tt_backend.engine.requests import RequestTable, tokens_left
from tt_backend.engine.stats_collector import StatsCollector
from tt_backend.scheduler.lane_coordinator import LaneCoordinator
from tt_backend.scheduler.scheduled_step import SampledToken, ScheduledStep
from tt_backend.text.detokenizer import Tokenizer

logger = logging.getLogger(__name__)


class OutputProcessor:
    def __init__(self, scheduler: LaneCoordinator, requests: RequestTable, tokenizer: Tokenizer,
                 eos_token_ids: frozenset[int], max_model_len: int, stats: StatsCollector) -> None:
        self.scheduler = scheduler
        self.requests = requests
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.stats = stats

    def record(self, step: ScheduledStep, sampled: SampledTokens | None, error: Exception | None) -> None:
        """A step's results are in: its tokens (none for an empty step), or the error it failed with."""
        if error is not None:
            self.fail(step, error)
        elif sampled is not None:
            self.apply(step, sampled)

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
                self.requests.finish(request_id, RequestStatus.FINISHED_ERROR, error=errors[request_id],
                                     error_kind=ErrorKind.INTERNAL)
            else:
                self._process_token(token, logprobs.get(request_id))

    def fail(self, step: ScheduledStep, exc: Exception) -> None:
        """A step failed: end its (still live) requests with the error; the engine goes on."""
        logger.error("step failed (%s, %d rows)", step.mode, len(step.plan.rows), exc_info=exc)
        for request_id in step.request_ids:
            if request_id in self.requests:
                self.requests.finish(request_id, RequestStatus.FINISHED_ERROR, error=f"step failed: {exc}",
                                     error_kind=ErrorKind.INTERNAL)

    def _process_token(self, sampled: SampledToken, lp: TokenLogprobs | None = None) -> None:
        request, token = sampled.request, sampled.token_id
        params = request.sampling
        live = self.requests[request.request_id]
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
            self.requests.finish(request.request_id, reason, (context, new), error,
                                 ErrorKind.INVALID_ARGUMENT)
        else:
            live.on_output(live.output(context, new))

    def _position_logprobs(self, lp: TokenLogprobs) -> PositionLogprobs:
        """The sampled token first (as vLLM orders them), then the top alternatives."""
        decode = self.tokenizer.decode
        entries = {lp.token_id: Logprob(lp.logprob, lp.rank, decode([lp.token_id]))}
        for rank, (token, value) in enumerate(lp.top, start=1):
            entries.setdefault(token, Logprob(value, rank, decode([token])))
        return entries
