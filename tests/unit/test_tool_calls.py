"""Tool calls and response_format in the OpenAI front without a server: the constraint each mode
sends, and the tools in the system message (the output read back: test_tool_parsers.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.requests import chat_call
from tt_backend.openai_front.schemas import ChatCompletionRequest, validated
from tt_backend.openai_front.tool_calls import Tools, tool_dicts, with_tools_in_system

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
MESSAGES = [{"role": "user", "content": "hi"}]


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
           template: Any = None) -> list[int]:
    return [len(messages), len(tools or [])]


def test_each_tool_choice_sends_its_constraint() -> None:
    named = chat_call({"messages": MESSAGES, "tools": [WEATHER, TIME],
                       "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, render)
    assert named.sampling["structured_outputs"] == {"json": WEATHER["function"]["parameters"]}
    assert named.prompt == (1, 2) and named.tools == Tools("named", (WEATHER["function"], TIME["function"]),
                                                           "get_weather")
    required = chat_call({"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required"}, render)
    schema = required.sampling["structured_outputs"]["json"]
    assert schema["type"] == "array" and schema["minItems"] == 1
    assert schema["items"]["anyOf"][0]["properties"]["name"] == {"enum": ["get_weather"]}
    auto = chat_call({"messages": MESSAGES, "tools": [WEATHER]}, render)
    assert "structured_outputs" not in auto.sampling and auto.tools is not None and auto.tools.mode == "auto"
    none = chat_call({"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "none"}, render)
    assert none.tools is None and none.prompt == (1, 0)  # tools not rendered when none may be called


def test_response_format_becomes_structured_outputs() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    as_schema = chat_call({"messages": MESSAGES, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}}, render)
    assert as_schema.sampling["structured_outputs"] == {"json": schema}
    as_object = chat_call({"messages": MESSAGES, "response_format": {"type": "json_object"}}, render)
    assert as_object.sampling["structured_outputs"] == {"json_object": True}
    text = chat_call({"messages": MESSAGES, "response_format": {"type": "text"}}, render)
    assert "structured_outputs" not in text.sampling
    with pytest.raises(BadRequest, match="not both"):
        chat_call({"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required",
                   "response_format": {"type": "json_object"}}, render)


@pytest.mark.parametrize(("body", "param", "message"), [
    ({"tools": []}, "tools", "tools: List should have at least 1 item"),
    ({"tools": [WEATHER, WEATHER]}, "tools",
     "tools: tools name a function twice: ['get_weather', 'get_weather']"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "tools[0].function.parameters",
     "tools[0].function.parameters: Input should be a valid dictionary, got 'x'"),
    ({"tools": [WEATHER, {"type": "function", "function": {"name": "a b"}}]}, "tools[1].function.name",
     "tools[1].function.name: String should match pattern '^[A-Za-z0-9_-]{1,64}$', got 'a b'"),
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type",
     "tools[0].type: Input should be 'function', got 'retrieval'"),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "tools[0].function: Field required"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice",
     'tool_choice: must be none, auto, required or {"type": "function", "function": {"name": ...}}'),
    ({"tools": [WEATHER], "tool_choice": 3}, "tool_choice", "tool_choice: must be none, auto, required"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name",
     "tool_choice.function.name: Field required"),
    ({"tools": [WEATHER], "tool_choice": {"type": "fn", "function": {"name": "get_weather"}}},
     "tool_choice.type", "tool_choice.type: Input should be 'function', got 'fn'"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
     "tool_choice.function.name", "tool_choice.function.name: 'get_time' is not in tools (['get_weather'])"),
    ({"tool_choice": "required"}, "tool_choice", "tool_choice 'required' needs tools"),
    ({"tools": [WEATHER], "parallel_tool_calls": False}, "parallel_tool_calls",
     "parallel_tool_calls=false is not supported (only its default, true)"),
])
def test_bad_tools_name_the_field_path(body: dict[str, Any], param: str, message: str) -> None:
    with pytest.raises(BadRequest) as error:
        chat_call({"messages": MESSAGES, **body}, render)
    assert error.value.param == param and str(error.value).startswith(message), str(error.value)


def test_tools_take_vllms_defaults_and_reach_the_template_as_sent() -> None:
    bare = {"function": {"name": "f", "description": "d", "x_vendor": 1}}  # no type: vLLM's default
    call = chat_call({"messages": MESSAGES, "tools": [bare], "tool_choice": "auto",
                      "parallel_tool_calls": True}, render)
    assert call.tools == Tools("auto", ({"name": "f", "description": "d", "x_vendor": 1},))
    assert tool_dicts(validated(ChatCompletionRequest, {"messages": MESSAGES, "tools": [bare]}).tools) == [
        {"type": "function", "function": {"name": "f", "description": "d", "x_vendor": 1}}]
    named = {"type": "function", "function": {"name": "f"}}  # one call: parallel_tool_calls is moot
    assert chat_call({"messages": MESSAGES, "tools": [bare], "tool_choice": named,
                      "parallel_tool_calls": False}, render).tools == Tools("named", (bare["function"],), "f")
    assert chat_call({"messages": MESSAGES, "tools": [bare], "tool_choice": "none"}, render).tools is None


def test_tools_go_into_the_system_message_for_templates_without_them() -> None:
    tools = [WEATHER]
    added = with_tools_in_system(MESSAGES, tools)
    assert [m["role"] for m in added] == ["system", "user"] and added[1] == MESSAGES[0]
    assert json.dumps(WEATHER["function"]) in added[0]["content"] and "<tool_call>" in added[0]["content"]
    merged = with_tools_in_system([{"role": "system", "content": "Be brief."}, *MESSAGES], tools)
    assert len(merged) == 2 and merged[0]["content"].startswith("Be brief.\n\nYou may call these tools.")
