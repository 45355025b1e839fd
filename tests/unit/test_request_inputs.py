import numpy as np
import pytest

from tt_backend.sampling.params import SamplingParams
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
    ({"text_input": s("a"), "bad_words": np.array([b"x"], dtype=np.object_)},
     "bad_words is not supported yet"),
    ({"text_input": s("a"), "max_tokens": np.array([3], dtype=np.int32),
      "sampling_parameters": s('{"max_tokens": 4}')},
     "given both as input tensors and in sampling_parameters"),
    ({"text_input": s("a"), "nonsense": np.array([1])}, "unknown input tensor(s) ['nonsense']"),
])
def test_malformed_inputs_are_named(inputs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_generate_request(inputs)
    assert message in str(err.value)
