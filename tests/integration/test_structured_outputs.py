"""Structured outputs through a real tritonserver: 50 JSON-schema requests at temperature 0.8 all
validate; regex, choice and EBNF outputs match; the ensemble's TRT-LLM guided decoding inputs;
the OpenAI front's response_format and forced tool calls; a slow grammar parks its request while
other streams keep producing tokens; an invalid schema is an error naming it."""

from __future__ import annotations

import json
import random
import re
import string
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import numpy as np
import pytest
from openai import BadRequestError, OpenAI

from tests.integration.clients import grpc_stream, http_generate, s, scrape, series
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration
MODEL = "SmolLM2-135M-Instruct"

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                                     "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": False}},
     "required": ["name", "age", "address"], "additionalProperties": False},
    {"type": "object", "properties": {
        "status": {"enum": ["new", "paid", "shipped"]},
        "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object", "properties": {"sku": {"type": "string", "maxLength": 8},
                                             "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["sku", "qty"], "additionalProperties": False}}},
     "required": ["status", "items"], "additionalProperties": False},
    {"type": "object", "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "ok": {"type": "boolean"}},
     "required": ["score", "tags", "ok"], "additionalProperties": False},
    {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 30},
        "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
        "genre": {"enum": ["drama", "comedy", "horror"]}},
     "required": ["title", "year", "genre"], "additionalProperties": False},
    {"type": "object", "properties": {
        "point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -50, "maximum": 50},
                                                   "y": {"type": "integer", "minimum": -50, "maximum": 50}},
                  "required": ["x", "y"], "additionalProperties": False},
        "label": {"type": ["string", "null"], "maxLength": 12}},
     "required": ["point", "label"], "additionalProperties": False},
]


def generate(server: Server, prompt: str, params: dict[str, Any]) -> dict[str, Any]:
    return http_generate(server.http, "tt_llm", {
        "text_input": prompt, "sampling_parameters": json.dumps(params), "exclude_input_in_output": True,
        "return_finish_reason": True}, timeout=300)


def test_fifty_json_schema_requests_at_temperature_08_all_validate(server: Server, chat_text: Any) -> None:
    prompt = chat_text("Reply with a JSON object.")
    jobs = [(schema, seed) for seed in range(10) for schema in SCHEMAS]
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda job: generate(server, prompt, {
            "temperature": 0.8, "seed": job[1], "max_tokens": 160,
            "structured_outputs": {"json": job[0]}}), jobs))
    assert len(replies) == 50
    for (schema, seed), reply in zip(jobs, replies, strict=True):
        assert reply["status"] == 200 and reply["finish_reason"] == "stop", (seed, reply)
        jsonschema.validate(json.loads(reply["text_output"]), schema)


def test_regex_choice_and_ebnf_outputs_match(server: Server, chat_text: Any) -> None:
    prompt = chat_text("Answer briefly.")
    grammar = 'root ::= "Dear " name ", " ("yes" | "no") "."\nname ::= [A-Z] [a-z]{2,8}'
    for seed in range(3):
        common = {"temperature": 0.8, "seed": seed, "max_tokens": 40}
        day = r"20[0-9]{2}-[01][0-9]-[0-3][0-9]"
        date = generate(server, prompt, {**common, "structured_outputs": {"regex": day}})
        assert re.fullmatch(day, date["text_output"]), date
        picked = generate(server, prompt, {**common, "structured_outputs": {
            "choice": ["north", "south", "east"]}})
        assert picked["text_output"] in ("north", "south", "east") and picked["finish_reason"] == "stop"
        letter = generate(server, prompt, {**common, "structured_outputs": {"grammar": grammar}})
        assert re.fullmatch(r"Dear [A-Z][a-z]{2,8}, (yes|no)\.", letter["text_output"]), letter


def test_the_ensemble_takes_trt_llm_guided_decoding_inputs(server: Server, chat_text: Any) -> None:
    def ensemble(kind: str, guide: str) -> str:
        result = grpc_stream(server.grpc, "ensemble", {
            "text_input": s(chat_text("Give a film as JSON.")), "max_tokens": np.array([120], dtype=np.int32),
            "top_k": np.array([40], dtype=np.int32), "temperature": np.array([0.8], dtype=np.float32),
            "seed": np.array([5], dtype=np.uint64), "stream": np.array([True]),
            "guided_decoding_guide_type": s(kind), "guided_decoding_guide": s(guide)}, batched=True)
        assert result.error is None, result.error
        return result.text()

    jsonschema.validate(json.loads(ensemble("json_schema", json.dumps(SCHEMAS[3]))), SCHEMAS[3])
    assert re.fullmatch("[A-Z]{3}-[0-9]{4}", ensemble("regex", "[A-Z]{3}-[0-9]{4}"))
    assert isinstance(json.loads(ensemble("json", "")), dict)


