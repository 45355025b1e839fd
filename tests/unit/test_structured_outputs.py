"""Structured outputs through the engine on the real model: JSON schema, regex, choice and grammar
outputs match at temperature 0.8; a request whose grammar compiles waits parked while others
step; a compile error ends only its request; a request cancelled while parked frees everything;
the constraint parses with vLLM's names and errors name the field."""

from __future__ import annotations

import json
import random
import re
import string
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from tests.unit.test_engine_sampling import Served, started
from tt_backend.contract.modes import RequestStatus
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.grammar import GrammarBackend, GrammarMatcher
from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.structured import GrammarKind, StructuredOutputs

PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3},
    "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                "required": ["city"], "additionalProperties": False}},
    "required": ["name", "age", "pets", "address"], "additionalProperties": False}


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from started()


def text(outputs: list[RequestOutput]) -> str:
    return "".join(o.text for o in outputs)


def sampling(constraint: dict[str, Any], seed: int = 0, max_tokens: int = 96) -> SamplingParams:
    return SamplingParams.from_dict({"structured_outputs": constraint, "temperature": 0.8, "seed": seed,
                                     "max_tokens": max_tokens})


def test_json_regex_choice_and_grammar_outputs_match(served: Served, tokenizer: Any) -> None:
    prompt = list(tokenizer("Describe a person as JSON:").input_ids)
    grammar = 'root ::= "The answer is " ("yes" | "no") "."'
    requests = [(prompt, sampling({"json": PERSON}, seed)) for seed in range(6)]
    requests += [(prompt, sampling({"regex": r"[0-9]{3}-[a-z]{2,5}"}, 1)),
                 (prompt, sampling({"choice": ["red", "green", "blue"]}, 2)),
                 (prompt, sampling({"grammar": grammar}, 3)), (prompt, sampling({"json_object": True}, 4))]
    outputs = served.generate(requests)
    for out in outputs[:6]:
        assert out[-1].finish_reason == "stop", text(out)
        jsonschema.validate(json.loads(text(out)), PERSON)
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2,5}", text(outputs[6]))
    assert text(outputs[7]) in ("red", "green", "blue") and outputs[7][-1].finish_reason == "stop"
    assert re.fullmatch(r"The answer is (yes|no)\.", text(outputs[8]))
    assert isinstance(json.loads(text(outputs[9])), dict)
    assert served.engine.pipeline.host_sampling_steps > 0


def test_a_compiling_grammar_parks_its_request_while_others_step(served: Served, tokenizer: Any) -> None:
    """The compile is held until the other request has finished: it ran to its end while the
    constrained one waited in skipped_waiting, then the constrained one ran."""
    engine, release = served.engine, threading.Event()
    compile_fn = engine.grammars._compile

    def held(constraint: StructuredOutputs) -> Any:
        assert release.wait(60)
        return compile_fn(constraint)

    engine.grammars._compile = held
    try:
        prompt = list(tokenizer("Pick one:").input_ids)
        parked: list[RequestOutput] = []
        finished = threading.Event()

        def on_output(out: RequestOutput) -> None:
            parked.append(out)
            if out.finished:
                finished.set()

        engine.add_request("parked", prompt, sampling({"choice": ["alpha", "beta"]}), on_output)
        free = served.generate([(prompt, SamplingParams(temperature=0, max_tokens=8))])
        assert len(free[0]) > 1 and free[0][-1].finish_reason == "length" and not parked
        assert engine.scheduler.lanes[0].requests["parked"].status is RequestStatus.SKIPPED_WAITING
        release.set()
        assert finished.wait(60)
        assert text(parked) in ("alpha", "beta") and parked[-1].finish_reason == "stop"
    finally:
        engine.grammars._compile = compile_fn
        release.set()


def test_a_bad_grammar_ends_only_its_request_and_parked_cancel_frees_all(served: Served,
                                                                        tokenizer: Any) -> None:
    prompt = list(tokenizer("Hello").input_ids)
    bad = SamplingParams.from_dict({"structured_outputs": {"regex": "(("}, "max_tokens": 8})
    outputs = served.generate([(prompt, bad), (prompt, SamplingParams(temperature=0, max_tokens=4))])
    assert [o.finish_reason for o in outputs[0]] == ["error"]
    assert (outputs[0][0].error or "").startswith("structured_outputs.regex is invalid")
    assert outputs[1][-1].finish_reason == "length"
    engine, release = served.engine, threading.Event()
    compile_fn = engine.grammars._compile
    engine.grammars._compile = lambda constraint: release.wait(60) and compile_fn(constraint)
    try:
        ended: list[RequestOutput] = []
        engine.add_request("cancelled", prompt, sampling({"regex": "[a-z]+x"}), ended.append)
        engine.abort("cancelled")
        for _ in range(200):
            if ended:
                break
            threading.Event().wait(0.05)
        assert [o.finish_reason for o in ended] == ["abort"]
        lane = engine.scheduler.lanes[0]
        assert "cancelled" not in lane.requests and not lane.skipped
        assert lane.pool.num_free == lane.pool.num_blocks
    finally:
        release.set()
        engine.grammars._compile = compile_fn


