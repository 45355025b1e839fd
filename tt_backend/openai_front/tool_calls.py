"""Tool calls: the `tools` and `tool_choice` of a chat request as a constraint on the output, and
the output read back as OpenAI `tool_calls`.

- `none` (or no tools): plain text.
- `auto`: the model decides; its output is read in the Hermes/Qwen format, each call a JSON
  object `{"name": ..., "arguments": {...}}` between `<tool_call>` and `</tool_call>`, the text
  before the first call being the message content. Text streams until a call may begin.
- `required`: the output is constrained to a JSON array of one or more calls, each an object with
  a tool's `name` and `parameters` valid for that tool's schema (vLLM's schema for `required`).
- a named function: the output is constrained to that function's parameter schema, and is its
  arguments.

A chat template that takes no `tools` (SmolLM2's, for one) would drop them, and the model would
never see what it may call: then the tools go into the system message, with the call format
above (`with_tools_in_system`).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from tt_backend.openai_front.errors import BadRequest

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class Tools:
    """What a request's tools ask of the output."""

    mode: str
    """auto, required or named."""
    functions: tuple[dict[str, Any], ...]
    """The tools' `function` objects (name, description, parameters)."""
    name: str | None = None
    """The named function (mode `named`)."""

    @property
    def constraint(self) -> dict[str, Any] | None:
        """The structured_outputs object the mode needs (None for auto)."""
        if self.mode == "named":
            function = next(f for f in self.functions if f["name"] == self.name)
            return {"json": function.get("parameters") or {"type": "object"}}
        if self.mode == "required":
            calls = [{"type": "object", "required": ["name", "parameters"], "additionalProperties": False,
                      "properties": {"name": {"enum": [f["name"]]},
                                     "parameters": f.get("parameters") or {"type": "object"}}}
                     for f in self.functions]
            return {"json": {"type": "array", "minItems": 1, "items": {"anyOf": calls}}}
        return None

    @property
    def finish_reason(self) -> str:
        """The finish reason of an output that holds calls (vLLM: `stop` for a named function)."""
        return "stop" if self.mode == "named" else "tool_calls"


def parse_tools(body: dict[str, Any]) -> Tools | None:
    """The request's tools and tool_choice; None when no call can be made."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise BadRequest(f"tool_choice {choice!r} needs tools", "tool_choice")
        return None
    if not isinstance(tools, list) or not tools:
        raise BadRequest("tools must be a non-empty list of tools", "tools")
    functions = tuple(_function(i, tool) for i, tool in enumerate(tools))
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise BadRequest(f"tools name a function twice: {names}", "tools")
    choice = "auto" if choice is None else choice
    if choice == "none":
        return None
    if choice in ("auto", "required"):
        return Tools(choice, functions)
    if isinstance(choice, dict) and _is_function(choice):
        name = choice["function"].get("name")
        if name not in names:
            raise BadRequest(f"tool_choice names the function {name!r}, which is not in tools ({names})",
                             "tool_choice")
        return Tools("named", functions, name)
    raise BadRequest(f"tool_choice must be none, auto, required or "
                     f'{{"type": "function", "function": {{"name": ...}}}}, got {choice!r}', "tool_choice")


def _function(index: int, tool: Any) -> dict[str, Any]:
    where = f"tools[{index}]"
    if not _is_function(tool):
        raise BadRequest(f'{where} must be {{"type": "function", "function": {{...}}}}', where)
    function = tool["function"]
    name = function.get("name")
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name)):
        raise BadRequest(f"{where}.function.name must be 1-64 letters, digits, _ or -, got {name!r}",
                         f"{where}.function.name")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise BadRequest(f"{where}.function.parameters must be a JSON schema object",
                         f"{where}.function.parameters")
    return function


def _is_function(value: Any) -> bool:
    """`{"type": "function", "function": {...}}`: a tool, or a tool_choice naming one."""
    return (isinstance(value, dict) and value.get("type") == "function"
            and isinstance(value.get("function"), dict))


def call(name: str, arguments: Any) -> dict[str, Any]:
    """One OpenAI tool call (arguments as JSON text)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": text}}


class ToolCallReader:
    """Reads one output as it streams: `feed` returns the content that may be sent now; `finish`
    returns the rest of the content and the calls. In the constrained modes nothing is content."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self._held: list[str] = []
        self._in_call = tools.mode != "auto"

    def feed(self, text: str) -> str:
        if self._in_call:
            self._held.append(text)
            return ""
        pending = "".join(self._held) + text
        start = pending.find(OPEN)
        if start >= 0:
            self._in_call = True
            self._held = [pending[start:]]
            return pending[:start]
        keep = _partial_marker(pending)  # a suffix that may begin <tool_call>
        self._held = [pending[len(pending) - keep:]] if keep else []
        return pending[:len(pending) - keep]

    def finish(self) -> tuple[str, list[dict[str, Any]]]:
        held = "".join(self._held)
        if self.tools.mode == "named":
            return "", [call(self.tools.name or "", held)]
        if self.tools.mode == "required":
            try:
                calls = json.loads(held)
                return "", [call(c["name"], c["parameters"]) for c in calls]
            except (json.JSONDecodeError, KeyError, TypeError):  # cut short (max_tokens): no calls
                return held, []
        if not held.startswith(OPEN):
            return held, []
        calls = []
        for body in re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", held, flags=re.DOTALL):
            try:
                parsed = json.loads(body.strip())
                calls.append(call(parsed["name"], parsed.get("arguments", parsed.get("parameters", {}))))
            except (json.JSONDecodeError, KeyError, TypeError):
                return held, []  # not a well-formed call: the text is content
        return "", calls


def _partial_marker(text: str) -> int:
    """The length of the longest suffix of `text` that is a proper prefix of `<tool_call>`."""
    for n in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-n:]):
            return n
    return 0


_TOOLS_PROMPT = ("You may call these tools. To call one, reply with <tool_call>{\"name\": <tool name>, "
                 "\"arguments\": <arguments as JSON>}</tool_call>.\n<tools>\n")


def with_tools_in_system(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with the tools described in the system message (the first one, or a new one)."""
    described = _TOOLS_PROMPT + "\n".join(json.dumps(t["function"]) for t in tools) + "\n</tools>"
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{described}"}, *messages[1:]]
    return [{"role": "system", "content": described}, *messages]