def test_openai_response_format_and_forced_tool_calls(server: Server) -> None:
    assert server.openai is not None
    client = OpenAI(base_url=server.openai, api_key="unused", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    film = {"type": "json_schema", "json_schema": {"name": "film", "schema": SCHEMAS[3], "strict": True}}
    reply = client.chat.completions.create(model=MODEL, messages=messages, temperature=0.8, seed=3,  # type: ignore
                                           max_tokens=120, response_format=film)
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), SCHEMAS[3])
    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather}},
             {"type": "function", "function": {"name": "get_time", "parameters": {
                 "type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}},
                 "required": ["zone"], "additionalProperties": False}}}]
    for seed in range(3):
        forced = client.chat.completions.create(model=MODEL, messages=messages, tools=tools,  # type: ignore
                                                tool_choice="required", temperature=0.8, seed=seed,
                                                max_tokens=120)
        choice = forced.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
        for tool_call in choice.message.tool_calls:
            schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}  # type: ignore[index]
            jsonschema.validate(json.loads(tool_call.function.arguments), schemas[tool_call.function.name])
    named = {"type": "function", "function": {"name": "get_weather"}}
    parts = list(client.chat.completions.create(model=MODEL, messages=messages, tools=tools,  # type: ignore
                                                tool_choice=named, temperature=0.8, seed=1, max_tokens=80,
                                                stream=True))
    deltas = [d for p in parts if p.choices for d in (p.choices[0].delta.tool_calls or [])]
    assert deltas[0].function is not None and deltas[0].function.name == "get_weather"
    assert len(deltas) > 1 and {d.index for d in deltas} == {0}  # the arguments streamed in pieces
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function is not None)
    jsonschema.validate(json.loads(arguments), weather)
    assert parts[-1].choices[0].finish_reason == "stop" and deltas[0].id


def test_an_invalid_schema_is_an_error_naming_it(server: Server, chat_text: Any) -> None:
    reply = generate(server, chat_text("hi"), {"max_tokens": 8,
                                               "structured_outputs": {"json": {"type": "potato"}}})
    assert reply["status"] == 400 and "structured_outputs.json is invalid" in reply["error"], reply
    assert server.openai is not None
    client = OpenAI(base_url=server.openai, api_key="unused", max_retries=0, timeout=300)
    with pytest.raises(BadRequestError, match="structured_outputs.regex is invalid"):
        client.completions.create(model=MODEL, prompt="hi", max_tokens=4,
                                  extra_body={"structured_outputs": {"regex": "(("}})


def test_a_slow_grammar_parks_its_request_while_four_streams_keep_going(server: Server,
                                                                        chat_text: Any) -> None:
    """A regex of 90,000 words (a 1 MB alternation) compiles for a visible time (0.45 s here):
    while it does, the four running streams keep producing tokens, and the parked request then
    completes with one of the words."""
    before = scrape(server.metrics)
    rng = random.Random(time.time_ns())  # a schema no earlier request compiled
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(10)) for _ in range(90_000)]
    streams: list[list[float]] = [[] for _ in range(4)]

    def stream(i: int) -> None:
        result = grpc_stream(server.grpc, "tt_llm", {
            "text_input": s(chat_text("Tell a long story.")), "stream": np.array([True]),
            "sampling_parameters": s(json.dumps({"temperature": 0, "max_tokens": 160, "ignore_eos": True}))})
        streams[i][:] = result.times

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # the four are decoding
    sent = time.monotonic()
    result = grpc_stream(server.grpc, "tt_llm", {
        "text_input": s(chat_text("Fill in the form as JSON.")), "stream": np.array([True]),
        "sampling_parameters": s(json.dumps({"temperature": 0, "max_tokens": 32,
                                             "structured_outputs": {"regex": "(" + "|".join(words) + ")"}}))},
        timeout=300)
    for t in threads:
        t.join()
    assert result.error is None and result.responses, result.error
    reply = "".join(r["text_output"][0].decode() for r in result.responses)
    assert reply in words, reply
    first = result.times[0]
    during = [sum(1 for at in times if sent < at < first) for times in streams]
    assert all(n >= 3 for n in during), (during, first - sent)
    after = scrape(server.metrics)
    compiles = series("tt:grammar_compile_seconds_count")
    assert after[compiles] > before[compiles]
    assert after[series("tt:num_requests_parked")] == 0


def test_past_max_parked_requests_constrained_requests_are_refused_and_the_rest_complete(
        server: Server, chat_text: Any) -> None:
    """A choice of 40,000 words keeps the compile worker busy for seconds (2-13 s here; then the
    request fails at its first token on llguidance's 2,000 items per row); meanwhile 70 requests
    share one queued choice constraint. With the slow one that is 71 waiting for a grammar: 64
    park (max_parked_requests, default 64), the 7 past it are refused with "retry later", and the
    parked ones each sample their first token (a choice's start) once the worker reaches their
    constraint."""
    rng = random.Random(time.time_ns())  # constraints no earlier request compiled
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(10)) for _ in range(40_000)]
    choices = ["".join(rng.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(2)]
    prompt = s(chat_text("Pick a word."))

    def send(constraint: dict[str, Any]) -> tuple[Any, float]:
        result = grpc_stream(server.grpc, "tt_llm", {
            "text_input": prompt, "stream": np.array([True]),
            "sampling_parameters": s(json.dumps({"temperature": 0, "max_tokens": 1,
                                                 "structured_outputs": constraint}))}, timeout=300)
        return result, time.monotonic()

    with ThreadPoolExecutor(71) as pool:
        slow = pool.submit(send, {"choice": words})
        time.sleep(0.5)  # the slow one is compiling
        sent = [pool.submit(send, {"choice": choices}) for _ in range(70)]
        last_sent = time.monotonic()
        results = [f.result()[0] for f in sent]
        slow_result, slow_ended = slow.result()
    assert "Current row has 40001 items; max is 2000" in (slow_result.error or ""), slow_result.error
    assert slow_ended - last_sent > 1.0  # every request arrived while the slow one compiled
    refused = [r.error for r in results if r.error is not None]
    assert len(refused) == 7, refused
    assert all("the server is at capacity for structured outputs (64 requests wait for a grammar compile, "
               "max_parked_requests=64); retry later" in e for e in refused), refused
    served = [r.text() for r in results if r.error is None]
    assert len(served) == 63 and all(text and any(c.startswith(text) for c in choices) for text in served)
    assert scrape(server.metrics)[series("tt:num_requests_parked")] == 0
