"""Llama 3.2 Vision's calls on a tt-metal generator (tt_backend/runtime/generator_cross.py): each
prefill row's image itself (one a row) and its own page-table row as its cross_page_table; the four
per-row masks its prefill returns kept for its batch slot and sent back at that slot of every decode
step (None at the other rows); and the loader's reading of tt-metal's Mllama generator
(assembly/tt_engine.py `_cross_images`): tokens a tile from max_cross_attn_tokens, one image a
request, the hard-coded image token. Pure logic with small fakes; the calls against the contract
generator's stand-in run in tests/tt/test_images_tt.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from PIL import Image

from tt_backend.assembly.tt_engine import _cross_images
from tt_backend.contract.step import ImageSpan, PlannedRow
from tt_backend.runtime.generator_cross import MASK_NAMES, CrossAttentionCalls


def row(slot: int, picture: Any = None, start: int = 0) -> PlannedRow:
    images = () if picture is None else (ImageSpan("k", 3, 1, cross_tokens=128, picture=picture),)
    return PlannedRow(token_ids=(1, 2, 3, 4), start_position=start, block_ids=(slot,), sample=True, slot=slot,
                      images=images)


def test_a_prefill_hands_each_row_its_picture_and_the_page_table_as_its_cross_table() -> None:
    picture = Image.new("RGB", (40, 30))
    table = torch.tensor([[5, 6], [7, 8]], dtype=torch.int32)
    kwargs = CrossAttentionCalls.prefill_kwargs([row(0, picture), row(1)], table)
    assert kwargs["images"] == [picture, None] and kwargs["images"][0] is picture
    assert kwargs["cross_page_table"] is table


def test_each_slot_gets_back_the_masks_of_its_own_prefill_and_other_rows_none() -> None:
    calls = CrossAttentionCalls()
    masks = [[f"{name}-a", None] for name in MASK_NAMES]  # row 0 (slot 2) saw an image, row 1 (slot 0) none
    logits = torch.zeros(2, 1, 8)
    assert calls.keep([2, 0], (logits, *masks)) is logits
    table = torch.arange(8).reshape(4, 2)
    sent = calls.decode_kwargs([0, 2], table, batch=4)
    assert sent["cross_page_table"] is table
    assert [sent[name] for name in MASK_NAMES] == [[None, None, f"{name}-a", None] for name in MASK_NAMES]
    # slot 2's next request brings its own masks; a slot not decoding this step gets none
    calls.keep([2], (logits[:1], *[[f"{name}-b"] for name in MASK_NAMES]))
    sent = calls.decode_kwargs([2], table, batch=4)
    assert sent["decode_cross_attention_masks"] == [None, None, "decode_cross_attention_masks-b", None]
    assert calls.decode_kwargs([1], table, batch=4)["prefill_cross_attention_masks"] == [None] * 4


def test_a_prefill_without_its_masks_is_a_wrong_generator_form() -> None:
    with pytest.raises(AssertionError, match="four per-row mask lists"):
        CrossAttentionCalls().keep([0], torch.zeros(1, 1, 8))
    with pytest.raises(AssertionError, match="one image a row"):
        two = PlannedRow(token_ids=(1,), start_position=0, block_ids=(0,), sample=True,
                         images=(ImageSpan("a", 0, 1, picture=1), ImageSpan("b", 1, 1, picture=2)))
        CrossAttentionCalls.prefill_kwargs([two], torch.zeros(1, 1, dtype=torch.int32))


def loaded(image_token: int, cross_tokens: int = 128, tiles: int = 4) -> Any:
    vision = SimpleNamespace(max_num_tiles=tiles)
    config = SimpleNamespace(image_token_index=image_token, vision_config=vision)
    return SimpleNamespace(hf_config=config, generator=SimpleNamespace(max_cross_attn_tokens=cross_tokens))


def test_the_loader_reads_tokens_a_tile_and_one_image_a_request_off_the_generator() -> None:
    assert _cross_images(loaded(128256)) == (32, 1)  # 4 tiles of nearest_32(2 x 2 + 1)
    assert _cross_images(loaded(128256, cross_tokens=4 * 1632)) == (1632, 1)  # 11B: tiles of 1601 -> 1632


def test_the_loader_refuses_a_checkpoint_whose_image_token_tt_metal_does_not_look_for() -> None:
    with pytest.raises(ValueError, match="by the token id 128256 .* image_token_index is 49152"):
        _cross_images(loaded(49152))
    with pytest.raises(ValueError, match="max_cross_attn_tokens=130 is not a whole number"):
        _cross_images(loaded(128256, cross_tokens=130))
