"""Gemma 3 with its vision tower (`Gemma3ForConditionalGeneration`) on torch: SigLIP, Gemma 3's
projector and our Gemma 3 text model (transformers models/gemma3/modeling_gemma3.py, read for each
point).

An image's features are SigLIP's last hidden state, its patch grid average-pooled to
`mm_tokens_per_image` (a square: 256 in the released models), normed by a Gemma RMSNorm
(`mm_soft_emb_norm`, 1 + weight) and projected by `mm_input_projection_weight` [vision, text].
They replace the embeddings of the image's soft tokens after the text embeddings are scaled (HF
scales the tokens' embeddings, not the features). In prefill an image's tokens attend to each
other both ways (HF's mask from `token_type_ids`: causal, or within the same image), sliding layers
within their window as well: `ForwardBatch.image_ends`, so a prefill chunk holds an image whole
(`ImageSpan.bidirectional`); decode is the text model's own.

Checkpoints in either of transformers' namings load (models/vision_language.py); the head is tied
to the embeddings in the released models.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tt_backend.models.capabilities import TORCH_GEMMA3_VISION
from tt_backend.models.gemma3 import Gemma3ForCausalLM, GemmaRMSNorm
from tt_backend.models.siglip_vision import SiglipVisionTower
from tt_backend.models.vision_language import VisionLanguageModel


class Gemma3Projector(nn.Module):
    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        vision, text = hf["vision_config"], hf["text_config"]
        width = vision["hidden_size"]
        self.mm_input_projection_weight = nn.Parameter(torch.zeros(width, text["hidden_size"]))
        self.mm_soft_emb_norm = GemmaRMSNorm(vision["hidden_size"], vision.get("layer_norm_eps", 1e-6))
        self.patches_per_side = vision["image_size"] // vision["patch_size"]
        tokens = hf.get("mm_tokens_per_image", 256)
        tokens_per_side = int(round(tokens ** 0.5))
        if tokens_per_side ** 2 != tokens or self.patches_per_side % tokens_per_side:
            raise ValueError(f"mm_tokens_per_image={tokens} must be the square of a divisor of the "
                             f"{self.patches_per_side} patches a side")
        self.pool = nn.AvgPool2d(self.patches_per_side // tokens_per_side)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        B, _, D = patches.shape
        grid = patches.transpose(1, 2).reshape(B, D, self.patches_per_side, self.patches_per_side)
        pooled = self.pool(grid).flatten(2).transpose(1, 2)
        return torch.matmul(self.mm_soft_emb_norm(pooled), self.mm_input_projection_weight).type_as(patches)


class Gemma3ForConditionalGeneration(VisionLanguageModel):
    capabilities = TORCH_GEMMA3_VISION
    unread = ("vision_tower.head.",)
    """SigLIP's attention-pooling head (Gemma 3 reads the last hidden state)."""

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__(hf)
        vision = hf["vision_config"]
        if vision.get("model_type", "siglip_vision_model") != "siglip_vision_model":
            raise ValueError(f"vision_config.model_type={vision.get('model_type')!r} is not supported in "
                             "Gemma 3 (known: siglip_vision_model)")
        text = {"tie_word_embeddings": hf.get("tie_word_embeddings", True), **hf["text_config"]}
        self.language_model = Gemma3ForCausalLM.from_hf_config(text)
        self.language_model.bidirectional_images = True
        self.vision_tower = SiglipVisionTower(vision)
        self.multi_modal_projector = Gemma3Projector(hf)

    def encode_image(self, pixels: object) -> torch.Tensor:
        """[mm_tokens_per_image, text hidden]: one image's features, from its processor's output."""
        assert isinstance(pixels, dict), "the processor's output for one image"
        table = self.embedding_table
        features = self.multi_modal_projector(self.vision_tower(pixels["pixel_values"].to(table.device)))
        return features.reshape(-1, features.shape[-1]).to(table.dtype)
