import json

import numpy as np

from tt_backend.engine.outputs import Logprob, RequestOutput
from tt_backend.sampling.params import SamplingParams
from tt_backend.triton.request_inputs import GenerateRequest
from tt_backend.triton.response_builder import ResponseBuilder


def out(new: tuple[int, ...], text: str, reason: str | None = None) -> RequestOutput:
    return RequestOutput("r", new, (9,), text, 3, reason)  # type: ignore[arg-type]


def test_stream_sends_only_new_text_and_counts() -> None:
    req = GenerateRequest("Hi", None, SamplingParams(), stream=True, return_finish_reason=True,
                          return_num_output_tokens=True, return_num_input_tokens=True)
    b = ResponseBuilder(req, (1, 2, 3))
    first = b.on_output(out((5, 6), " there"))
    assert first is not None
    assert first["text_output"].tolist() == [b" there"]
    assert first["finish_reason"].tolist() == [b"None"]
    assert first["num_output_tokens"].tolist() == [2] and first["num_input_tokens"].tolist() == [3]
    last = b.on_output(out((7,), "!", "stop"))
    assert last is not None and last["text_output"].tolist() == [b"!"]
    assert last["finish_reason"].tolist() == [b"stop"] and last["num_output_tokens"].tolist() == [1]


def test_non_stream_prepends_prompt_unless_excluded() -> None:
    for exclude, expected in ((False, "Hi there!"), (True, " there!")):
        b = ResponseBuilder(GenerateRequest("Hi", None, SamplingParams(), exclude_input_in_output=exclude),
                            (1, 2, 3))
        assert b.on_output(out((5, 6), " there")) is None
        final = b.on_output(out((7,), "!", "length"))
        assert final is not None and final["text_output"].tolist() == [expected.encode()]


def test_ids_mode_carries_context_and_prompt_ids() -> None:
    stream = ResponseBuilder(GenerateRequest(None, (1, 2, 3), SamplingParams(), stream=True), (1, 2, 3))
    sent = stream.on_output(out((5,), "x"))
    assert sent is not None
    assert set(sent) == {"output_ids", "context_ids", "output_log_probs", "cum_log_probs"}
    # Not asked for: zeros, as TRT-LLM sends them (the ensemble maps them unconditionally).
    assert sent["output_log_probs"].tolist() == [0.0] and sent["cum_log_probs"].tolist() == [0.0]
    assert sent["output_ids"].dtype == np.int32 and sent["output_ids"].tolist() == [5]
    assert sent["context_ids"].tolist() == [9]
    whole = ResponseBuilder(GenerateRequest(None, (1, 2, 3), SamplingParams()), (1, 2, 3))
    whole.on_output(out((5,), "x"))
    final = whole.on_output(out((6,), "y", "stop"))
    assert final is not None
    assert final["output_ids"].tolist() == [1, 2, 3, 5, 6] and final["context_ids"].tolist() == []


def test_ids_mode_sends_the_engines_text_when_asked() -> None:
    """The OpenAI front's schema: ids in, ids and the detokenized text out."""
    req = GenerateRequest(None, (1, 2), SamplingParams(), stream=True, return_text_output=True)
    sent = ResponseBuilder(req, (1, 2)).on_output(out((5, 6), " there"))
    assert sent is not None and sent["text_output"].tolist() == [b" there"]
    assert sent["output_ids"].tolist() == [5, 6]


def test_logprobs_outputs_in_both_schemas() -> None:
    positions = ({5: Logprob(-0.5, 2, "a"), 8: Logprob(-0.25, 1, "b")}, {6: Logprob(-1.0, 1, "c")})
    first = RequestOutput("r", (5,), (9,), "a", 3, None, None, positions[:1], -0.5)
    last = RequestOutput("r", (6,), (5,), "c", 3, "stop", None, positions[1:], -1.5)
    text = ResponseBuilder(GenerateRequest("Hi", None, SamplingParams(logprobs=1), stream=True,
                                           return_logprobs=True, return_cumulative_logprob=True), (1,))
    sent = text.on_output(first)
    assert sent is not None and json.loads(sent["logprobs"][0]) == [
        {"5": {"logprob": -0.5, "rank": 2, "decoded_token": "a"},
         "8": {"logprob": -0.25, "rank": 1, "decoded_token": "b"}}]
    assert sent["cumulative_logprob"].tolist() == [-0.5]
    ids_request = GenerateRequest(None, (1,), SamplingParams(logprobs=0), return_log_probs=True)
    ids = ResponseBuilder(ids_request, (1,))
    assert ids.on_output(first) is None
    final = ids.on_output(last)
    assert final is not None and final["output_log_probs"].tolist() == [-0.5, -1.0]
    assert final["cum_log_probs"].tolist() == [-1.5]
