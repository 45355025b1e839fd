"""A vision-language model's prompt with images: each image's placeholder token expanded, by the
model's own HF processor, into the tokens its encoder output fills, and its pixel values.

A prompt marks each image with the processor's image token (LLaVA's `<image>`; the chat template
writes one for each image part, a `tt_llm` client writes it in `text_input`, as vLLM takes it). For
each image in turn the processor is called on that token alone with that image: what it returns is
what it would have put in the prompt (LLaVA: the token repeated once per patch feature) and what
the encoder takes (`pixel_values`), so resizing, patching and the placeholder count are the
processor's, not ours. The expanded tokens replace the placeholder; the run of image tokens in them
is the span the encoder output fills (`ImageSpan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tt_backend.contract.step import ImageSpan
from tt_backend.text.images import ImageInput

_TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids")
"""What a processor returns of the text; the rest is the encoder's input."""


@dataclass(frozen=True)
class ImagePrompt:
    token_ids: list[int]
    images: tuple[ImageSpan, ...]


class ImagePrompts:
    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.image_token: str = processor.image_token
        self.image_token_id: int = int(processor.image_token_id)

    @classmethod
    def load(cls, model_dir: Path) -> ImagePrompts:
        from transformers import AutoProcessor

        try:
            processor = AutoProcessor.from_pretrained(model_dir)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{model_dir} holds a vision-language model, but its HF processor does not load "
                             f"(preprocessor_config.json, processor_config.json): {exc}") from exc
        if not hasattr(processor, "image_processor") or not hasattr(processor, "image_token_id"):
            raise ValueError(f"{model_dir}: {type(processor).__name__} is not an image processor of a "
                             "vision-language model (it has no image_processor or image_token_id)")
        return cls(processor)

    def prepare(self, prompt_ids: Sequence[int], images: Sequence[ImageInput]) -> ImagePrompt:
        """The prompt with each placeholder expanded, and its images' spans; ValueError naming `image`
        when the placeholders and the images do not pair up."""
        places = [i for i, token in enumerate(prompt_ids) if token == self.image_token_id]
        if len(places) != len(images):
            raise ValueError(
                f"image: the prompt holds {len(places)} image placeholder(s) ({self.image_token!r}) and "
                f"{len(images)} image(s) came with it; write one {self.image_token!r} where each image goes "
                "(a chat request's image parts place theirs)")
        out: list[int] = []
        spans: list[ImageSpan] = []
        last = 0
        for place, image in zip(places, images, strict=True):
            out.extend(prompt_ids[last:place])
            ids, pixels = self._expand(image)
            run = [k for k, token in enumerate(ids) if token == self.image_token_id]
            assert run and run == list(range(run[0], run[0] + len(run))), "one contiguous run of image tokens"
            spans.append(ImageSpan(image.sha256, len(out) + run[0], len(run), pixels))
            out.extend(ids)
            last = place + 1
        out.extend(prompt_ids[last:])
        return ImagePrompt(out, tuple(spans))

    def _expand(self, image: ImageInput) -> tuple[list[int], dict[str, torch.Tensor]]:
        """What the processor writes for one image's placeholder, and the encoder's inputs."""
        encoded = self.processor(text=[self.image_token], images=[image.rgb()], return_tensors="pt",
                                 add_special_tokens=False)
        ids = [int(t) for t in encoded["input_ids"][0]]
        pixels = {k: v for k, v in encoded.items() if k not in _TEXT_KEYS}
        return ids, pixels
