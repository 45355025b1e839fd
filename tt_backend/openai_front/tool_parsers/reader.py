"""One output read as it streams, in one tool-call format: the content before the calls, and the
calls as OpenAI's streamed tool-call deltas.

The first delta of a call holds its id, type and whole name (with the arguments read so far); the
next ones add to its arguments, each at the call's index (0, 1, ... in the order written). The
non-streamed answer is what the deltas add up to (`calls`), so the two never differ.
"""

from __future__ import annotations

from typing import Any

from tt_backend.openai_front.tool_parsers.base import CallSoFar, ToolFormat


class ToolCallReader:
    def __init__(self, format: ToolFormat) -> None:
        self.format = format
        self._text = ""
        self._content_end = 0
        """The text before this is content, sent."""
        self._start: int | None = None
        """Where the call section begins (None: not yet seen)."""
        self._plain = False
        """The output is not calls: all of it is content (formats read at the output's start only)."""
        self._sent: list[CallSoFar] = []
        self._ids: list[str] = []

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The calls read so far, as OpenAI's `tool_calls`."""
        return [{"id": i, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for i, c in zip(self._ids, self._sent, strict=True)]

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """Content that may be sent now, and tool-call deltas."""
        self._text += text
        content = self._content() if self._start is None else ""
        return content, self._deltas() if self._start is not None else []

    def finish(self) -> str:
        """The output is whole: the content left (a call section that held no call is content)."""
        if self._start is not None and self._sent:
            return ""
        rest, self._content_end = self._text[self._content_end:], len(self._text)
        return rest

    def _content(self) -> str:
        """The text that is surely content now; finds where the calls begin."""
        text, fmt = self._text, self.format
        end = len(text)
        if self._plain:
            pass
        elif not fmt.anywhere:
            body = text.lstrip()
            if any(body.startswith(s) for s in fmt.starts):
                self._start = end = 0
            elif not body or any(s.startswith(body) for s in fmt.starts):
                end = 0  # undecided yet
            else:
                self._plain = True
        else:
            found = [i for s in fmt.starts if (i := text.find(s, self._content_end)) >= 0]
            if found:
                self._start = end = min(found)
            else:  # a suffix that may begin a marker waits for the next text
                end -= max(_marker_prefix(text, s) for s in fmt.starts)
        end = max(end, self._content_end)
        content, self._content_end = text[self._content_end:end], end
        return content

    def _deltas(self) -> list[dict[str, Any]]:
        assert self._start is not None
        deltas: list[dict[str, Any]] = []
        for index, call in enumerate(self.format.read(self._text[self._start:])):
            if call.name is None:
                break
            if index == len(self._sent):
                self._sent.append(call)
                self._ids.append(self.format.call_id())
                deltas.append({"index": index, "id": self._ids[index], "type": "function",
                               "function": {"name": call.name, "arguments": call.arguments}})
                continue
            before = self._sent[index].arguments
            if len(call.arguments) > len(before) and call.arguments.startswith(before):
                self._sent[index] = call
                deltas.append({"index": index, "function": {"arguments": call.arguments[len(before):]}})
        return deltas


def _marker_prefix(text: str, marker: str) -> int:
    """The length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
