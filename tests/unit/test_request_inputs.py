import re

import numpy as np
import pytest

from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.structured import GrammarKind, StructuredOutputs
from tt_backend.triton.request_inputs import parse_generate_request


def s(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=np.object_)


def test_vllm_schema() -> None:
    req = parse_generate_request({
        "text_input": s("héllo"), "stream": np.array([True]),
        "sampling_parameters": s('{"temperature": "0", "max_tokens": 5}'),
        "return_finish_reason": np.array([True])})
    assert req.prompt_text == "héllo" and req.prompt_ids is None and not req.ids_mode
    assert req.stream and req.return_finish_reason and not req.exclude_input_in_output
    assert req.sampling == SamplingParams(max_tokens=5, temperature=0.0)


def test_trt_schema_is_greedy_without_top_k_or_top_p() -> None:
    req = parse_generate_request({
        "input_ids": np.array([5, 6, 7], dtype=np.int32), "max_tokens": np.array([9], dtype=np.int32),
        "min_length": np.array([3], dtype=np.int32),
        "temperature": np.array([0.7], dtype=np.float32), "end_id": np.array([2], dtype=np.int32),
        "pad_id": np.array([2], dtype=np.int32), "stop_words": np.array([b""], dtype=np.object_)})
    assert req.prompt_ids == (5, 6, 7) and req.ids_mode
    assert req.sampling == SamplingParams(max_tokens=9, min_tokens=3, temperature=0.0, ignore_eos=True,
                                          stop_token_ids=(2,))


def test_trt_schema_carries_penalties_words_and_logprobs() -> None:
    f32 = np.float32
    req = parse_generate_request({
        "input_ids": np.array([5], dtype=np.int32), "max_tokens": np.array([4], dtype=np.int32),
        "top_p": np.array([0.9], dtype=f32), "min_p": np.array([0.25], dtype=f32),
        "repetition_penalty": np.array([1.25], dtype=f32), "presence_penalty": np.array([0.5], dtype=f32),
        "frequency_penalty": np.array([-0.5], dtype=f32), "return_log_probs": np.array([True]),
        "stop_words": np.array([b"END", b""], dtype=np.object_),
        "bad_words": np.array([b"darn"], dtype=np.object_)})
    assert req.return_log_probs
    assert req.sampling == SamplingParams(
        max_tokens=4, temperature=1.0, top_p=0.8999999761581421, min_p=0.25, repetition_penalty=1.25,
        presence_penalty=0.5, frequency_penalty=-0.5, stop=("END",), bad_words=("darn",), logprobs=0)


def test_vllm_logprob_flags_ask_for_the_sampled_tokens_logprobs() -> None:
    req = parse_generate_request({"text_input": s("a"), "return_cumulative_logprob": np.array([True])})
    assert req.return_cumulative_logprob and req.sampling.logprobs == 0
    req = parse_generate_request({"text_input": s("a"), "return_logprobs": np.array([True]),
                                  "sampling_parameters": s('{"logprobs": 4}')})
    assert req.return_logprobs and req.sampling.logprobs == 4


def test_a_max_tokens_tensor_keeps_the_sampling_parameters_temperature() -> None:
    """A TRT-LLM scalar beside sampling_parameters used to apply TRT-LLM's greedy default over
    the JSON's temperature (silently greedy)."""
    req = parse_generate_request({"text_input": s("a"), "max_tokens": np.array([3], dtype=np.int32),
                                  "sampling_parameters": s('{"temperature": 0.7, "seed": 2}')})
    assert req.sampling == SamplingParams(max_tokens=3, temperature=0.7, seed=2)


def test_trt_schema_samples_with_top_k() -> None:
    req = parse_generate_request({
        "input_ids": np.array([5], dtype=np.int32), "max_tokens": np.array([4], dtype=np.int32),
        "top_k": np.array([40], dtype=np.int32), "top_p": np.array([0.0], dtype=np.float32),
        "seed": np.array([11], dtype=np.uint64)})
    assert req.sampling == SamplingParams(max_tokens=4, temperature=1.0, top_k=40, top_p=1.0, seed=11)


