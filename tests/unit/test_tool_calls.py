"""Tool calls and response_format in the OpenAI front without a server: the constraint each mode
sends, and the tools in the system message (the output read back: test_tool_parsers.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.requests import chat_call
from tt_backend.openai_front.tool_calls import Tools, parse_tools, with_tools_in_system

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


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": []}, "tools"), ({"tools": [WEATHER, WEATHER]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "tools[0].function.parameters"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
])
def test_bad_tools_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as error:
        parse_tools(body)
    assert error.value.param == param


def test_tools_go_into_the_system_message_for_templates_without_them() -> None:
    tools = [WEATHER]
    added = with_tools_in_system(MESSAGES, tools)
    assert [m["role"] for m in added] == ["system", "user"] and added[1] == MESSAGES[0]
    assert json.dumps(WEATHER["function"]) in added[0]["content"] and "<tool_call>" in added[0]["content"]
    merged = with_tools_in_system([{"role": "system", "content": "Be brief."}, *MESSAGES], tools)
    assert len(merged) == 2 and merged[0]["content"].startswith("Be brief.\n\nYou may call these tools.")
