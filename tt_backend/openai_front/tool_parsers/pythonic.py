"""Calls written as a Python list of calls: `[get_weather(city="Paris"), get_time()]` (Llama 3.2
and 4's pythonic tool calling, ToolACE), optionally between `<|python_start|>` and `<|python_end|>`.

The text is translated token by token into the JSON a call object list would be
(`[{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]`), cut where the text is cut, and
read as JSON is: a string still being written is a JSON string still open; a name, number or
literal at the cut is left out until it ends.
"""

from __future__ import annotations

import ast
import json
import re

from tt_backend.openai_front.tool_parsers.base import CallSoFar, ToolFormat, listed_calls
from tt_backend.openai_front.tool_parsers.partial_json import PartialJson

_TOKEN = re.compile(r"""\s+|'(?:\\.|[^'\\\n])*(?:'|\\?)|"(?:\\.|[^"\\\n])*(?:"|\\?)"""
                    r"""|[A-Za-z_][A-Za-z0-9_.]*|-?[0-9][0-9.eE+\-_]*|.""")
"""Whitespace, a string (its closing quote missing where it is cut), a name, a number, one character."""
_LITERALS = {"True": "true", "False": "false", "None": "null", "true": "true", "false": "false",
             "null": "null"}


class Pythonic(ToolFormat):
    name = "pythonic"
    starts = ("<|python_start|>", "[")
    anywhere = False
    instruction = ("To call tools, reply with only a Python list of calls with keyword arguments, e.g. "
                   '[get_weather(city="Paris"), get_time()].')

    def read(self, section: str) -> list[CallSoFar]:
        text = section.lstrip().removeprefix("<|python_start|>").partition("<|python_end|>")[0]
        return listed_calls(PartialJson.read(_as_json(text)))


def _as_json(text: str) -> str:
    """The JSON a (possibly cut) pythonic call list stands for, cut at the same place; "" where the
    text is not such a list."""
    out: list[str] = []
    tokens = [t for t in (m.group() for m in _TOKEN.finditer(text)) if not t.isspace()]
    depth, call = 0, False  # open brackets and calls; a call's `(` is next
    for k, token in enumerate(tokens):
        last, following = k == len(tokens) - 1, tokens[k + 1] if k + 1 < len(tokens) else None
        if k == 0 and token != "[":
            return ""
        if token[0] in "'\"":
            closed = _closed(token)
            out.append(_string(token, closed))
            if not closed:
                break
        elif token[0].isalpha() or token[0] == "_":
            if following == "(":
                out.append(f'{{"name": {json.dumps(token)}, "arguments": {{')
                call = True
            elif following == "=":
                out.append(json.dumps(token))
            elif last:
                break  # a name or literal still being written
            elif token in _LITERALS:
                out.append(_LITERALS[token])
            else:
                return ""
        elif token[0].isdigit() or token[0] == "-":
            if last:
                break  # a number still being written
            out.append(token.replace("_", ""))
        elif token == "(" and call:
            call, depth = False, depth + 1
        elif token in ")]}":
            depth -= 1
            out.append("}}" if token == ")" else token)
            if depth == 0:
                break  # the list is whole: what follows is not read
        elif token in "[{":
            depth += 1
            out.append(token)
        elif token in ",:=":
            out.append(": " if token == "=" else token)
        else:
            return ""
    return "".join(out)


def _closed(token: str) -> bool:
    """Whether a string token ends with its closing quote (not an escaped one)."""
    at = 1
    while at < len(token):
        if token[at] == "\\":
            at += 2
        elif token[at] == token[0]:
            return at == len(token) - 1
        else:
            at += 1
    return False


def _string(token: str, closed: bool) -> str:
    """A Python string token as a JSON string, without its closing quote while still open."""
    if closed:
        try:
            return json.dumps(ast.literal_eval(token), ensure_ascii=False)
        except (ValueError, SyntaxError):
            return json.dumps(token[1:-1], ensure_ascii=False)
    body = token[1:]
    for cut in range(min(len(body), 10) + 1):  # leave out an escape still being written
        try:
            value = ast.literal_eval(token[0] + body[:len(body) - cut] + token[0])
            return json.dumps(value, ensure_ascii=False)[:-1]
        except (ValueError, SyntaxError):
            continue
    return '"'
