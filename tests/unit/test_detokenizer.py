from typing import Any

import pytest

from tt_backend.text.detokenizer import IncrementalDetokenizer, delta_text

TEXTS = [
    "Hello world, it's a test.",
    "Café crème, déjà vu, naïve façade — ¿cómo estás?",
    "Emoji: 🌱🚀 and 👩‍👩‍👧 family",
    "ありがとうございます、日本語のテキスト",
    "def f(x):\n    if x:\n        return  x\n\treturn None\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_deltas_concatenate_to_the_full_decode(tokenizer: Any, text: str) -> None:
    prompt = tokenizer("Say:").input_ids
    ids = tokenizer(text, add_special_tokens=False).input_ids
    detok = IncrementalDetokenizer(tokenizer, prompt)
    pieces = []
    for i, token in enumerate(ids):
        out = detok.add(token, flush=i == len(ids) - 1)
        if out is not None:
            context, new, piece = out
            assert delta_text(tokenizer, context, new) == piece  # what postprocessing computes
            assert "\ufffd" not in piece
            pieces.append(piece)
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True) == text


def test_incomplete_character_is_held_then_flushed(tokenizer: Any) -> None:
    ids = tokenizer("日", add_special_tokens=False).input_ids
    assert len(ids) > 1, "needs a character split over several byte tokens"
    detok = IncrementalDetokenizer(tokenizer, [1])
    assert detok.add(ids[0]) is None  # held: the character is incomplete
    # Ending on an incomplete character flushes what a full decode gives.
    flushed = IncrementalDetokenizer(tokenizer, [1]).add(ids[0], flush=True)
    assert flushed is not None and flushed[2] == tokenizer.decode(ids[:1])