def test_a_repeated_constraint_compiles_once(served: Served, tokenizer: Any) -> None:
    prompt = list(tokenizer("Digits:").input_ids)
    constraint = {"regex": "[0-9]{4}"}
    served.generate([(prompt, sampling(constraint, 1))])
    served.engine.grammars.take_stats()
    served.generate([(prompt, sampling(constraint, s)) for s in range(3)])
    compiled, hits = served.engine.grammars.take_stats()
    assert (compiled, hits) == ([], 3)


@pytest.mark.parametrize(("value", "message"), [
    ({}, "must set exactly one of json, regex, choice, grammar, json_object, structural_tag, got none"),
    ({"regex": "a", "choice": ["b"]}, "got ['regex', 'choice']"),
    ({"jsn": {}}, "unknown key(s) ['jsn']"),
    ({"json": "{not json"}, "structured_outputs.json is not valid JSON"),
    ({"json": 5}, "structured_outputs.json must be a JSON schema object"),
    ({"choice": []}, "structured_outputs.choice must be a non-empty list"),
    ({"regex": ""}, "structured_outputs.regex must be a non-empty string"),
    ({"json_object": "yes"}, "structured_outputs.json_object must be true"),
    ("[1]", "structured_outputs must be an object"),
])
def test_bad_constraints_name_the_field(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SamplingParams.from_dict({"structured_outputs": value})


def test_vllm_names_and_the_older_guided_decoding() -> None:
    params = SamplingParams.from_dict({"guided_decoding": {"json": '{"type": "object"}',
                                                           "backend": "xgrammar"}})
    assert params.structured_outputs == StructuredOutputs(GrammarKind.JSON, '{"type": "object"}')
    assert params.needs_host
    with pytest.raises(ValueError, match="not both"):
        SamplingParams.from_dict({"guided_decoding": {"regex": "a"}, "structured_outputs": {"regex": "b"}})


def test_a_grammar_that_fails_while_generating_ends_its_request_with_an_error(served: Served,
                                                                             tokenizer: Any) -> None:
    """An enum of 80,000 words compiles, then exceeds llguidance's lexer limit a few tokens in:
    the request ends with that error, not with a stop."""
    rng = random.Random(0)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(10)) for _ in range(80_000)]
    schema = {"type": "object", "properties": {"word": {"enum": words}}, "required": ["word"]}
    params = sampling({"json": schema})
    outputs = served.generate([(list(tokenizer("Pick:").input_ids), params)])
    assert outputs[0][-1].finish_reason == "error"
    assert "structured_outputs: the grammar stopped at token" in (outputs[0][-1].error or "")
    assert "too many expressions" in (outputs[0][-1].error or "")


def test_with_async_decode_the_constrained_batch_drains_and_stays_valid(tokenizer: Any) -> None:
    """Async decode runs a step ahead only on the device path; a constrained row needs its mask
    from the previous token, so its batches run in step and the outputs still validate."""
    for served in started(async_scheduling=True):
        prompt = list(tokenizer("Describe a person as JSON:").input_ids)
        outputs = served.generate([(prompt, sampling({"json": PERSON}, seed)) for seed in range(3)]
                                  + [(prompt, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))])
        for out in outputs[:3]:
            jsonschema.validate(json.loads(text(out)), PERSON)
        assert len(outputs[3]) > 1 and outputs[3][-1].finish_reason == "length"


def test_a_structural_tag_constrains_only_the_tagged_part(tokenizer: Any) -> None:
    """Free text, then a tagged call whose body must match its schema (the tool-call shape)."""
    backend = GrammarBackend(tokenizer, 49152, {tokenizer.eos_token_id})
    tag = StructuredOutputs.parse("structured_outputs", {"structural_tag": {
        "structures": [{"begin": "<call=add>", "schema": {"type": "object", "properties": {
            "a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}, "end": "</call>"}],
        "triggers": ["<call="]}})
    assert tag is not None
    start = backend.compile(tag)

    def accepts(output: str) -> bool:
        matcher = GrammarMatcher(start)
        return all(matcher.accept(t) for t in tokenizer(output, add_special_tokens=False).input_ids)

    assert accepts('Sure. <call=add>{"a": 2}</call> Done.')
    assert not accepts('Sure. <call=add>{"b": 2}</call>')
