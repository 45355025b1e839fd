"""Turn engine outputs of one request into the output tensors of its responses (numpy only).

Streamed requests get one response per engine output carrying only what is new; a non-streamed
request gets one response at the end with everything (prompt first unless
`exclude_input_in_output`), as vllm_backend does.

Logprobs: `logprobs` (text schema) is a JSON list with one object per new token,
`{token_id: {"logprob", "rank", "decoded_token"}}`; `output_log_probs` (ids schema, TRT-LLM) is
the sampled tokens' logprobs. The ids schema always sends `output_log_probs` and `cum_log_probs`,
as TRT-LLM does (zeros unless `return_log_probs`), so the ensemble can map them unconditionally.
"""

from __future__ import annotations

import json

import numpy as np

from tt_backend.engine.outputs import PositionLogprobs, RequestOutput
from tt_backend.triton.request_inputs import GenerateRequest

Tensors = dict[str, np.ndarray]


def string_tensor(value: str) -> np.ndarray:
    """A one-element BYTES tensor holding `value` as UTF-8."""
    return np.array([value.encode("utf-8")], dtype=np.object_)


def _ids(values: tuple[int, ...] | list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int32)


class ResponseBuilder:
    def __init__(self, request: GenerateRequest, prompt_ids: tuple[int, ...]) -> None:
        self.request = request
        self.prompt_ids = prompt_ids
        self._text: list[str] = []
        self._ids: list[int] = []
        self._logprobs: list[PositionLogprobs] = []

    def on_output(self, out: RequestOutput) -> Tensors | None:
        """Tensors to send for this output, or None while a non-streamed request accumulates."""
        if self.request.stream:
            return self._tensors(out, out.text, out.new_token_ids, out.context_token_ids,
                                 len(out.new_token_ids), out.logprobs or ())
        self._text.append(out.text)
        self._ids.extend(out.new_token_ids)
        self._logprobs.extend(out.logprobs or ())
        if not out.finished:
            return None
        prepend = not self.request.exclude_input_in_output
        text = (self.request.prompt_text or "") + "".join(self._text) if prepend else "".join(self._text)
        ids = (list(self.prompt_ids) if prepend else []) + self._ids
        return self._tensors(out, text, tuple(ids), (), len(self._ids), self._logprobs)

    def _tensors(self, out: RequestOutput, text: str, ids: tuple[int, ...], context: tuple[int, ...],
                 num_output_tokens: int, logprobs: tuple[PositionLogprobs, ...] | list[PositionLogprobs]
                 ) -> Tensors:
        req = self.request
        tensors: Tensors = {"output_ids": _ids(ids), "context_ids": _ids(context)} if req.ids_mode else {}
        if not req.ids_mode or req.return_text_output:
            tensors["text_output"] = string_tensor(text)
        if req.ids_mode:
            sampled = [_sampled_logprob(p) for p in logprobs] if req.return_log_probs else []
            tensors["output_log_probs"] = np.array(sampled or [0.0] * num_output_tokens, dtype=np.float32)
            cumulative = out.cumulative_logprob if req.return_log_probs else None
            tensors["cum_log_probs"] = np.array([cumulative or 0.0], dtype=np.float32)
        if req.return_logprobs:
            tensors["logprobs"] = string_tensor(json.dumps([
                {str(token): {"logprob": e.logprob, "rank": e.rank, "decoded_token": e.decoded_token}
                 for token, e in position.items()} for position in logprobs]))
        if req.return_cumulative_logprob:
            tensors["cumulative_logprob"] = np.array([out.cumulative_logprob or 0.0], dtype=np.float32)
        if req.return_finish_reason:
            tensors["finish_reason"] = string_tensor(str(out.finish_reason))
        if req.return_num_input_tokens:
            tensors["num_input_tokens"] = np.array([out.num_prompt_tokens], dtype=np.uint32)
        if req.return_num_output_tokens:
            tensors["num_output_tokens"] = np.array([num_output_tokens], dtype=np.uint32)
        return tensors


def _sampled_logprob(position: PositionLogprobs) -> float:
    """The sampled token's logprob: the engine puts it first."""
    return next(iter(position.values())).logprob
