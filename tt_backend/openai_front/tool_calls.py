"""Tool calls: the `tools` and `tool_choice` of a chat request as a constraint on the output, and
the output read back as OpenAI `tool_calls`.

- `none` (or no tools): plain text.
- `auto`: the model decides; its output is read in the format of the front's --tool-call-parser
  (tool_parsers/), the text before the first call being the message content.
- `required`: the output is constrained to a JSON array of one or more calls, each an object with
  a tool's `name` and `parameters` valid for that tool's schema (vLLM's schema for `required`).
- a named function: the output is constrained to that function's parameter schema, and is its
  arguments.

A chat template that takes no `tools` (SmolLM2's, for one) would drop them, and the model would
never see what it may call: then the tools go into the system message, with the call format
the parser reads (`with_tools_in_system`).

The output side (calls read back, streamed as deltas) is tool_parsers/ and output.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tt_backend.openai_front.errors import BadRequest


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


HERMES_INSTRUCTION = ('To call a tool, reply with <tool_call>{"name": <tool name>, "arguments": <arguments '
                      'as JSON>}</tool_call>, one such block per call.')
"""How to call in the Hermes format (the tool parsers' `Hermes.instruction`: auto's choice for a
template that takes no tools)."""


def with_tools_in_system(messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                         instruction: str = HERMES_INSTRUCTION) -> list[dict[str, Any]]:
    """The messages with the tools described in the system message (the first one, or a new one),
    and `instruction`: how to call them in the format the front reads (--tool-call-parser)."""
    described = (f"You may call these tools. {instruction}\n<tools>\n"
                 + "\n".join(json.dumps(t["function"]) for t in tools) + "\n</tools>")
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        return [{**first, "content": f"{first['content']}\n\n{described}"}, *messages[1:]]
    return [{"role": "system", "content": described}, *messages]
