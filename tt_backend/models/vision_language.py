"""What our vision-language models share: a vision tower and projector in front of one of our text
models (`language_model`), whose forward, spec and paged KV cache are the model's own, and the
names their checkpoints give the parts.

Checkpoints name the parts `language_model.model.*`, `language_model.lm_head.*`, `vision_tower.*`
(`vision_tower.vision_model.*` in llava-hf's and Google's) and `multi_modal_projector.*`, or, as
transformers 5 holds them in memory, `model.language_model.*`, `model.vision_tower.*`,
`model.multi_modal_projector.*` and `lm_head.*`: both load (`checkpoint_names`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.models.spec import ModelSpec

_RENAMES = (("model.language_model.", "language_model.model."), ("model.vision_tower.", "vision_tower."),
            ("model.multi_modal_projector.", "multi_modal_projector."),
            ("lm_head.", "language_model.lm_head."), ("vision_tower.vision_model.", "vision_tower."))


class VisionLanguageModel(nn.Module):
    language_model: Any
    """One of our text models (a LlamaForCausalLM or Gemma3ForCausalLM)."""
    unread: tuple[str, ...] = ()
    """Checkpoint names (prefixes) of weights the model never reads, dropped at load."""
    renames: tuple[tuple[str, str], ...] = _RENAMES
    """(checkpoint prefix, ours), applied in order."""
    tied_weights = ("language_model.lm_head.weight", "language_model.model.embed_tokens.weight")
    """(the head, the embedding it shares when the text model ties them)."""

    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any]) -> VisionLanguageModel:
        return cls(hf)

    @classmethod
    def checkpoint_names(cls, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Every form of the checkpoint's names as ours, without the weights never read."""
        out: dict[str, torch.Tensor] = {}
        for name, value in state.items():
            for old, new in cls.renames:  # in order: model.vision_tower.vision_model.x → vision_tower.x
                if name.startswith(old):
                    name = new + name[len(old):]
            if not name.startswith(cls.unread):
                out[name] = value
        return out

    @property
    def spec(self) -> ModelSpec:
        spec: ModelSpec = self.language_model.spec
        return spec

    @property
    def embedding_table(self) -> torch.Tensor:
        """The text model's token embeddings: where and in what dtype it computes (linear layers may
        be packed for the CPU's kernels and hold no `.weight`)."""
        table: torch.Tensor = self.language_model.model.embed_tokens.weight
        return table

    def forward(self, batch: ForwardBatch, kv_cache: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.language_model(batch, kv_cache)
        return logits
