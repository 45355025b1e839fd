"""A request's output text under stop strings, matched as vLLM matches them.

After each text delta, each stop string (in the request's order) is searched in the part of the
text the delta could have completed; the first found ends the request, and the text is cut before
it (or after it with `include_stop_str_in_output`). While streaming, the last
`max(len(stop)) - 1` characters are held back (unless the stop string is included), so no client
sees the beginning of a stop string that then ends the output.
"""

from __future__ import annotations


class OutputText:
    def __init__(self, stop: tuple[str, ...] = (), include_stop_str_in_output: bool = False) -> None:
        self.stop = stop
        self.include = include_stop_str_in_output
        self.holdback = max(len(s) for s in stop) - 1 if stop and not include_stop_str_in_output else 0
        self.text = ""
        self._sent = 0

    def append(self, delta: str) -> str | None:
        """Add new text; return the stop string it completed (the text is then cut), or None."""
        self.text += delta
        if not delta:
            return None
        for stop in self.stop:
            index = self.text.find(stop, max(0, len(self.text) - len(delta) - len(stop) + 1))
            if index == -1:
                continue
            if self.include:
                index += len(stop)
            self.text = self.text[:index]
            return stop
        return None

    def take(self, finished: bool) -> str:
        """The text not yet handed out; the held-back tail stays unless the request finished."""
        end = len(self.text) if finished else max(self._sent, len(self.text) - self.holdback)
        out = self.text[self._sent:end]
        self._sent = end
        return out
