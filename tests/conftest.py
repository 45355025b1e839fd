"""Shared fixtures: the default model, its tokenizer, and HF transformers reference outputs."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.text.tokenizer import encode_chat, load_tokenizer

# Chat prompts for exactness tests; greedy answers of the default model include accented
# letters (Spanish, French) and Japanese cut mid-character by max_tokens.
CHAT_PROMPTS = (
    "What is the capital of France?",
    "Translate 'Good morning, how are you?' into Spanish.",
    "Write the word 'café' three times.",
    "How do you say 'thank you' in Japanese?",
)
# Answers with emoji and with indented code: streamed text must equal the whole text exactly.
TEXT_PROMPTS = CHAT_PROMPTS + (
    "Give me an emoji for happiness.",
    "Write a Python function that returns the larger of two numbers.",
)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return resolve_model_dir("")


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path) -> Any:
    return load_tokenizer(model_dir)


@pytest.fixture(scope="session")
def chat_ids(tokenizer: Any) -> Callable[[str], list[int]]:
    return lambda prompt: encode_chat(tokenizer, prompt)


@pytest.fixture(scope="session")
def chat_text(tokenizer: Any) -> Callable[[str], str]:
    """`prompt` as one user turn through the chat template, as a client that templates its own
    prompts sends it (the ensemble tokenizes text_input as sent)."""
    return lambda prompt: str(tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                            add_generation_prompt=True, tokenize=False))


@pytest.fixture(scope="session")
def hf_greedy(model_dir: Path) -> Callable[[tuple[int, ...], int], list[int]]:
    """HF transformers `generate` (fp32, greedy) on the same weights: new token ids."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    @cache
    def generate(prompt_ids: tuple[int, ...], max_new_tokens: int) -> list[int]:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens,
                                 do_sample=False)
        return out[0, len(prompt_ids):].tolist()

    return generate
