"""Tool-call parsers (`--tool-call-parser`, as vLLM's): each model family's way of writing calls,
read into OpenAI `tool_calls` as the output streams. `auto` picks one from the chat template."""

from __future__ import annotations

from tt_backend.openai_front.tool_parsers.base import CallSoFar, ToolFormat
from tt_backend.openai_front.tool_parsers.json_formats import Hermes, Llama3Json, Mistral, Named, Required
from tt_backend.openai_front.tool_parsers.pythonic import Pythonic
from tt_backend.openai_front.tool_parsers.reader import ToolCallReader

FORMATS: dict[str, type[ToolFormat]] = {f.name: f for f in (Hermes, Llama3Json, Mistral, Pythonic)}
CHOICES = ("auto", "none", *FORMATS)
"""--tool-call-parser's values."""
_SIGNS: tuple[tuple[str, type[ToolFormat]], ...] = (
    ("<tool_call>", Hermes), ("[TOOL_CALLS]", Mistral), ("<|python_tag|>", Llama3Json),
    ('"parameters": dictionary of argument name', Llama3Json), ("[func_name1(", Pythonic))
"""Text in a chat template that shows its format (the first found wins)."""


def choose_format(option: str, chat_template: str, template_takes_tools: bool
                  ) -> tuple[ToolFormat | None, str]:
    """--tool-call-parser's format, and why (for the log). `auto`: the format the chat template
    writes calls in; a template that takes no tools gets them in the system message with Hermes'
    instruction; a template with tools in no format known here: none (calls stay content)."""
    if option not in CHOICES:
        raise ValueError(f"--tool-call-parser {option!r} is not one of {', '.join(CHOICES)}")
    if option == "none":
        return None, "off (--tool-call-parser none)"
    if option != "auto":
        return FORMATS[option](), f"{option} (--tool-call-parser)"
    if not template_takes_tools:
        return Hermes(), "hermes (auto: the chat template takes no tools; they go in the system message)"
    for sign, fmt in _SIGNS:
        if sign in chat_template:
            return fmt(), f"{fmt.name} (auto: the chat template holds {sign!r})"
    return None, ("off (auto: the chat template's call format is none of "
                  f"{', '.join(FORMATS)}; name one with --tool-call-parser)")


__all__ = ["CHOICES", "FORMATS", "CallSoFar", "Named", "Required", "ToolCallReader", "ToolFormat",
           "choose_format"]
