import pytest

from tt_backend.sampling.params import SamplingParams


def test_values_may_arrive_as_strings() -> None:
    p = SamplingParams.from_dict({"temperature": "0", "max_tokens": "32", "top_p": "0.5",
                                  "ignore_eos": "true", "seed": 7, "stop_token_ids": [2, "3"]})
    assert p == SamplingParams(max_tokens=32, temperature=0.0, top_p=0.5, ignore_eos=True, seed=7,
                               stop_token_ids=(2, 3))
    assert p.greedy


def test_the_full_vllm_set_parses() -> None:
    p = SamplingParams.from_dict({
        "temperature": "0.7", "top_k": "40", "top_p": 0.9, "min_p": "0.05", "seed": "3", "stop": "END",
        "include_stop_str_in_output": "true", "skip_special_tokens": False, "presence_penalty": "0.5",
        "frequency_penalty": -0.5, "repetition_penalty": "1.1", "logit_bias": {"11": -100, "7": "2.5"},
        "allowed_token_ids": [1, "2"], "bad_words": ["darn"], "logprobs": "3", "n": 1,
        "prompt_logprobs": None, "spaces_between_special_tokens": True})
    assert p == SamplingParams(
        temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, seed=3, stop=("END",),
        include_stop_str_in_output=True,
        skip_special_tokens=False, presence_penalty=0.5, frequency_penalty=-0.5, repetition_penalty=1.1,
        logit_bias=((7, 2.5), (11, -100.0)), allowed_token_ids=(1, 2), bad_words=("darn",), logprobs=3)
    assert p.needs_host and p.filtered and not p.greedy
    assert not SamplingParams(temperature=0.5, min_p=0.1, seed=1).needs_host
    assert p.token_ids() == [("logit_bias", 7), ("logit_bias", 11), ("allowed_token_ids", 1),
                             ("allowed_token_ids", 2)]


@pytest.mark.parametrize("values, message", [
    ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
    ({"max_tokens": "x"}, "max_tokens must be an integer, got 'x'"),
    ({"max_tokens": True}, "max_tokens must be an integer, got True"),
    ({"temperature": -1}, "temperature must be a finite number >= 0, got -1.0"),
    ({"temperature": "nan"}, "temperature must be a finite number, got nan"),
    ({"top_p": 0}, "top_p must be in (0, 1], got 0.0"),
    ({"top_k": -2}, "top_k must be -1, 0 (disabled) or in [1, 2147483647], got -2"),
    ({"seed": -1}, "seed must be in [0, 2**64), got -1"),
    ({"ignore_eos": "yes"}, "ignore_eos must be a boolean, got 'yes'"),
    ({"stop_token_ids": 5}, "stop_token_ids must be a list of integers, got 5"),
    ({"logprobs": 21}, "logprobs must be in [0, 20], got 21"),
    ({"prompt_logprobs": 1}, "sampling parameter 'prompt_logprobs': prompt_logprobs is not supported"),
    ({"n": 2}, "n must be 1 (one sequence per request; send 2 requests instead), got 2"),
    ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5"),
    ({"presence_penalty": 3}, "presence_penalty must be in [-2, 2], got 3.0"),
    ({"repetition_penalty": 0}, "repetition_penalty must be > 0, got 0.0"),
    ({"logit_bias": {"5": 200}}, "logit_bias maps token ids >= 0 to biases in [-100, 100], got 5: 200.0"),
    ({"logit_bias": [5]}, "logit_bias must be an object of token id to bias, got [5]"),
    ({"allowed_token_ids": []}, "allowed_token_ids must be a non-empty list of token ids, got []"),
    ({"stop": 5}, "stop must be a string or a list of strings, got 5"),
    ({"stop": [""]}, "stop must not contain empty strings"),
    ({"bad_words": [" "]}, "bad_words must not contain empty strings"),
    ({"min_tokens": 5, "max_tokens": 4}, "min_tokens must be in [0, max_tokens=4], got 5"),
    ({"frobnicate": 1}, "unknown sampling parameter 'frobnicate'"),
])
def test_bad_values_name_field_and_value(values: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        SamplingParams.from_dict(values)
    assert message in str(err.value)
