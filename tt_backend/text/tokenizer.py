"""The model's tokenizer: loading it, encoding a chat turn, and the ids that end generation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def encode_chat(tokenizer: Any, user_message: str) -> list[int]:
    """Token ids of `user_message` as one user turn, ready for the assistant's answer."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": user_message}],
                                         add_generation_prompt=True, tokenize=False)
    # The template already holds any BOS it wants: add no special tokens a second time.
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def eos_token_ids(model_dir: Path, tokenizer_eos: int | None) -> frozenset[int]:
    """EOS ids from generation_config.json (int or list) plus the tokenizer's."""
    ids: set[int] = set() if tokenizer_eos is None else {tokenizer_eos}
    gen = model_dir / "generation_config.json"
    if gen.is_file():
        with open(gen, encoding="utf-8") as f:
            value = json.load(f).get("eos_token_id")
        ids.update(value if isinstance(value, list) else [] if value is None else [value])
    return frozenset(ids)
