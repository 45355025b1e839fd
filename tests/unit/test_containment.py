"""No request can harm another, in the engine: values that reach code shared by other requests are
refused at the edge, and what still fails on one request's values (its admission, its own host
chain) ends that request alone while the others get exactly the tokens they get alone."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.contract.errors import ErrorKind
from tt_backend.contract.limits import RequestLimits
from tt_backend.engine.engine import LLMEngine
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.device_sampler import sampling_tensors
from tt_backend.sampling.host_sampler import HostRow, host_sample
from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.processors import register
from tt_backend.triton.request_inputs import parse_generate_request

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return build_engine(EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=8))


Requests = dict[str, tuple[list[int], SamplingParams]]
ChatIds = Callable[[str], list[int]]


def run(engine: LLMEngine, requests: Requests) -> dict[str, list[RequestOutput]]:
    """Add every request, step until all finished; each request's outputs."""
    outputs: dict[str, list[RequestOutput]] = {}
    for rid, (ids, params) in requests.items():
        engine.add_request(rid, ids, params, lambda out: outputs.setdefault(out.request_id, []).append(out))
    for _ in range(1000):
        if not engine.has_unfinished:
            break
        engine.step()
    assert not engine.has_unfinished
    return outputs


def tokens(outs: list[RequestOutput]) -> list[int]:
    return [t for o in outs for t in o.new_token_ids]


def blocks_all_free(engine: LLMEngine) -> bool:
    return all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


