"""Incremental detokenization whose deltas concatenate to exactly the full decode.

Decoding a token alone loses what depends on its neighbours (a leading space, the bytes of a
multi-byte character split over tokens). So each delta is the difference between decoding a
short window of preceding tokens (the context) with and without the new tokens; a delta that
ends in an incomplete character (U+FFFD) is held back until the character completes.

`delta_text(tokenizer, context, new)` is the whole computation, so a stateless postprocessing
model given the same context ids produces the same delta as the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

# Prompt tokens kept as initial context (vLLM uses the same window).
INITIAL_CONTEXT = 5
REPLACEMENT_CHAR = "\ufffd"


class Tokenizer(Protocol):
    """The part of an HF tokenizer the engine uses."""

    def __call__(self, text: str, add_special_tokens: bool = ...) -> Any: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


def delta_text(tokenizer: Tokenizer, context_ids: Sequence[int], new_ids: Sequence[int],
               skip_special_tokens: bool = True) -> str:
    before = tokenizer.decode(list(context_ids), skip_special_tokens=skip_special_tokens)
    after = tokenizer.decode(list(context_ids) + list(new_ids), skip_special_tokens=skip_special_tokens)
    return after[len(before):]


class IncrementalDetokenizer:
    """Per-request state: `ids[prefix:read]` is the context, `ids[read:]` the pending tokens."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int],
                 skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids = list(prompt_ids)
        self.prefix = max(len(self.ids) - INITIAL_CONTEXT, 0)
        self.read = len(self.ids)

    def add(self, token_id: int, flush: bool = False) -> tuple[tuple[int, ...], tuple[int, ...], str] | None:
        """Append a token. Return (context ids, new ids, delta text) once text is complete, or
        when `flush` (the request ends); None while a character is still incomplete."""
        self.ids.append(token_id)
        context = self.ids[self.prefix:self.read]
        new = self.ids[self.read:]
        text = delta_text(self.tokenizer, context, new, self.skip_special_tokens)
        if text.endswith(REPLACEMENT_CHAR) and not flush:
            return None
        self.prefix, self.read = self.read, len(self.ids)
        return tuple(context), tuple(new), text
