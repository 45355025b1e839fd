"""LLaVA (`LlavaForConditionalGeneration`) on torch: a CLIP vision tower, a two-layer projector and
one of our text models (transformers models/llava/modeling_llava.py, read for each point).

An image's features are the tower's hidden states at `vision_feature_layer` (an index, or a list
whose states are concatenated), without the class token under the `default` select strategy (all of
them under `full`), projected to the text model's width by linear, `projector_hidden_act`, linear.
They replace the embeddings of the image's placeholder tokens (the processor writes one per
feature), and the text model runs as it does for text, over the same paged KV cache: the encoder
runs once per image in the prefill that reaches its placeholders (runtime/image_embeds.py), and
decode steps are the text model's own.

Checkpoints in either of transformers' namings load (models/vision_language.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.models.capabilities import TORCH_LLAVA
from tt_backend.models.clip_vision import ClipVisionTower, activation
from tt_backend.models.llama import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
from tt_backend.models.llama_ops import NativeKernelModel
from tt_backend.models.vision_language import VisionLanguageModel

TEXT_MODELS: dict[str, type[LlamaForCausalLM]] = {
    "llama": LlamaForCausalLM, "mistral": MistralForCausalLM, "qwen2": Qwen2ForCausalLM}
"""text_config.model_type → our text model."""
class LlavaProjector(nn.Module):
    def __init__(self, vision_dim: int, text_dim: int, act: str, bias: bool) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(vision_dim, text_dim, bias=bias)
        self.linear_2 = nn.Linear(text_dim, text_dim, bias=bias)
        self.act = activation(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(x)))


class LlavaForConditionalGeneration(VisionLanguageModel, NativeKernelModel):
    capabilities = TORCH_LLAVA
    unread = ("vision_tower.post_layernorm.", "vision_tower.embeddings.position_ids")
    """CLIP's pooled output's LayerNorm (LLaVA reads hidden states before it)."""

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__(hf)
        text, vision = hf["text_config"], hf["vision_config"]
        kind = text.get("model_type", "llama")
        if kind not in TEXT_MODELS:
            raise ValueError(f"text_config.model_type={kind!r} is not supported in LLaVA (known: "
                             f"{', '.join(TEXT_MODELS)})")
        if vision.get("model_type", "clip_vision_model") != "clip_vision_model":
            raise ValueError(f"vision_config.model_type={vision.get('model_type')!r} is not supported in "
                             "LLaVA (known: clip_vision_model)")
        strategy = hf.get("vision_feature_select_strategy", "default")
        if strategy not in ("default", "full"):
            raise ValueError(f"vision_feature_select_strategy={strategy!r} is not supported (default, full)")
        layer = hf.get("vision_feature_layer", -2)
        self.feature_layers: list[int] = list(layer) if isinstance(layer, list) else [layer]
        self.drop_class_token = strategy == "default"
        self.language_model = TEXT_MODELS[kind].from_hf_config(
            {"tie_word_embeddings": hf.get("tie_word_embeddings", False), **text})
        self.vision_tower = ClipVisionTower(vision)
        self.multi_modal_projector = LlavaProjector(
            vision["hidden_size"] * len(self.feature_layers), text["hidden_size"],
            hf.get("projector_hidden_act", "gelu"), bool(hf.get("multimodal_projector_bias", True)))

    def use_native_kernels(self, kernels: CpuKernels, dtype: torch.dtype) -> None:
        self.language_model.use_native_kernels(kernels, dtype)

    def encode_image(self, pixels: object) -> torch.Tensor:
        """[placeholder tokens, text hidden]: one image's projected features, from its processor's
        output (`pixel_values` [1, 3, H, W])."""
        assert isinstance(pixels, dict), "the processor's output for one image"
        table = self.embedding_table
        states = self.vision_tower.hidden_states(pixels["pixel_values"].to(table.device), self.feature_layers)
        if self.drop_class_token:
            states = [s[:, 1:] for s in states]
        features = self.multi_modal_projector(torch.cat(states, dim=-1))
        return features.reshape(-1, features.shape[-1]).to(table.dtype)
