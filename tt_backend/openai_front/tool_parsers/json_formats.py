"""The formats that write calls as JSON: Hermes/Qwen, Llama 3 JSON, Mistral, and the two forced
modes (`required`, a named function), whose output the engine's structured outputs constrain."""

from __future__ import annotations

import json
import random
import re
import string

from tt_backend.openai_front.tool_calls import HERMES_INSTRUCTION
from tt_backend.openai_front.tool_parsers.base import (
    CallSoFar,
    ToolFormat,
    arguments_text,
    listed_calls,
    object_call,
)
from tt_backend.openai_front.tool_parsers.partial_json import PartialJson

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class Hermes(ToolFormat):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call (Hermes 2 Pro,
    Qwen2.5, Qwen3), after any content."""

    name = "hermes"
    starts = ("<tool_call>",)
    kept_tokens = ("<tool_call>", "</tool_call>")
    instruction = HERMES_INSTRUCTION

    def read(self, section: str) -> list[CallSoFar]:
        calls: list[CallSoFar] = []
        for block in section.split("<tool_call>")[1:]:
            partial = PartialJson.read(block.partition("</tool_call>")[0])
            call = None if partial is None else object_call(partial)
            if call is None:
                break
            calls.append(call)
        return calls


class Llama3Json(ToolFormat):
    """The whole output is `{"name": ..., "parameters": {...}}` (Llama 3.1-3.3's JSON tool calling),
    optionally after `<|python_tag|>`, several calls separated by `;`."""

    name = "llama3_json"
    starts = ("<|python_tag|>", "{")
    anywhere = False
    instruction = ('To call a tool, reply with only {"name": <tool name>, "parameters": <arguments as '
                   'JSON>}; for several calls, separate them with "; ".')

    def read(self, section: str) -> list[CallSoFar]:
        text = section.lstrip().removeprefix("<|python_tag|>")
        decoder, at, calls = json.JSONDecoder(), 0, list[CallSoFar]()
        while True:
            while at < len(text) and (text[at].isspace() or text[at] == ";"):
                at += 1
            if at == len(text):
                return calls
            try:
                value, at = decoder.raw_decode(text, at)
                partial: PartialJson | None = PartialJson(value, 0)
            except json.JSONDecodeError:  # the last call, still being written (or not JSON)
                partial, at = PartialJson.read(text[at:]), len(text)
            call = None if partial is None else object_call(partial)
            if call is None:
                return calls
            calls.append(call)
            if at == len(text) or partial is None or partial.open:
                return calls


class Mistral(ToolFormat):
    """`[TOOL_CALLS]` then a JSON list of `{"name": ..., "arguments": {...}}` (Mistral's tokenizers
    before v11), or `[TOOL_CALLS]name[ARGS]{...}` per call (v11 on; `name{...}` also read)."""

    name = "mistral"
    starts = ("[TOOL_CALLS]",)
    kept_tokens = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")
    instruction = ('To call tools, reply with [TOOL_CALLS] then a JSON list of calls, each {"name": <tool '
                   'name>, "arguments": <arguments as JSON>}.')

    def read(self, section: str) -> list[CallSoFar]:
        after = section.removeprefix("[TOOL_CALLS]")
        if after.lstrip().startswith("["):
            return listed_calls(PartialJson.read(after))
        calls: list[CallSoFar] = []
        for part in after.split("[TOOL_CALLS]"):
            head, marker, args = part.partition("[ARGS]")
            if not marker and "{" in part:
                head, args = part[:part.index("{")], part[part.index("{"):]
            elif not marker:  # the name is still being written
                return calls + ([CallSoFar(None, "")] if _NAME.fullmatch(part.strip() or "x") else [])
            name = head.partition("[CALL_ID]")[0].strip()
            if not _NAME.fullmatch(name):
                return calls
            partial = PartialJson.read(args)
            calls.append(CallSoFar(name, "" if partial is None else arguments_text(partial, ())))
        return calls

    def call_id(self) -> str:
        """Nine letters and digits: Mistral's chat templates refuse other call ids."""
        return "".join(random.choices(string.ascii_letters + string.digits, k=9))


class Required(ToolFormat):
    """tool_choice `required`: the output is a JSON list of `{"name": ..., "parameters": {...}}`
    (the structured output `Tools.constraint` asks for)."""

    name = "required"
    starts = ("",)
    anywhere = False

    def read(self, section: str) -> list[CallSoFar]:
        return listed_calls(PartialJson.read(section), ("parameters", "arguments"))


class Named(ToolFormat):
    """tool_choice naming a function: the whole output is its arguments."""

    name = "named"
    starts = ("",)
    anywhere = False

    def __init__(self, function: str) -> None:
        self.function = function

    def read(self, section: str) -> list[CallSoFar]:
        partial = PartialJson.read(section)
        return [CallSoFar(self.function, "" if partial is None else partial.text() or "")]
