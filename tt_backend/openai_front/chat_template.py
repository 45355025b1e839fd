"""Chat messages → prompt token ids through a chat template, with vLLM's per-request template fields.

The template is the request's `chat_template` (only when the front trusts request templates),
else the front's `--chat-template` (a file, or an inline Jinja template, as vLLM's option), else
the tokenizer's. `chat_template_kwargs` reach the template as variables (Qwen3's
`enable_thinking`); `documents` as `documents`; `add_generation_prompt` (default true) opens the
assistant's turn, `continue_final_message` leaves the last message open instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from tt_backend.openai_front.tool_calls import HERMES_INSTRUCTION, with_tools_in_system

RESERVED_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
    "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"})
"""apply_chat_template's own parameters: a request sets them by their fields, not by kwargs."""


@dataclass(frozen=True)
class TemplateArgs:
    """How one request's messages are rendered (vLLM's chat request fields)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    """The request's own template (None: the front's)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """`chat_template_kwargs`: variables the template sees."""

    def __post_init__(self) -> None:
        assert not (self.add_generation_prompt and self.continue_final_message)
        assert not RESERVED_KWARGS & set(self.kwargs)


DEFAULT_TEMPLATE_ARGS = TemplateArgs()
Render = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None, TemplateArgs], list[int]]
"""Messages, tools (for templates that take them) and the template's arguments → prompt token ids."""


def load_chat_template(value: str) -> str:
    """`--chat-template`: a file's text, or the value itself when it reads as a Jinja template (it
    holds `{`, `}` or a newline), as vLLM takes it; ValueError for a path that cannot be read."""
    path = Path(value)
    try:
        if path.is_file():
            return path.read_text(encoding="utf-8")
    except OSError as exc:  # a path too long or unreadable
        if not any(c in value for c in "{}\n"):
            raise ValueError(f"--chat-template {value!r}: cannot read it: {exc}") from None
    if any(c in value for c in "{}\n"):
        return value
    raise ValueError(f"--chat-template {value!r} is neither a readable file nor a Jinja template")


def tokenizer_render(tokenizer: Any, chat_template: str | None = None,
                     tool_instruction: str = HERMES_INSTRUCTION) -> Render:
    """A Render over a Hugging Face tokenizer's apply_chat_template; `chat_template`: the front's
    template, in place of the tokenizer's; `tool_instruction`: how to call tools, in the system
    message of a template that takes none (the --tool-call-parser format's)."""

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               template: TemplateArgs) -> list[int]:
        source = template.chat_template or chat_template
        if tools and "tools" not in str(source or tokenizer.chat_template or ""):  # it would drop them
            messages, tools = with_tools_in_system(messages, tools, tool_instruction), None
        try:
            ids = tokenizer.apply_chat_template(
                messages, tools=tools, documents=template.documents, chat_template=source,
                add_generation_prompt=template.add_generation_prompt,
                continue_final_message=template.continue_final_message, tokenize=True, **template.kwargs)
        except jinja2.TemplateError as exc:  # the template refused them (raise_exception, undefined names)
            raise ValueError(f"the chat template: {exc}") from None
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding in transformers 5

    return render
