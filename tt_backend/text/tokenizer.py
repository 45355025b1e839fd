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


def max_token_bytes(tokenizer: Any) -> int:
    """An upper bound on the UTF-8 bytes of text one token stands for: the longest vocabulary entry
    in UTF-8 (byte-level BPE writes each byte as one character of 1-2 bytes, so this bounds it)."""
    return max(len(token.encode("utf-8")) for token in tokenizer.get_vocab())


def check_prompt_bytes(field: str, text: str, max_tokens: int, token_bytes: int) -> None:
    """Refuse, before tokenizing it, a text that no prompt of `max_tokens` tokens can hold."""
    size = len(text.encode("utf-8"))
    if size > max_tokens * token_bytes:
        raise ValueError(f"{field} is {size} bytes: more than a prompt of max_model_len={max_tokens} tokens "
                         f"can hold (no token of this tokenizer stands for more than {token_bytes} bytes)")
