"""The host numbers of a vision-language contract generator: HF transformers' Qwen2.5-VL, Gemma 3 or Mllama
(fp32, eval, no_grad; never our model code) over a row's whole context with its images, as HFReference is for
text (host_compute.py).

A prefill runs the row's tokens with its images (`pixel_values`, `image_grid_thw` as the generator
was given them) and keeps HF's cache; a decode extends that cache at the rotary position the
generator's caller gave it: the row's index plus its `rope_delta` (M-RoPE: text after an image sits
at a position shifted by the image), so a caller that sends no delta, or another row's, gets other
tokens than HF's. A decode whose cache is gone is refused rather than recomputed without its images.
Sequences are keyed by the token cache's prefix hashes, which hold no image: two live rows with the
same tokens and different images would share a key (the tests give each its own prompt).
"""

from __future__ import annotations

import inspect
import sys
from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import Any

import torch

host = sys.modules["tt_contract_llama_host"]  # host_compute.py, loaded by contract_core.py first


@cache
def hf_vision_model(path: str) -> Any:
    from transformers import AutoModelForImageTextToText
    return AutoModelForImageTextToText.from_pretrained(Path(path), dtype=torch.float32).eval()


class VisionReference(host.HFReference):  # type: ignore[misc, name-defined]
    def __init__(self, path: str) -> None:  # HFReference's, over HF's vision-language model
        self.model = hf_vision_model(path)
        self.vocab_size: int = self.model.config.get_text_config().vocab_size
        self.image_token_id: int = int(self.model.config.image_token_id)
        self._states: OrderedDict[int, Any] = OrderedDict()
        # transformers 5 names the KV cache `cache` (in and out); older ones `past_key_values`
        self._cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters \
            else "past_key_values"

    def rope_delta(self, tokens: list[int], image_grid_thw: torch.Tensor | None = None) -> int:
        """HF's mrope_position_deltas of the row (get_rope_index; 0 for a row without images)."""
        if image_grid_thw is None:
            return 0
        ids = torch.tensor([tokens])
        _, delta = self.model.model.get_rope_index(ids, (ids == self.image_token_id).long(), image_grid_thw)
        return int(delta.reshape(-1)[0])

    @torch.no_grad()
    def prefill(self, tokens: list[int], last_hash: int, pixel_values: torch.Tensor | None = None,
                image_grid_thw: torch.Tensor | None = None) -> torch.Tensor:
        ids = torch.tensor([tokens])
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                  **self._image_inputs(ids, pixel_values, image_grid_thw)}
        out = self.model(**inputs, use_cache=True)
        self._keep(last_hash, getattr(out, self._cache_arg))
        return out.logits[0, -1].float()

    def _image_inputs(self, ids: torch.Tensor, pixel_values: torch.Tensor | None,
                      image_grid_thw: torch.Tensor | None) -> dict[str, Any]:
        """What HF's model takes beside a prefill's ids: Qwen2.5-VL's images and their token marks."""
        if pixel_values is None:
            return {}
        return {"pixel_values": pixel_values, "image_grid_thw": image_grid_thw,
                "mm_token_type_ids": (ids == self.image_token_id).long()}

    def _step_inputs(self, token: int, index: int, rope_delta: int) -> dict[str, Any]:
        """A decode's inputs: M-RoPE positions at the token's index plus the row's delta."""
        position = torch.full((3, 1, 1), index + rope_delta)
        return {"input_ids": torch.tensor([[token]]), "position_ids": position}

    @torch.no_grad()
    def decode(self, context: list[int], token: int, context_hash: int, new_hash: int,
               rope_delta: int = 0) -> torch.Tensor:
        state = self._states.pop(context_hash, None)
        if state is None:
            raise RuntimeError("the host model's cache of this sequence is gone (too many live sequences); "
                               "a vision row cannot be recomputed without its images")
        out = self.model(**self._step_inputs(token, len(context), rope_delta), use_cache=True,
                         **{self._cache_arg: state})
        self._keep(new_hash, getattr(out, self._cache_arg))
        return out.logits[0, -1].float()


