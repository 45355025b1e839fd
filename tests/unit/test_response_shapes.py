"""The front's responses against their pydantic models (response_schemas.py), without Triton: every
object it sends, streamed or not, chat or completion, with tool calls, reasoning and logprobs, is
its model exactly (no key the model lacks, no type it does not say); /openapi.json names the
models of each route's answers; and the request fields this round added: vLLM's fields taken only
at their defaults, the chat's echo, reasoning_effort and request_id."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from tests.unit.test_openai_front import MODEL, decode, encode, front_config
from tt_backend.openai_front import app as app_module
from tt_backend.openai_front import response_schemas as out
from tt_backend.openai_front.app import create_app
from tt_backend.openai_front.chat_template import TemplateArgs
from tt_backend.openai_front.output import OutputParsing
from tt_backend.openai_front.reasoning import ReasoningParser
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.tool_parsers import FORMATS
from tt_backend.openai_front.triton_stream import Delta

MESSAGES = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL_TEXT = '<think>Needs weather.</think><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
TEXT = "<think>Hm.</think>Hello world"
templates: list[TemplateArgs] = []


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, template: TemplateArgs
           ) -> list[int]:
    templates.append(template)
    return [len(messages)]


def logprob(token: str) -> dict[str, Any]:
    return {"7": {"logprob": -0.5, "rank": 1, "decoded_token": token},
            "8": {"logprob": -1.5, "rank": 2, "decoded_token": token + "!"}}


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """Triton replaced by an output in 4-character deltas: a <think> block, then a Hermes call when
    the request has tools, else "Hello world"; each delta with logprobs when asked."""
    async def fake(client: Any, model: str, call: GenerateCall) -> AsyncIterator[Delta]:
        text = CALL_TEXT if call.tools is not None else TEXT
        parts = [text[i:i + 4] for i in range(0, len(text), 4)]
        for i, part in enumerate(parts):
            logprobs = (logprob(part),) if call.logprobs is not None else ()
            yield Delta(part, 1, 3 if i == 0 else None, "stop" if i == len(parts) - 1 else None, logprobs)

    monkeypatch.setattr(app_module, "stream", fake)
    output = OutputParsing(FORMATS["hermes"](), ReasoningParser("deepseek_r1"))
    with TestClient(create_app(front_config(output=output), render, decode, encode)) as client:
        yield client


def exactly(model: type[BaseModel], value: dict[str, Any]) -> dict[str, Any]:
    """`value` is `model`: it validates (no key the model lacks) and dumps back to itself."""
    assert model.model_validate(value).model_dump(exclude_unset=True) == value
    return value


def events(reply: Any) -> list[dict[str, Any]]:
    lines = [line for line in reply.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]


CHAT = [{"messages": MESSAGES}, {"messages": MESSAGES, "logprobs": True, "top_logprobs": 1},
        {"messages": MESSAGES, "tools": [TOOL], "chat_template_kwargs": {"thinking": True}},
        {"messages": MESSAGES, "n": 2, "stream_options": {"continuous_usage_stats": True}}]


@pytest.mark.parametrize("body", CHAT)
def test_every_chat_answer_and_chunk_is_its_model(front: TestClient, body: dict[str, Any]) -> None:
    body = {"model": MODEL, **body}
    whole = exactly(out.ChatCompletionResponse, front.post("/v1/chat/completions", json={
        **{k: v for k, v in body.items() if k != "stream_options"}}).json())
    options = {"include_usage": True, **body.get("stream_options", {})}
    streamed = {**body, "stream": True, "stream_options": options}
    with front.stream("POST", "/v1/chat/completions", json=streamed) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        chunks = [exactly(out.ChatCompletionStreamResponse, chunk) for chunk in events(reply)]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    if "tools" in body:
        message = whole["choices"][0]["message"]
        assert message["reasoning_content"] == "Needs weather."
        assert message["tool_calls"][0]["type"] == "function"
        assert any("tool_calls" in c["choices"][0]["delta"] for c in chunks[:-1])
    else:
        assert whole["choices"][0]["message"] == {"role": "assistant", "content": "Hello world",
                                                  "reasoning_content": "Hm."}
    if "logprobs" in body:
        assert whole["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == [
            {"token": "<thi", "logprob": -0.5, "bytes": list(b"<thi")}]


@pytest.mark.parametrize("body", [{"prompt": "hi"}, {"prompt": [5, 6], "echo": True, "logprobs": 1},
                                  {"prompt": "hi", "n": 2}])
def test_every_completion_answer_and_chunk_is_its_model(front: TestClient, body: dict[str, Any]) -> None:
    body = {"model": MODEL, "max_tokens": 8, **body}
    whole = exactly(out.CompletionResponse, front.post("/v1/completions", json=body).json())
    with front.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                       "stream_options": {"include_usage": True}}) as reply:
        chunks = [exactly(out.CompletionStreamResponse, chunk) for chunk in events(reply)]
    assert chunks[-1]["usage"] == whole["usage"]
    if body.get("echo"):
        assert whole["choices"][0]["text"] == "\x05\x06" + TEXT  # completions are not read for reasoning
        # Each token's offset in the text: after the echoed prompt, then after the tokens before it.
        offsets = list(range(2, 2 + len(TEXT), 4))
        assert whole["choices"][0]["logprobs"]["text_offset"] == offsets
        assert [o for c in chunks[:-1] for o in c["choices"][0]["logprobs"]["text_offset"]] == offsets


def test_models_tokenize_and_errors_are_their_models(front: TestClient) -> None:
    exactly(out.ModelList, front.get("/v1/models").json())
    exactly(out.ModelCard, front.get(f"/v1/models/{MODEL}").json())
    exactly(out.ErrorResponse, front.get("/v1/models/other").json())
    exactly(out.TokenizeResponse, front.post("/tokenize", json={"model": MODEL, "prompt": "ab"}).json())
    exactly(out.ErrorResponse, front.post("/v1/chat/completions", json={"model": MODEL}).json())


def test_openapi_names_each_routes_answers(front: TestClient) -> None:
    schema = front.get("/openapi.json").json()
    paths, components = schema["paths"], schema["components"]["schemas"]

    def ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{name}"}

    for route, whole, chunk in (
            ("/v1/chat/completions", "ChatCompletionResponse", "ChatCompletionStreamResponse"),
            ("/v1/completions", "CompletionResponse", "CompletionStreamResponse")):
        answers = paths[route]["post"]["responses"]
        assert answers["200"]["content"] == {"application/json": {"schema": ref(whole)},
                                             "text/event-stream": {"schema": ref(chunk)}}
        assert {"400", "401", "404", "413", "415", "500", "503"} <= set(answers)
        assert answers["400"]["content"]["application/json"]["schema"] == ref("ErrorResponse")
    for route, name in (("/v1/models", "ModelList"), ("/v1/models/{model_id}", "ModelCard")):
        assert paths[route]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == ref(name)
    tokenize = paths["/tokenize"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert tokenize == ref("TokenizeResponse")
    assert {"ChatCompletionResponse", "ChatCompletionStreamResponse", "CompletionResponse",
            "CompletionStreamResponse", "UsageInfo", "ModelCard", "ModelList", "ErrorResponse",
            "DeltaMessage", "ToolCall", "ToolParam", "NamedToolChoice"} <= set(components)
    assert components["ChatCompletionStreamResponse"]["properties"]["choices"]["items"] == ref(
        "ChatCompletionResponseStreamChoice")
    tools = components["ChatCompletionRequest"]["properties"]["tools"]["anyOf"][0]
    assert tools["items"] == ref("ToolParam")
    beam = components["ChatCompletionRequest"]["properties"]["use_beam_search"]
    assert (beam["default"], beam["x-only-values"]) == (False, [False])
    assert all("$ref" not in str(s) or "#/components/schemas/" in str(s) for s in components.values())
    refs = {part.split('"')[0] for part in json.dumps(schema).split("#/components/schemas/")[1:]}
    assert refs <= set(components)  # every schema referred to is there


@pytest.mark.parametrize(("route", "field", "value", "message"), [
    ("chat/completions", "use_beam_search", True,
     "use_beam_search=true is not supported (only its default, false): no beam search"),
    ("completions", "prompt_logprobs", 1,
     "prompt_logprobs=1 is not supported (only its default, null): logprobs are the generated tokens' only"),
    ("chat/completions", "truncate_prompt_tokens", 8, "truncate_prompt_tokens=8 is not supported"),
    ("chat/completions", "add_special_tokens", True,
     "add_special_tokens=true is not supported (only its default, false): the chat template holds"),
    ("completions", "add_special_tokens", False,
     "add_special_tokens=false is not supported (only its default, true)"),
    ("chat/completions", "priority", 1, "priority=1 is not supported (only its default, 0): no priority"),
    ("chat/completions", "modalities", ["text", "audio"], 'modalities=["text", "audio"] is not supported'),
    ("completions", "length_penalty", "x", 'length_penalty="x" is not supported (only its default, 1.0)'),
    ("chat/completions", "cache_salt", "s", 'cache_salt="s" is not supported'),
])
def test_a_vllm_field_not_implemented_is_refused_away_from_its_default(
        front: TestClient, route: str, field: str, value: Any, message: str) -> None:
    body: dict[str, Any] = {"model": MODEL, "messages": MESSAGES} if route.startswith("chat") else {
        "model": MODEL, "prompt": "hi"}
    reply = front.post(f"/v1/{route}", json={**body, field: value})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == field and error["message"].startswith(message), error["message"]


def test_vllms_fields_at_their_defaults_are_accepted(front: TestClient) -> None:
    defaults = {"use_beam_search": False, "length_penalty": 1, "prompt_logprobs": None,
                "truncate_prompt_tokens": None, "spaces_between_special_tokens": True, "priority": 0,
                "return_tokens_as_token_ids": False, "cache_salt": None, "vllm_xargs": None}
    chat = front.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, **defaults,
                                                    "add_special_tokens": False, "modalities": ["text"]})
    completion = front.post("/v1/completions", json={"model": MODEL, "prompt": "hi", **defaults,
                                                     "add_special_tokens": True})
    assert (chat.status_code, completion.status_code) == (200, 200)


def test_chat_echo_reasoning_effort_and_request_id(front: TestClient) -> None:
    prefill = [*MESSAGES, {"role": "assistant", "content": "Sure: "}]
    body = {"model": MODEL, "messages": prefill, "echo": True, "add_generation_prompt": False,
            "continue_final_message": True, "request_id": "abc-1", "reasoning_effort": "low"}
    templates.clear()
    whole = front.post("/v1/chat/completions", json=body).json()
    assert whole["id"] == "chatcmpl-abc-1"
    assert whole["choices"][0]["message"]["content"] == "Sure: Hello world"
    assert templates[0].kwargs == {"reasoning_effort": "low"}
    with front.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as reply:
        chunks = events(reply)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Sure: "}
    assert {c["id"] for c in chunks} == {"chatcmpl-abc-1"}
    chat = {"model": MODEL, "messages": MESSAGES}
    plain = front.post("/v1/chat/completions", json={**chat, "echo": True}).json()
    assert plain["choices"][0]["message"]["content"] == "Hello world"  # a user's turn is not the answer's
    bad = front.post("/v1/chat/completions", json={**chat, "reasoning_effort": 3})
    assert bad.json()["error"]["param"] == "reasoning_effort"
