"""Llama 3.2 Vision's calls on a tt-metal generator (TTCallForms.cross_attention), as tt-metal's
`MllamaForConditionalGeneration` takes them (models/tt_transformers/tt/generator_vllm.py, the newest
found, and Generator.prefill_forward_llama_vision / decode_forward_llama_vision in generator.py)
and as the Tenstorrent vLLM fork's V0 runner sent them (vllm/worker/tt_model_runner.py, branch
dev_feb_2026_v0_final: the only caller that served it; the V1 plugin refuses encoder-decoder models):

    prefill_forward(tokens, images=[image or None a row], page_table, kv_cache, prompt_lens,
                    cross_page_table [rows, W])
        ─▶ (logits [rows, 1, V], prefill_xattn_masks, prefill_full_text_masks,
            decode_xattn_masks, decode_full_text_masks)      each a list, one entry a row
    decode_forward(tokens=, start_pos=, page_table=, kv_cache=, cross_page_table=,
                   the four mask lists: batch row i's entry is what row i's request's prefill returned,
                   None for a row without an image or without a request, enable_trace, read_from_device)

A row's image is the picture itself (tt-metal runs its own image transform), one a row (tt-metal
asserts it). The generator writes the image's cross-attention keys and values into the
cross-attention layers' caches (its flat per-layer KV list counts them) through the row's
`cross_page_table`, over its first max_cross_attn_tokens (vision_max_num_chunks x nearest_32 of
the tokens a tile). Those layers hold no self-attention KV, so the row's own blocks serve as its
cross blocks: the request holds at least that many from admission (ImageSpan.cross_tokens, its
kv_floor), and they are counted and freed with the rest. Decode sends the same table.
"""

from __future__ import annotations

from typing import Any

import torch

from tt_backend.contract.step import PlannedRow

MASK_NAMES = ("prefill_cross_attention_masks", "prefill_full_text_row_masked_out_mask",
              "decode_cross_attention_masks", "decode_full_text_row_masked_out_mask")
"""decode_forward's names of the four lists, in the order prefill_forward returns them."""


class CrossAttentionCalls:
    """The masks each batch slot's request got from its prefill, sent back with its decode steps."""

    def __init__(self) -> None:
        self.masks: dict[int, tuple[Any, ...]] = {}

    @staticmethod
    def prefill_kwargs(rows: list[PlannedRow], table: torch.Tensor) -> dict[str, Any]:
        images: list[Any] = []
        for row in rows:
            assert not row.images or row.start_position == 0, "a prefill with an image starts at position 0"
            assert len(row.images) <= 1, "tt-metal's Mllama takes one image a row (ImagePrompts.max_images)"
            pictures = [image.picture for image in row.images]
            assert all(picture is not None for picture in pictures), "an image span without its picture"
            images.append(pictures[0] if pictures else None)
        return {"images": images, "cross_page_table": table}

    def keep(self, slots: list[int], out: Any) -> Any:
        """The logits of prefill_forward's 5-tuple; each row's four masks kept for its slot."""
        assert isinstance(out, tuple) and len(out) == 1 + len(MASK_NAMES), \
            "a cross-attention prefill returns (logits, and four per-row mask lists)"
        logits, *lists = out
        for lst in lists:
            assert len(lst) == len(slots), f"a mask list of {len(lst)} entries for {len(slots)} rows"
        for k, slot in enumerate(slots):
            self.masks[slot] = tuple(lst[k] for lst in lists)
        return logits

    def decode_kwargs(self, slots: list[int], table: torch.Tensor, batch: int) -> dict[str, Any]:
        """decode_forward's masks (one entry per batch row) and cross_page_table for the rows at `slots`."""
        lists: list[list[Any]] = [[None] * batch for _ in MASK_NAMES]
        for slot in slots:
            for lst, mask in zip(lists, self.masks.get(slot, (None,) * len(MASK_NAMES)), strict=True):
                lst[slot] = mask
        return {**dict(zip(MASK_NAMES, lists, strict=True)), "cross_page_table": table}
