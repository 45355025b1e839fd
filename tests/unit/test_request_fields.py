"""Request fields as vLLM's OpenAI server takes them, without a server: unknown fields logged once
per name (or refused with --strict-fields), the chat template's fields, 64-bit seeds, n choices with
derived seeds, response_format on completions, continuous usage, /openapi.json; and n choices
through the app, streamed with their indices, usage summed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.test_openai_front import MODEL, decode, encode, front_config
from tt_backend.openai_front import app as app_module
from tt_backend.openai_front.app import create_app
from tt_backend.openai_front.chat_template import TemplateArgs, load_chat_template
from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.requests import GenerateCall, RequestPolicy, chat_call, completion_call
from tt_backend.openai_front.triton_stream import Delta
from tt_backend.openai_front.unknown_fields import UnknownFields

MESSAGES = [{"role": "user", "content": "hi"}]
rendered: list[TemplateArgs] = []


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template: TemplateArgs
           ) -> list[int]:
    rendered.append(template)
    return [len(messages)]


def test_unknown_fields_are_logged_once_per_name_and_ignored() -> None:
    logged: list[str] = []
    policy = RequestPolicy(UnknownFields(log=logged.append))
    for _ in range(3):
        call = chat_call({"messages": MESSAGES, "temprature": 0.5, "x_trace": {"a": 1}}, render, policy)
        assert "temprature" not in call.sampling
    completion_call({"prompt": "hi", "temprature": 1}, policy)
    assert logged == ["ignored the unknown request field 'temprature' (on /v1/chat/completions; logged once "
                      "per name)", "ignored the unknown request field 'x_trace' (on /v1/chat/completions; "
                      "logged once per name)"]


def test_nested_unknown_fields_are_logged_once_per_path_and_ignored() -> None:
    logged: list[str] = []
    policy = RequestPolicy(UnknownFields(log=logged.append))
    turns = [{"role": "user", "content": "a", "x_meta": 1},
             {"role": "assistant", "content": "b", "refusal": None},
             {"role": "user", "content": [{"type": "text", "text": "c", "cache_control": {}}], "x_meta": 2}]
    for _ in range(2):
        chat_call({"messages": turns, "stream": True, "stream_options": {"include_usage": True, "x_o": 1},
                   "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "x_s": 1}},
                   "tools": [{"type": "function", "function": {"name": "f", "x_f": 1}}]}, render, policy)
    completion_call({"prompt": "hi", "stream": True, "stream_options": {"x_o": 2}}, policy)
    assert [line.split("'")[1] for line in logged] == [  # in the models' field order, each once
        "messages[*].x_meta", "messages[*].refusal", "messages[*].content[*].cache_control",
        "tools[*].function.x_f", "stream_options.x_o", "response_format.json_schema.x_s"]
    assert logged[4] == ("ignored the unknown request field 'stream_options.x_o' (on /v1/chat/completions; "
                         "logged once per name)")
    strict = RequestPolicy(UnknownFields(strict=True))
    with pytest.raises(BadRequest) as info:
        chat_call({"messages": turns[1:]}, render, strict)
    assert info.value.param == "messages[0].refusal"
    assert str(info.value) == (
        "unknown field 'messages[0].refusal' (and ['messages[1].x_meta', "
        "'messages[1].content[0].cache_control']); messages[0] takes content, name, role, tool_call_id, "
        "tool_calls (the front runs with --strict-fields)")


def test_strict_fields_refuse_an_unknown_field_naming_it() -> None:
    with pytest.raises(BadRequest, match="unknown field 'temprature'; /v1/completions takes .*--strict-fields"
                       ) as info:
        completion_call({"prompt": "hi", "temprature": 1}, RequestPolicy(UnknownFields(strict=True)))
    assert info.value.param == "temprature"


def test_the_chat_template_fields_reach_the_template() -> None:
    rendered.clear()
    chat_call({"messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": False},
               "documents": [{"title": "a", "text": "b"}]}, render)
    chat_call({"messages": MESSAGES, "add_generation_prompt": False, "continue_final_message": True}, render)
    trusted = RequestPolicy(trust_request_chat_template=True)
    chat_call({"messages": MESSAGES, "chat_template": "{{ messages[0].content }}"}, render, trusted)
    assert rendered == [
        TemplateArgs(True, False, [{"title": "a", "text": "b"}], None, {"enable_thinking": False}),
        TemplateArgs(False, True), TemplateArgs(chat_template="{{ messages[0].content }}")]


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"continue_final_message": True, "add_generation_prompt": True}, "continue_final_message",
     "continue_final_message=true needs add_generation_prompt=false"),
    ({"chat_template": "x"}, "chat_template", "needs the front's --trust-request-chat-template"),
    ({"chat_template_kwargs": {"chat_template": "x"}}, "chat_template", "--trust-request-chat-template"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs.add_generation_prompt",
     "may not be set"),
    ({"chat_template_kwargs": []}, "chat_template_kwargs", "chat_template_kwargs: Input should be a valid "
     "dictionary, got []"),
    ({"add_generation_prompt": "no"}, "add_generation_prompt", "Input should be a valid boolean, got 'no'"),
    ({"documents": [{"title": 1}]}, "documents[0].title", "Input should be a valid string, got 1"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content",
     'messages[0].content: must be a string or a list of content parts ({"type": "text", "text": ...} or '
     '{"type": "image_url", "image_url": {"url": ...}})'),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role",
     "messages[0].role: Input should be 'system', 'user', 'assistant', 'tool' or 'developer', got 'robot'"),
    ({"seed": -(2**63) - 1}, "seed", "seed: Input should be greater than or equal to -9223372036854775808"),
    ({"n": 129}, "n", "n must be at most 128 (the front's --max-n), got 129"),
    ({"n": 2, "best_of": 1}, "best_of", "best_of must equal n (2), got 1"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "stream_options needs stream=true"),
    ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex",
     "give response_format (or a forced tool call) or guided_regex, not both"),
])
def test_a_bad_vllm_field_is_a_400_naming_it(body: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        chat_call({"messages": MESSAGES, **body}, render)
    assert info.value.param == param and message in str(info.value), str(info.value)


def test_any_64_bit_seed_maps_onto_the_engines_seeds_and_each_choice_gets_its_own() -> None:
    assert chat_call({"messages": MESSAGES, "seed": -1}, render).sampling["seed"] == 2**64 - 1
    assert chat_call({"messages": MESSAGES, "seed": -(2**63)}, render).sampling["seed"] == 2**63
    call = chat_call({"messages": MESSAGES, "seed": -2, "n": 3, "best_of": 3}, render)
    assert [call.sampling_for(i)["seed"] for i in range(3)] == [2**64 - 2, 2**64 - 1, 0]
    unseeded = chat_call({"messages": MESSAGES, "n": 2}, render)
    assert unseeded.n == 2 and "seed" not in unseeded.sampling_for(1)


def test_completions_take_response_format_and_guided_fields() -> None:
    call = completion_call({"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object"}}}})
    assert call.sampling["structured_outputs"] == {"json": {"type": "object"}}
    assert completion_call({"prompt": "hi", "guided_choice": ["a", "b"]}).sampling["structured_outputs"] == {
        "choice": ["a", "b"]}


def test_stream_options_usage_as_vllm_has_it() -> None:
    def options(value: dict[str, Any]) -> GenerateCall:
        return completion_call({"prompt": "hi", "stream": True, "stream_options": value})

    assert (options({}).include_usage, options({}).continuous_usage) == (True, False)  # vLLM's default
    assert options({"continuous_usage_stats": True}).continuous_usage
    assert not options({"include_usage": False, "continuous_usage_stats": True}).continuous_usage


def test_load_chat_template_takes_a_file_or_the_template(tmp_path: Path) -> None:
    (tmp_path / "t.jinja").write_text("{{ x }}")
    assert load_chat_template(str(tmp_path / "t.jinja")) == "{{ x }}"
    assert load_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}").startswith("{%")
    with pytest.raises(ValueError, match="neither a readable file nor a Jinja template"):
        load_chat_template(str(tmp_path / "missing.jinja"))


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, list[GenerateCall]]]:
    """Triton replaced by streams of two deltas per choice: "a<seed>", "b" (then stop)."""
    calls: list[GenerateCall] = []

    async def fake(client: Any, model: str, call: GenerateCall) -> AsyncIterator[Delta]:
        calls.append(call)
        yield Delta(f"a{call.sampling.get('seed')}", 1, num_prompt_tokens=len(call.prompt))
        yield Delta("b", 1, finish_reason="stop")

    monkeypatch.setattr(app_module, "stream", fake)
    with TestClient(create_app(front_config(), render, decode, encode)) as client:
        yield client, calls


def test_n_choices_are_n_streams_with_derived_seeds_and_one_usage(front: tuple[TestClient, Any]) -> None:
    client, calls = front
    body = {"model": MODEL, "messages": MESSAGES, "n": 3, "seed": 7}
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200
    answer = reply.json()
    assert [(c["index"], c["message"]["content"]) for c in answer["choices"]] == [
        (0, "a7b"), (1, "a8b"), (2, "a9b")]
    assert answer["usage"] == {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7}
    assert [c.sampling["seed"] for c in calls] == [7, 8, 9]


def test_n_streamed_choices_carry_their_index_and_continuous_usage(front: tuple[TestClient, Any]) -> None:
    client, _ = front
    body = {"model": MODEL, "prompt": "hi", "n": 2, "seed": 1, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with client.stream("POST", "/v1/completions", json=body) as reply:
        chunks = [json.loads(line[6:]) for line in reply.iter_lines() if line and line != "data: [DONE]"]
    texts: dict[int, str] = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + choice["text"]
        assert chunk["usage"]["prompt_tokens"] == 2 and chunk["usage"]["completion_tokens"] in (1, 2)
    assert texts == {0: "a1b", 1: "a2b"} and len(chunks) == 5
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 4,
                                                                   "total_tokens": 6}


def test_openapi_describes_the_request_bodies(front: tuple[TestClient, Any]) -> None:
    client, _ = front
    schema = client.get("/openapi.json").json()
    chat = schema["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
    assert chat["schema"] == {"$ref": "#/components/schemas/ChatCompletionRequest"}
    fields = schema["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert {"messages", "n", "seed", "chat_template_kwargs", "continue_final_message"} <= set(fields)
    assert fields["messages"]["items"] == {"$ref": "#/components/schemas/Message"}
    assert "prompt" in schema["components"]["schemas"]["CompletionRequest"]["properties"]


def test_sampling_parameters_take_the_engines_forms_and_the_fronts_own_fields_stay_strict() -> None:
    # SamplingParams.from_dict's forms (a number or a boolean as a string, an integer as 2.0), as
    # the front took them before its models; the front's own fields (stream, echo, n) are strict JSON
    call = chat_call({"messages": MESSAGES, "temperature": "0.5", "top_k": 2.0, "top_p": " 0.9",
                      "ignore_eos": " TRUE ", "skip_special_tokens": "False", "min_tokens": "1",
                      "stop_token_ids": ["7", 8.0], "max_completion_tokens": "3"}, render)
    expected = {"temperature": 0.5, "top_k": 2, "top_p": 0.9, "ignore_eos": True,
                "skip_special_tokens": False, "min_tokens": 1, "stop_token_ids": [7, 8], "max_tokens": 3}
    assert {k: call.sampling[k] for k in expected} == expected
    for field, value, message in (
            ("stream", "yes", "stream: Input should be a valid boolean, got 'yes'"),
            ("top_k", 2.5, "top_k: Input should be a valid integer, got 2.5"),
            ("ignore_eos", "no", "ignore_eos: Input should be a valid boolean, got 'no'")):
        with pytest.raises(BadRequest) as refused:
            chat_call({"messages": MESSAGES, field: value}, render)
        assert (str(refused.value), refused.value.param) == (message, field)
