"""Reasoning parsers (`--reasoning-parser`, as vLLM's): the text a thinking model writes between
`<think>` and `</think>` is the message's `reasoning_content`, the rest its `content`.

- `deepseek_r1`: the opening `<think>` may be absent (DeepSeek-R1's later chat templates put it
  in the prompt): everything before `</think>` is reasoning, and an output without `</think>` is
  reasoning whole (cut short while thinking).
- `qwen3`: the same, except that a request with `chat_template_kwargs.enable_thinking` false is
  content whole (Qwen3's template then closes an empty think block in the prompt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

START, END = "<think>", "</think>"
ReasoningName = Literal["deepseek_r1", "qwen3"]
REASONING_PARSERS: tuple[ReasoningName, ...] = ("deepseek_r1", "qwen3")


@dataclass(frozen=True)
class ReasoningParser:
    name: ReasoningName

    def __post_init__(self) -> None:
        if self.name not in REASONING_PARSERS:
            raise ValueError(f"reasoning parser {self.name!r} is not one of {', '.join(REASONING_PARSERS)}")

    @classmethod
    def of(cls, name: str) -> ReasoningParser:
        """The parser `--reasoning-parser NAME` names (ValueError for a name not known here)."""
        return cls(cast(ReasoningName, name))

    def thinks(self, template_kwargs: object) -> bool:
        """Whether a request with these chat_template_kwargs may think (else its output is content)."""
        switch = template_kwargs.get("enable_thinking", True) if isinstance(template_kwargs, dict) else True
        return self.name != "qwen3" or switch is not False


class ReasoningReader:
    """One output read as it streams: `feed` and `finish` return (reasoning, content) that may be
    sent now. A text that may be the start of a tag waits for the next one."""

    def __init__(self) -> None:
        self._held = ""
        self._state: Literal["start", "reasoning", "content"] = "start"

    def feed(self, text: str) -> tuple[str, str]:
        pending, self._held = self._held + text, ""
        if self._state == "content":
            return "", pending
        if self._state == "start":
            body = pending.lstrip()
            if body.startswith(START):
                pending, self._state = body[len(START):], "reasoning"
            elif not body or START.startswith(body):
                self._held = pending
                return "", ""
            else:
                self._state = "reasoning"
        reasoning, end, content = pending.partition(END)
        if end:
            self._state = "content"
            return reasoning, content
        keep = next((n for n in range(min(len(END) - 1, len(pending)), 0, -1)
                     if END.startswith(pending[-n:])), 0)  # a suffix that may begin </think>
        self._held = pending[len(pending) - keep:]
        return pending[:len(pending) - keep], ""

    def finish(self) -> tuple[str, str]:
        """The output is whole: what was held (no `</think>` came: reasoning)."""
        held, self._held = self._held, ""
        return ("", held) if self._state == "content" else (held, "")
