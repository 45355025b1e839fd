"""The model's tokenizer: loading it, encoding a chat turn, and the ids that end generation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_tokenizer(model_dir: Path) -> Any:
    """The tokenizer class `tokenizer_config.json` names (its fast variant when there is one, as
    AutoTokenizer prefers), loaded directly: transformers' AutoTokenizer module imports torch
    (5.x: tokenization_auto -> configuration_utils -> modeling_rope_utils), the tokenizer classes
    do not. A config naming no class transformers exports goes through AutoTokenizer."""
    import transformers

    config = model_dir / "tokenizer_config.json"
    name = ""
    if config.is_file():
        with open(config, encoding="utf-8") as f:
            name = str(json.load(f).get("tokenizer_class") or "")
    for candidate in (f"{name}Fast", name) if name and not name.endswith("Fast") else (name,):
        cls = getattr(transformers, candidate, None) if candidate else None
        if cls is not None:
            return cls.from_pretrained(model_dir)
    return transformers.AutoTokenizer.from_pretrained(model_dir)


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
