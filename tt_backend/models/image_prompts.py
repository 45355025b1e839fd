"""A vision-language model's prompt with images: each image's placeholder expanded, by the model's
own HF processor, into the tokens its encoder output fills, and its pixel values.

A prompt marks each image with the processor's placeholder (`processor.image_token`: LLaVA's
`<image>`, Gemma 3's `<start_of_image>`); the chat template writes one for each image part, a
`tt_llm` client writes it in `text_input` (or its id in `input_ids`), as vLLM takes it. A prompt
that came as text is processed whole, text and images together, as HF does (the expansion may
join the text around it into other tokens: Gemma 3's `\\n\\n` before the image merges with a
newline before it). So is a prompt of ids that is the tokenization of its own text (the OpenAI
front's rendered chat template: decoded, it tokenizes back to the same ids), without special tokens
added again; other ids are expanded placeholder by placeholder, each with what the processor
writes for that placeholder alone (as vLLM updates a token prompt). The encoder's inputs are the
image processor's output for each image. Each run of feature tokens (`processor.image_token_ids`:
LLaVA's `<image>` again, Gemma 3's `<image_soft_token>`) is the span its image's encoder output
fills (`ImageSpan`). A model that reads images by cross-attention (Mllama: `cross_tokens_per_tile`)
keeps each placeholder as it is (`<|image|>`, one token), and its span counts the image's tokens in
the cross-attention KV instead (`ImageSpan.cross_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tt_backend.contract.step import ImageSpan
from tt_backend.text.images import ImageInput


@dataclass(frozen=True)
class ImagePrompt:
    token_ids: list[int]
    images: tuple[ImageSpan, ...]


class ImagePrompts:
    def __init__(self, processor: Any, bidirectional: bool = False, cross_tokens_per_tile: int = 0,
                 max_images: int | None = None) -> None:
        self.processor = processor
        self.bidirectional = bidirectional
        """The model's image tokens attend to each other both ways (its spans are prefilled whole)."""
        self.cross_tokens_per_tile = cross_tokens_per_tile
        """A model that reads images by cross-attention (Mllama): an image tile's tokens in its
        cross-attention KV; its placeholders are not expanded, and each span keeps its image itself
        (`ImageSpan.picture`, which tt-metal's Mllama generator takes) (0: another model)."""
        self.max_images = max_images
        """The most images a request may bring to this model (None: the input limits' alone)."""
        self.placeholder: str = processor.image_token
        self.placeholder_id: int = int(processor.image_token_id)
        ids = getattr(processor, "image_token_ids", None) or [self.placeholder_id]
        self.feature_id: int = int(ids[0])

    @classmethod
    def load(cls, model_dir: Path, bidirectional: bool = False, cross_tokens_per_tile: int = 0,
             max_images: int | None = None) -> ImagePrompts:
        from tt_backend.models.processors import load_processor

        try:
            processor = load_processor(model_dir)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{model_dir} holds a vision-language model, but its HF processor does not load "
                             f"(processor_config.json, preprocessor_config.json): {exc}") from exc
        if not hasattr(processor, "image_processor") or not hasattr(processor, "image_token_id"):
            raise ValueError(f"{model_dir}: {type(processor).__name__} is not the processor of a "
                             "vision-language model (it has no image_processor or image_token_id)")
        return cls(processor, bidirectional, cross_tokens_per_tile, max_images)

    def prepare(self, prompt_ids: Sequence[int], images: Sequence[ImageInput],
                text: str | None = None) -> ImagePrompt:
        """The prompt (`text`, tokenized as `prompt_ids`, or the ids alone) with its placeholders
        expanded, and its images' spans; ValueError naming `image` when placeholders and images do
        not pair up."""
        if self.max_images is not None and len(images) > self.max_images:
            raise ValueError(f"image: this model takes at most {self.max_images} image(s) a request, got "
                             f"{len(images)}")
        places = [i for i, token in enumerate(prompt_ids) if token == self.placeholder_id]
        if len(places) != len(images):
            raise ValueError(
                f"image: the prompt holds {len(places)} image placeholder(s) ({self.placeholder!r}) and "
                f"{len(images)} image(s) came with it; write one {self.placeholder!r} where each image goes "
                "(a chat request's image parts place theirs)")
        pictures = [image.rgb() for image in images]
        alone = [self._alone(picture) for picture in pictures]
        special = text is not None
        text = text if text is not None else self._text_of(prompt_ids)
        if text is not None:
            encoded = self.processor(text=[text], images=pictures, return_tensors="pt",
                                     add_special_tokens=special)
            ids = [int(t) for t in encoded["input_ids"][0]]
        else:
            ids = []
            last = 0
            for place, (expansion, _) in zip(places, alone, strict=True):
                ids += list(prompt_ids[last:place]) + expansion
                last = place + 1
            ids += prompt_ids[last:]
        at = [i for i, token in enumerate(ids) if token == self.feature_id]
        counts = [expansion.count(self.feature_id) for expansion, _ in alone]
        assert len(at) == sum(counts), f"{len(at)} image tokens in the prompt for images of {counts}"
        spans = []
        for image, picture, count, (_, pixels) in zip(images, pictures, counts, alone, strict=True):
            mine, at = at[:count], at[count:]
            start = mine[0]
            assert mine[-1] - start == count - 1, "an image's tokens are one run"
            spans.append(ImageSpan(image.sha256, start, count, pixels, self.bidirectional, self._grid(pixels),
                                   *self._cross(pixels), picture if self.cross_tokens_per_tile else None))
        return ImagePrompt(ids, tuple(spans))

    def _grid(self, pixels: dict[str, Any]) -> tuple[int, int, int] | None:
        """A processor that gives `image_grid_thw` (Qwen2-VL's) lays the image's tokens on a grid of
        (frames, rows, columns) of merged patches, the text model's M-RoPE positions; None otherwise."""
        if "image_grid_thw" not in pixels:
            return None
        merge = int(self.processor.image_processor.merge_size)
        (t, h, w), = pixels["image_grid_thw"].tolist()
        return int(t), int(h) // merge, int(w) // merge

    def _cross(self, pixels: dict[str, Any]) -> tuple[int, int]:
        """(cross_tokens, cross_seen) of an image for a cross-attention model (MllamaProcessor's
        `pixel_values` [1, 1, tiles, 3, H, W] and `aspect_ratio_mask` [1, 1, tiles]); (0, 0) otherwise."""
        if not self.cross_tokens_per_tile:
            return 0, 0
        tiles, used = int(pixels["pixel_values"].shape[2]), int(pixels["aspect_ratio_mask"].sum())
        return tiles * self.cross_tokens_per_tile, used * self.cross_tokens_per_tile

    def _text_of(self, ids: Sequence[int]) -> str | None:
        """The text `ids` are the tokenization of (without special tokens added), if any."""
        tokenizer = self.processor.tokenizer
        text: str = tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return text if tokenizer(text, add_special_tokens=False).input_ids == list(ids) else None

    def _alone(self, picture: Any) -> tuple[list[int], dict[str, Any]]:
        """What the processor writes for one placeholder with this image, and the encoder's inputs."""
        encoded = self.processor(text=[self.placeholder], images=[picture], return_tensors="pt",
                                 add_special_tokens=False)
        pixels = {k: v for k, v in encoded.items() if k not in _TEXT_KEYS}
        if self.cross_tokens_per_tile:  # the placeholder stays itself (MllamaProcessor adds a BOS after it)
            return [self.placeholder_id], pixels
        return [int(t) for t in encoded["input_ids"][0]], pixels


_TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids", "cross_attention_mask")
"""What a processor returns of the text; the rest is the encoder's input."""
