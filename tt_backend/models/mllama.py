"""Llama 3.2 Vision (`MllamaForConditionalGeneration`) on torch: the tiled vision tower and projector
(models/mllama_vision.py) and a Llama text model whose layers at `cross_attention_layers` are
cross-attention layers (models/mllama_cross.py) reading the request's images (transformers
models/mllama/modeling_mllama.py, read for each point).

The images never enter the token stream: a prompt holds one `<|image|>` token per image, embedded as
the text model embeds it (its table has `vocab_size + 8` rows; the image token's id is `vocab_size`,
past the head). An image's encoder output (`encode_image`: every tile's tokens, padding tiles too,
projected to the text width) becomes each cross-attention layer's keys and values, written once into
that layer's paged cache at positions [0, n) of the request's blocks (the self-attention layers' caches
hold the text there; a cross-attention layer has no self-attention, so its cache is free for them),
in the prefill step that reaches the image's placeholder (`ForwardBatch.cross`, runtime/cross_images.py);
every later step of the request reads them from there. A row without images skips the
cross-attention layers, as HF does for a request without images.

Checkpoints in either of transformers' namings load (`language_model.model.*` or
`model.language_model.*`, and so on); the head is not tied.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tt_backend.contract.forward_batch import CrossInputs, ForwardBatch
from tt_backend.devices.cpu.kernels import CpuKernels
from tt_backend.models.capabilities import TORCH_MLLAMA
from tt_backend.models.llama import DecoderLayer, LlamaConfig, LlamaForCausalLM, RMSNorm, Rotary
from tt_backend.models.llama_ops import NativeKernelModel, TorchOps
from tt_backend.models.mllama_cross import MllamaCrossAttentionLayer
from tt_backend.models.mllama_vision import MllamaVisionTower, projector
from tt_backend.models.paged_kv import additive_mask, gather_kv
from tt_backend.models.vision_language import VisionLanguageModel

IMAGE_TOKEN_ROWS = 8
"""Rows the text model's embedding table has past its vocabulary (HF: `vocab_size + 8`)."""