@pytest.mark.parametrize("inputs, message", [
    ({}, "give exactly one of the inputs text_input or input_ids"),
    ({"text_input": s("a"), "input_ids": np.array([1], dtype=np.int32)}, "exactly one"),
    ({"text_input": np.array([b"a", b"b"], dtype=np.object_)}, "text_input must hold exactly one element"),
    ({"text_input": np.array([b"\xff"], dtype=np.object_)}, "text_input is not valid UTF-8"),
    ({"text_input": s("a"), "sampling_parameters": s("{bad")}, "sampling_parameters is not valid JSON"),
    ({"text_input": s("a"), "sampling_parameters": s("[1]")}, "must be a JSON object"),
    ({"text_input": s("a"), "stream": np.array([1], dtype=np.int32)}, "input stream must be BOOL"),
    ({"input_ids": np.array([1.5], dtype=np.float32)}, "input_ids must be integer token ids"),
    ({"input_ids": np.array([[1], [2]], dtype=np.int32)}, "input_ids must be a 1-D list"),
    ({"text_input": s("a"), "bad_words": np.array([b"x"], dtype=np.object_),
      "sampling_parameters": s('{"bad_words": ["y"]}')},
     "['bad_words'] given both as input tensors and in sampling_parameters"),
    ({"text_input": s("a"), "max_tokens": np.array([3], dtype=np.int32),
      "sampling_parameters": s('{"max_tokens": 4}')},
     "given both as input tensors and in sampling_parameters"),
    ({"text_input": s("a"), "nonsense": np.array([1])}, "unknown input tensor(s) ['nonsense']"),
    ({"text_input": s("a"), "top_k": np.array([5], dtype=np.int32),
      "sampling_parameters": s('{"temperature": 0.5}')},
     "['top_k'] given as input tensors and ['temperature'] in sampling_parameters: choose the sampling "
     "in one place"),
])
def test_malformed_inputs_are_named(inputs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_generate_request(inputs)
    assert message in str(err.value)


def test_trt_guided_decoding_inputs_become_structured_outputs() -> None:
    ids = {"input_ids": np.array([5], dtype=np.int32), "max_tokens": np.array([4], dtype=np.int32)}
    cases = [("json", "", StructuredOutputs(GrammarKind.JSON_OBJECT, "")),
             ("json_schema", '{"type": "object"}', StructuredOutputs(GrammarKind.JSON, '{"type": "object"}')),
             ("regex", "[a-z]+", StructuredOutputs(GrammarKind.REGEX, "[a-z]+")),
             ("ebnf_grammar", 'root ::= "a"', StructuredOutputs(GrammarKind.GRAMMAR, 'root ::= "a"'))]
    for kind, guide, expected in cases:
        req = parse_generate_request({**ids, "guided_decoding_guide_type": s(kind),
                                      "guided_decoding_guide": s(guide)})
        assert req.sampling.structured_outputs == expected and req.sampling.temperature == 0.0
    # On the vllm_backend schema too, without touching its sampling parameters.
    req = parse_generate_request({"text_input": s("hi"), "sampling_parameters": s('{"temperature": 0.8}'),
                                  "guided_decoding_guide_type": s("regex"),
                                  "guided_decoding_guide": s("[0-9]+")})
    assert req.sampling.temperature == 0.8
    assert req.sampling.structured_outputs == StructuredOutputs(GrammarKind.REGEX, "[0-9]+")


@pytest.mark.parametrize(("inputs", "message"), [
    ({"guided_decoding_guide_type": "xml", "guided_decoding_guide": "x"},
     "guided_decoding_guide_type must be one of json, json_schema, regex, ebnf_grammar, structural_tag, "
     "got 'xml'"),
    ({"guided_decoding_guide_type": "regex"},
     "guided_decoding_guide_type 'regex' needs guided_decoding_guide"),
    ({"guided_decoding_guide": "x"}, "guided_decoding_guide_type must be one of"),
    ({"guided_decoding_guide_type": "json_schema", "guided_decoding_guide": "{oops"},
     "structured_outputs.json is not valid JSON"),
])
def test_bad_guided_decoding_inputs_name_the_input(inputs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_generate_request({"input_ids": np.array([5], dtype=np.int32),
                                **{k: s(v) for k, v in inputs.items()}})