@pytest.mark.parametrize("values, message", [
    ({"temperature": 10**400}, "temperature must be a finite number, got an integer of 1329 bits"),
    ({"temperature": "1e999"}, "temperature must be a finite number, got inf"),
    ({"top_p": float("nan")}, "top_p must be a finite number, got nan"),
    ({"logit_bias": {"5": float("-inf")}}, "logit_bias must be a finite number, got -inf"),
    ({"top_k": 2**63}, "top_k must be -1, 0 (disabled) or in [1, 2147483647], got 9223372036854775808"),
    ({"max_tokens": 2**64}, "max_tokens must be an integer within 64 bits, got an integer of 65 bits"),
    ({"seed": 2**70}, "seed must be an integer within 64 bits, got an integer of 71 bits"),
    ({"stop_token_ids": [2**40]}, "stop_token_ids must hold token ids in [0, 2147483647], got 1099511627776"),
    ({"logit_bias": {str(2**33): 1}},
     "logit_bias maps token ids >= 0 to biases in [-100, 100], got 8589934592"),
    ({"max_tokens": float("nan")}, "max_tokens must be an integer, got nan"),
    ({"bad_words": ["ok", "\ud800"]},
     "bad_words[1] is not valid Unicode: a lone surrogate '\\ud800' at character 0"),
    ({"stop": "ab\udfff"}, "stop[0] is not valid Unicode: a lone surrogate '\\udfff' at character 2"),
    ({"structured_outputs": {"regex": "a\ud800"}},
     "structured_outputs.regex is not valid Unicode: a lone surrogate '\\ud800' at character 1"),
    ({"allowed_token_ids": [1, 10**5000]},
     "allowed_token_ids must be an integer within 64 bits, got an integer"),
])
def test_values_that_would_break_shared_code_are_refused_naming_the_field(values: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        SamplingParams.from_dict(values)
    assert message in str(err.value)
    assert len(str(err.value)) < 300  # a 5,000-digit value is not echoed whole


@pytest.mark.parametrize("inputs, message", [
    ({"top_k": np.array([np.inf], dtype=np.float32)}, "top_k must be an integer, got inf"),
    ({"max_tokens": np.array([np.nan], dtype=np.float32)}, "max_tokens must be an integer, got nan"),
    ({"min_length": np.array([2**64 - 1], dtype=np.uint64), "max_tokens": np.array([4], dtype=np.int32)},
     "min_tokens must be in [0, max_tokens=4], got 18446744073709551615"),
    ({"temperature": np.array([np.inf], dtype=np.float32), "top_k": np.array([5], dtype=np.int32)},
     "temperature must be a finite number, got inf"),
    ({"end_id": np.array([-7], dtype=np.int64)},
     "stop_token_ids must hold token ids in [0, 2147483647], got -7"),
    ({"sampling_parameters": np.array([json.dumps({"seed": 1}).replace("1", "1" * 5000).encode()],
                                      dtype=np.object_)},
     "sampling_parameters holds a number too long to parse (over 4300 digits)"),
])
def test_trt_tensors_and_json_are_total(inputs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_generate_request({"input_ids": np.array([5], dtype=np.int32), **inputs})
    assert message in str(err.value)


def test_list_limits_name_the_field_and_the_option(engine: LLMEngine, chat_ids: ChatIds) -> None:
    limits = engine.config.request_limits
    assert limits == RequestLimits()
    cases = [(SamplingParams(logit_bias=tuple((i, 1.0) for i in range(1025))),
              "logit_bias holds 1025 entries, more than max_logit_bias=1024"),
             (SamplingParams(stop=tuple(f"s{i}" for i in range(65))),
              "stop holds 65 entries, more than max_stop=64"),
             (SamplingParams(bad_words=("x" * 1025,)),
              "bad_words holds a string of 1025 characters, more than max_word_chars=1024"),
             (SamplingParams(stop_token_ids=tuple(range(257))),
              "stop_token_ids holds 257 entries, more than max_stop_token_ids=256")]
    for params, message in cases:
        with pytest.raises(ValueError, match="^" + message.replace("(", r"\(") + "$"):
            engine.add_request("over", chat_ids("Hi"), params, lambda out: None)
    small = build_engine(EngineConfig(dtype="float32", max_model_len=256, max_bad_words=1))
    with pytest.raises(ValueError, match=r"^bad_words holds 2 entries, more than max_bad_words=1$"):
        small.add_request("over", chat_ids("Hi"), SamplingParams(bad_words=("a", "b")), lambda out: None)
    with pytest.raises(ValueError, match="max_stop must be an integer >= 1, got 0"):
        EngineConfig(max_stop=0)


def test_a_request_whose_admission_raises_ends_alone(engine: LLMEngine, chat_ids: ChatIds) -> None:
    """The reproduced engine killer: a lone surrogate in bad_words reached the tokenizer on the
    engine thread. Validation refuses it now; here it is slipped past validation to prove that
    admission itself is contained."""
    bystander = chat_ids("Name a colour.")
    alone = tokens(run(engine, {"alone": (bystander, GREEDY)})["alone"])
    hostile = SamplingParams(temperature=0, max_tokens=10, bad_words=("ok",))
    object.__setattr__(hostile, "bad_words", ("\ud800",))  # what a validation gap would let in
    outputs = run(engine, {"bystander": (bystander, GREEDY), "hostile": (chat_ids("Hi"), hostile)})
    [final] = outputs["hostile"]
    assert final.finish_reason == "error" and final.error_kind is ErrorKind.INVALID_ARGUMENT
    assert final.error is not None and final.error.startswith("the request cannot be served: ")
    assert tokens(outputs["bystander"]) == alone
    assert blocks_all_free(engine)
    assert tokens(run(engine, {"after": (bystander, GREEDY)})["after"]) == alone  # the engine goes on


def test_a_bad_word_that_tokenizes_to_nothing_is_named(engine: LLMEngine, chat_ids: ChatIds) -> None:
    """Only control characters the tokenizer drops: admission read the first of no tokens
    ('tuple index out of range', found by the fuzz profile)."""
    outputs = run(engine, {"nothing": (chat_ids("Hi"), SamplingParams(max_tokens=2, bad_words=("\u0014",)))})
    [final] = outputs["nothing"]
    assert (final.finish_reason, final.error_kind) == ("error", ErrorKind.INVALID_ARGUMENT)
    assert final.error == "the request cannot be served: bad_words[0] ('\\x14') tokenizes to no tokens"
    assert blocks_all_free(engine)


def test_a_row_whose_own_host_chain_raises_fails_alone(engine: LLMEngine, chat_ids: ChatIds) -> None:
    """A custom processor that raises on its second call: its request ends with the error; the
    other rows of the same host-path steps (one asks for logprobs) get their tokens as alone."""
    calls: list[int] = []

    def flaky(output_ids: Any, row: torch.Tensor) -> torch.Tensor:
        calls.append(len(output_ids))
        if len(output_ids) >= 2:
            raise RuntimeError("processor broke")
        return row

    register("test_flaky_after_two", flaky)
    prompt = chat_ids("Name a colour.")
    logprobs = dataclasses.replace(GREEDY, logprobs=1)
    alone = run(engine, {"alone": (prompt, logprobs)})["alone"]
    outputs = run(engine, {"bystander": (prompt, logprobs),
                           "flaky": (chat_ids("Hi"), dataclasses.replace(
                               GREEDY, logits_processors=("test_flaky_after_two",)))})
    final = outputs["flaky"][-1]
    assert (final.finish_reason, final.error_kind) == ("error", ErrorKind.INTERNAL)
    assert final.error == "sampling failed for this request: RuntimeError: processor broke"
    assert len(tokens(outputs["flaky"])) == 2  # the two tokens sampled before it broke
    assert tokens(outputs["bystander"]) == tokens(alone)
    def logprobs(outs: list[RequestOutput]) -> list[tuple[int, float]]:
        return [(t, lp.logprob) for o in outs for pos in o.logprobs or () for t, lp in pos.items()]

    got, want = logprobs(outputs["bystander"]), logprobs(alone)  # a batch's matmuls round differently
    assert [t for t, _ in got] == [t for t, _ in want]
    assert [v for _, v in got] == pytest.approx([v for _, v in want], abs=1e-4)
    assert blocks_all_free(engine)


def test_host_sample_reports_the_failing_row_only() -> None:
    register("test_always_raises", lambda ids, row: (_ for _ in ()).throw(KeyError("boom")))
    good = SamplingParams(temperature=0)
    bad = SamplingParams(temperature=0, logits_processors=("test_always_raises",))
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    sample = host_sample(logits, [HostRow(good, (), ()), HostRow(bad, (), ())],
                         sampling_tensors([good, bad], [0, 0], [0, 0]))
    assert sample.tokens.tolist()[0] == 1
    assert sample.errors == (None, "sampling failed for this request: KeyError: 'boom'")


def test_a_huge_valid_top_k_samples_as_no_top_k(engine: LLMEngine, chat_ids: ChatIds) -> None:
    """top_k above the vocabulary filters nothing (the 2**63 case overflowed the step's tensors
    and failed every request beside it)."""
    prompt = chat_ids("Tell me a story.")
    seeded = SamplingParams(temperature=0.9, seed=7, max_tokens=8, ignore_eos=True)
    plain = tokens(run(engine, {"plain": (prompt, seeded)})["plain"])
    outputs = run(engine, {"huge": (prompt, dataclasses.replace(seeded, top_k=2**31 - 1)),
                           "bystander": (chat_ids("Name a colour."), GREEDY)})
    assert tokens(outputs["huge"]) == plain
    assert outputs["bystander"][-1].finish_reason == "length"