class MllamaTextModel(nn.Module):
    def __init__(self, cfg: LlamaConfig, text: dict[str, Any], cross: set[int]) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size + IMAGE_TOKEN_ROWS, cfg.hidden_size)
        self.layers = nn.ModuleList(MllamaCrossAttentionLayer(text) if i in cross else DecoderLayer(cfg)
                                    for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = Rotary(cfg.head_dim, cfg.rope)


class MllamaTextForCausalLM(LlamaForCausalLM):
    """HF's MllamaForCausalLM over the paged cache: Llama layers, and cross-attention layers at the
    config's `cross_attention_layers`."""

    def __init__(self, cfg: LlamaConfig, text: dict[str, Any]) -> None:
        nn.Module.__init__(self)  # LlamaForCausalLM's attributes, its layers Mllama's
        cross = set(text.get("cross_attention_layers") or ())
        if not cross or not all(0 <= i < cfg.num_layers for i in cross):
            raise ValueError(f"cross_attention_layers={sorted(cross)} must name some of the "
                             f"{cfg.num_layers} layers")
        self.config = cfg
        self.model = MllamaTextModel(cfg, text, cross)  # type: ignore[assignment]
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.ops = TorchOps()

    def forward(self, batch: ForwardBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(batch.input_ids)
        rope = self.model.rotary(batch.positions, x.dtype)
        mask = None if self.ops.attends_in_place(batch) else additive_mask(
            batch, batch.block_tables.shape[1] * kv_cache.shape[3], x.dtype)
        residual: torch.Tensor | None = None
        for i, layer in enumerate(self.model.layers):
            if isinstance(layer, MllamaCrossAttentionLayer):
                if batch.cross is not None:  # no row has images: HF skips the layer
                    stream = x if residual is None else x + residual
                    x, residual = cross_attend(layer, stream, kv_cache[i], batch.cross), None
                continue
            x, residual = layer(x, residual, rope, kv_cache[i], batch, mask)
        rows = (torch.arange(x.shape[0], device=x.device), batch.logits_indices)
        last = x[rows] if residual is None else x[rows] + residual[rows]
        return self.lm_head(self.model.norm(last)).float()


def cross_attend(layer: MllamaCrossAttentionLayer, x: torch.Tensor, kv: torch.Tensor,
                 cross: CrossInputs) -> torch.Tensor:
    """x [B, T, hidden] through the layer, each row against its own images' keys and values (written
    first where this step reaches an image); a row without images passes through."""
    if cross.features is not None and cross.slots is not None:
        k, v = layer.cross_kv(cross.features.to(x.dtype))
        flat = kv.view(2, -1, kv.shape[-2], kv.shape[-1])  # [2, blocks * block_size, kv_heads, head_dim]
        flat[0].index_copy_(0, cross.slots, k.to(kv.dtype))
        flat[1].index_copy_(0, cross.slots, v.to(kv.dtype))
    keys, values = gather_kv(kv, cross.tables)  # [B, kv_heads, W * block_size, head_dim]
    out = x.clone()
    for b, n in enumerate(cross.lens.tolist()):
        if n:
            out[b] = layer(x[b], keys[b, :, :n].transpose(0, 1).to(x.dtype),
                           values[b, :, :n].transpose(0, 1).to(x.dtype), cross.sees[b, :, :n])
    return out


class MllamaForConditionalGeneration(VisionLanguageModel, NativeKernelModel):
    capabilities = TORCH_MLLAMA
    renames = (("model.language_model.", "language_model.model."),
               ("model.vision_model.", "vision_model."),
               ("model.multi_modal_projector.", "multi_modal_projector."),
               ("lm_head.", "language_model.lm_head."))

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__(hf)
        text, vision = hf["text_config"], hf["vision_config"]
        image_token, vocab = hf.get("image_token_index", text["vocab_size"]), text["vocab_size"]
        if not 0 <= image_token < vocab + IMAGE_TOKEN_ROWS:
            raise ValueError(f"image_token_index={image_token} is outside the text model's embedding table "
                             f"[0, {vocab + IMAGE_TOKEN_ROWS}) (the vocabulary and {IMAGE_TOKEN_ROWS} rows "
                             "past it)")
        cfg = LlamaConfig.from_hf({"tie_word_embeddings": False, **text})
        self.language_model = MllamaTextForCausalLM(cfg, text)
        self.vision_model = MllamaVisionTower(vision)
        self.multi_modal_projector = projector(hf)

    @property
    def cross_tokens_per_tile(self) -> int:
        """An image's tokens in the cross-attention KV per tile (its patches and class token)."""
        return self.vision_model.num_patches

    def use_native_kernels(self, kernels: CpuKernels, dtype: torch.dtype) -> None:
        self.language_model.use_native_kernels(kernels, dtype)

    def encode_image(self, pixels: object) -> torch.Tensor:
        """[tiles x tokens a tile, text hidden]: one image's projected features, every tile's (padding
        tiles too), from its processor's output (`pixel_values` [1, 1, tiles, 3, H, W],
        `aspect_ratio_ids` [1, 1], `aspect_ratio_mask` [1, 1, tiles])."""
        assert isinstance(pixels, dict), "the processor's output for one image"
        table = self.embedding_table
        weight = self.vision_model.patch_embedding.weight
        features = self.vision_model(pixels["pixel_values"].flatten(0, 1).to(weight.device, weight.dtype),
                                     pixels["aspect_ratio_ids"].flatten(0, 1).to(weight.device),
                                     pixels["aspect_ratio_mask"].flatten(0, 1).to(weight.device))
        out = self.multi_modal_projector(features)
        return out.reshape(-1, out.shape[-1]).to(table.dtype)
