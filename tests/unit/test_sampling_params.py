import pytest

from tt_backend.sampling.params import SamplingParams


def test_values_may_arrive_as_strings() -> None:
    p = SamplingParams.from_dict({"temperature": "0", "max_tokens": "32", "top_p": "0.5",
                                  "ignore_eos": "true", "seed": 7, "stop_token_ids": [2, "3"]})
    assert p == SamplingParams(max_tokens=32, temperature=0.0, top_p=0.5, ignore_eos=True, seed=7,
                               stop_token_ids=(2, 3))
    assert p.greedy


@pytest.mark.parametrize("values, message", [
    ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
    ({"max_tokens": "x"}, "max_tokens must be an integer, got 'x'"),
    ({"max_tokens": True}, "max_tokens must be an integer, got True"),
    ({"temperature": -1}, "temperature must be a finite number >= 0, got -1.0"),
    ({"temperature": "nan"}, "temperature must be a finite number >= 0, got nan"),
    ({"top_p": 0}, "top_p must be in (0, 1], got 0.0"),
    ({"top_k": -2}, "top_k must be -1, 0 (disabled) or >= 1, got -2"),
    ({"seed": -1}, "seed must be in [0, 2**64), got -1"),
    ({"ignore_eos": "yes"}, "ignore_eos must be a boolean, got 'yes'"),
    ({"stop_token_ids": 5}, "stop_token_ids must be a list of integers, got 5"),
    ({"logprobs": 2}, "sampling parameter 'logprobs' is not supported yet"),
    ({"min_tokens": 5, "max_tokens": 4}, "min_tokens must be in [0, max_tokens=4], got 5"),
    ({"frobnicate": 1}, "unknown sampling parameter 'frobnicate'"),
])
def test_bad_values_name_field_and_value(values: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        SamplingParams.from_dict(values)
    assert message in str(err.value)