class Gemma3Reference(VisionReference):
    """HF's Gemma 3 (Gemma3ForConditionalGeneration): a prefill marks its image tokens by
    `token_type_ids` (HF's mask lets an image's tokens see each other both ways); positions are plain
    indices, so a decode takes no delta."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.mm_tokens_per_image: int = int(self.model.config.mm_tokens_per_image)

    def rope_delta(self, tokens: list[int], image_grid_thw: torch.Tensor | None = None) -> int:
        raise NotImplementedError("Gemma 3 has no M-RoPE")

    def _image_inputs(self, ids: torch.Tensor, pixel_values: torch.Tensor | None,
                      image_grid_thw: torch.Tensor | None) -> dict[str, Any]:
        marks = {"token_type_ids": (ids == self.image_token_id).long()}
        return marks if pixel_values is None else {**marks, "pixel_values": pixel_values}

    def _step_inputs(self, token: int, index: int, rope_delta: int) -> dict[str, Any]:
        ids = torch.tensor([[token]])
        return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids)}


class MllamaReference(VisionReference):
    """HF's Llama 3.2 Vision (MllamaForConditionalGeneration): a prefill takes the row's image as
    transformers' MllamaImageProcessor makes it (pixel_values, aspect_ratio_ids, aspect_ratio_mask)
    and the cross_attention_mask MllamaProcessor builds from the ids (get_cross_attention_token_mask:
    from the image token on); a decode's token sees what the sequence's last token saw (HF's generate
    repeats the mask's last row), through the cross-attention keys and values the prefill cached."""

    def __init__(self, path: str) -> None:
        from transformers import AutoProcessor
        super().__init__(path)
        self.processor = AutoProcessor.from_pretrained(Path(path))
        self._rows: dict[int, torch.Tensor | None] = {}
        """The cross_attention_mask row of each kept sequence's last token (None: it has no image)."""
        self._step_row: torch.Tensor | None = None

    @torch.no_grad()
    def prefill(self, tokens: list[int], last_hash: int, pixel_values: torch.Tensor | None = None,
                image_grid_thw: torch.Tensor | None = None, picture: Any = None) -> torch.Tensor:
        from transformers.models.mllama.processing_mllama import (
            convert_sparse_cross_attention_mask_to_dense,
            get_cross_attention_token_mask,
        )
        ids = torch.tensor([tokens])
        inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        row = None
        if picture is not None:
            images = self.processor.image_processor(images=[[picture]], return_tensors="pt")
            tiles = images.pop("num_tiles")
            sparse = [get_cross_attention_token_mask(tokens, self.image_token_id)]
            dense = convert_sparse_cross_attention_mask_to_dense(
                sparse, num_tiles=tiles, max_num_tiles=self.processor.image_processor.max_image_tiles,
                length=len(tokens))
            mask = torch.as_tensor(dense)
            inputs.update({**dict(images), "cross_attention_mask": mask})
            row = mask[:, -1:]
        out = self.model(**inputs, use_cache=True)
        self._keep(last_hash, getattr(out, self._cache_arg))
        self._rows[last_hash] = row
        return out.logits[0, -1].float()

    def _step_inputs(self, token: int, index: int, rope_delta: int) -> dict[str, Any]:
        inputs: dict[str, Any] = {"input_ids": torch.tensor([[token]])}
        if self._step_row is not None:
            inputs["cross_attention_mask"] = self._step_row
        return inputs

    def decode(self, context: list[int], token: int, context_hash: int, new_hash: int,
               rope_delta: int = 0) -> torch.Tensor:
        self._step_row = self._rows.pop(context_hash, None)
        logits = super().decode(context, token, context_hash, new_hash, rope_delta)
        self._rows[new_hash] = self._step_row
        return logits
