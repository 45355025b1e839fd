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
from dataclasses import dataclass
from typing import Any, Literal

from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.schemas import ChatCompletionRequest, NamedToolChoice, ToolParam


@dataclass(frozen=True)
class Tools:
    """What a request's tools ask of the output."""

    mode: Literal["auto", "required", "named"]
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


def parse_tools(request: ChatCompletionRequest) -> Tools | None:
    """The request's tools and tool_choice (their shapes checked by schemas.py); None when no call
    can be made."""
    tools, choice = request.tools, request.tool_choice
    if tools is None:
        if choice not in (None, "none"):
            raise BadRequest(f"tool_choice {_shown(choice)} needs tools", "tool_choice")
        return None
    functions = tuple(tool.function.model_dump(exclude_unset=True) for tool in tools)
    names = [tool.function.name for tool in tools]
    if choice == "none":
        return None
    if request.parallel_tool_calls is False and not isinstance(choice, NamedToolChoice):
        raise BadRequest("parallel_tool_calls=false is not supported (only its default, true): the output "
                         "is not cut to one call; name the function in tool_choice", "parallel_tool_calls")
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in names:
            raise BadRequest(f"tool_choice.function.name: {choice.function.name!r} is not in tools ({names})",
                             "tool_choice.function.name")
        return Tools("named", functions, choice.function.name)
    return Tools(choice or "auto", functions)


def tool_dicts(tools: list[ToolParam] | None) -> list[dict[str, Any]] | None:
    """The tools as the chat template takes them: as sent, with `type` (vLLM's default) filled in."""
    return None if tools is None else [{"type": "function", **tool.model_dump(exclude_unset=True)}
                                       for tool in tools]


def _shown(choice: str | NamedToolChoice) -> str:
    return repr(choice) if isinstance(choice, str) else f"naming {choice.function.name!r}"


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
