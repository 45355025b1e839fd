"""How the front reads a chat output: the reasoning (`--reasoning-parser`), then in what is left
the tool calls (`--tool-call-parser`, or the format a forced tool_choice constrains), the rest
being content; each piece as soon as it can no longer change, so a stream sends it as it comes."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from tt_backend.openai_front.reasoning import ReasoningParser, ReasoningReader
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.tool_calls import HERMES_INSTRUCTION, Tools
from tt_backend.openai_front.tool_parsers import Named, Required, ToolCallReader, ToolFormat, choose_format


@dataclass
class Piece:
    """What one step of the output adds: reasoning, content, tool-call deltas."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def __add__(self, other: Piece) -> Piece:
        return Piece(self.reasoning + other.reasoning, self.content + other.content,
                     [*self.tool_calls, *other.tool_calls])


@dataclass(frozen=True)
class Reading:
    """How one request's outputs are read."""

    tools: ToolFormat | None
    reasoning: bool
    finish_reason: str = "tool_calls"
    """An output that made calls ends with this (vLLM: `stop` for a named function)."""

    def reader(self) -> OutputReader:
        """A reader for one output (one per choice)."""
        return OutputReader(ReasoningReader() if self.reasoning else None,
                            ToolCallReader(self.tools) if self.tools is not None else None,
                            self.finish_reason)


class OutputReader:
    def __init__(self, reasoning: ReasoningReader | None, tools: ToolCallReader | None,
                 finish_reason: str = "tool_calls") -> None:
        self._reasoning = reasoning
        self._tools = tools
        self.finish_reason = finish_reason
        """What an output that made calls ends with."""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return self._tools.calls if self._tools is not None else []

    def feed(self, text: str) -> Piece:
        reasoning, content = self._reasoning.feed(text) if self._reasoning is not None else ("", text)
        return Piece(reasoning) + self._content(content)

    def finish(self) -> Piece:
        reasoning, content = self._reasoning.finish() if self._reasoning is not None else ("", "")
        piece = Piece(reasoning) + self._content(content)
        return piece + Piece(content=self._tools.finish()) if self._tools is not None else piece

    def _content(self, text: str) -> Piece:
        if self._tools is None:
            return Piece(content=text)
        content, deltas = self._tools.feed(text)
        return Piece(content=content, tool_calls=deltas)


@dataclass(frozen=True)
class OutputParsing:
    """The front's parsers (its --tool-call-parser and --reasoning-parser)."""

    tool_format: ToolFormat | None = None
    """Calls read under tool_choice auto (None: they stay content)."""
    reasoning: ReasoningParser | None = None
    keep_special_tokens: bool = False
    """The tool format's markers are special tokens of the tokenizer: outputs read for its calls are
    detokenized with special tokens (unless the request says otherwise), as vLLM's parsers ask."""

    @property
    def tool_instruction(self) -> str:
        """How to call a tool in the format read, for templates that take no tools."""
        return self.tool_format.instruction if self.tool_format is not None else HERMES_INSTRUCTION

    def prepare(self, call: GenerateCall, body: dict[str, Any]) -> tuple[GenerateCall, Reading | None]:
        """A chat call's reading (None: its output is content as it is), and the call with the
        detokenizing its reading needs."""
        tools = _format(call.tools, self.tool_format)
        thinks = self.reasoning is not None and self.reasoning.thinks(body.get("chat_template_kwargs"))
        if tools is None and not thinks:
            return call, None
        keep = tools is self.tool_format and self.keep_special_tokens
        if keep and "skip_special_tokens" not in call.sampling:
            call = dataclasses.replace(call, sampling={**call.sampling, "skip_special_tokens": False})
        reason = call.tools.finish_reason if call.tools is not None else "tool_calls"
        return call, Reading(tools, thinks, reason)


def _format(tools: Tools | None, auto: ToolFormat | None) -> ToolFormat | None:
    if tools is None:
        return None
    if tools.mode == "named":
        return Named(tools.name or "")
    return Required() if tools.mode == "required" else auto


def output_parsing(tool_parser: str, reasoning_parser: str | None, chat_template: str,
                   special_tokens: Collection[str]) -> tuple[OutputParsing, str]:
    """The front's parsers from its flags, and a line saying which (for the log). `chat_template`:
    the template's text (`auto` reads the tool-call format from it); `special_tokens`: the
    tokenizer's (markers among them need skip_special_tokens off)."""
    fmt, why = choose_format(tool_parser, chat_template, "tools" in chat_template)
    reasoning = ReasoningParser.of(reasoning_parser) if reasoning_parser else None
    keep = fmt is not None and any(token in special_tokens for token in fmt.kept_tokens)
    line = (f"tool calls: {why}{' (special tokens kept)' if keep else ''}; reasoning: "
            f"{reasoning.name if reasoning is not None else 'off'}")
    return OutputParsing(fmt, reasoning, keep), line
