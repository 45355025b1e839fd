"""Llama 3.2 Vision's tiled vision tower (models/mllama_vision.py) against HF transformers'
MllamaVisionModel on a tiny random config, fp32: two images of different tile grids cut by
transformers' MllamaImageProcessor (one using 3 of 4 tiles, one all 4), every parameter random
(the gates too, so each gated path counts), HF's state dict loaded strictly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tt_backend.models.mllama_vision import MllamaVisionTower, max_aspect_ratio_id, projector

VISION: dict[str, Any] = {
    "hidden_size": 32, "attention_heads": 4, "intermediate_size": 64, "num_hidden_layers": 4,
    "num_global_layers": 2, "image_size": 28, "patch_size": 14, "max_num_tiles": 4, "num_channels": 3,
    "intermediate_layers_indices": [0, 2], "vision_output_dim": 96, "norm_eps": 1e-5, "hidden_act": "gelu",
}


def hf_tower() -> Any:
    from transformers import MllamaVisionConfig, MllamaVisionModel

    torch.manual_seed(0)
    model = MllamaVisionModel(MllamaVisionConfig(**VISION, attn_implementation="eager")).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def processed() -> dict[str, torch.Tensor]:
    from PIL import Image
    from transformers import MllamaImageProcessor

    rng = np.random.default_rng(1)
    wide = Image.fromarray(rng.integers(0, 255, (30, 70, 3), dtype=np.uint8))  # a 1 x 3 grid: 3 tiles of 4
    square = Image.fromarray(rng.integers(0, 255, (60, 60, 3), dtype=np.uint8))  # 2 x 2
    processor = MllamaImageProcessor(size={"height": 28, "width": 28}, max_image_tiles=4)
    return processor(images=[[wide, square]], return_tensors="pt")


@pytest.fixture(scope="module")
def towers() -> tuple[Any, MllamaVisionTower]:
    hf = hf_tower()
    ours = MllamaVisionTower(VISION).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)
    return hf, ours


def test_the_processor_cuts_the_images_into_different_tile_grids() -> None:
    inputs = processed()
    assert tuple(inputs["pixel_values"].shape) == (1, 2, 4, 3, 28, 28)
    assert inputs["aspect_ratio_mask"].tolist() == [[[1, 1, 1, 0], [1, 1, 1, 1]]]
    assert inputs["aspect_ratio_ids"].tolist()[0][0] != inputs["aspect_ratio_ids"].tolist()[0][1]


def test_features_equal_hf(towers: tuple[Any, MllamaVisionTower]) -> None:
    hf, ours = towers
    inputs = processed()
    with torch.no_grad():
        pixels, ids, mask = inputs["pixel_values"], inputs["aspect_ratio_ids"], inputs["aspect_ratio_mask"]
        ref = hf(pixels, ids, mask).last_hidden_state
        mine = ours(pixels[0], ids[0], mask[0])
    assert ref.shape == (1, 2, 4, 5, 96) and mine.shape == (2, 4, 5, 96) and ours.output_dim == 96
    assert (mine - ref[0]).abs().max().item() < 1e-5
    assert ref.abs().mean().item() > 0.1  # not a degenerate (all-zero) output


def test_each_image_is_its_own_batch_row(towers: tuple[Any, MllamaVisionTower]) -> None:
    """An image's features do not depend on the other images of the call."""
    _, ours = towers
    inputs = processed()
    pixels, ids = inputs["pixel_values"][0], inputs["aspect_ratio_ids"][0]
    mask = inputs["aspect_ratio_mask"][0]
    with torch.no_grad():
        both = ours(pixels, ids, mask)
        alone = ours(pixels[1:], ids[1:], mask[1:])
    assert (both[1] - alone[0]).abs().max().item() < 1e-6


def test_a_tower_without_intermediate_layers_gives_the_global_output_alone() -> None:
    tower = MllamaVisionTower({**VISION, "intermediate_layers_indices": []}).eval()
    inputs = processed()
    with torch.no_grad():
        out = tower(inputs["pixel_values"][0], inputs["aspect_ratio_ids"][0], inputs["aspect_ratio_mask"][0])
    assert out.shape == (2, 4, 5, 32) and tower.output_dim == 32


def test_the_projector_and_config_defaults() -> None:
    hf = {"vision_config": VISION, "text_config": {"hidden_size": 48}}
    linear = projector(hf)
    assert (linear.in_features, linear.out_features) == (96, 48) and linear.bias is not None
    assert max_aspect_ratio_id(VISION) == 8  # HF's default list of 8 grids for 4 tiles
    assert max_aspect_ratio_id({**VISION, "supported_aspect_ratios": [[1, 1], [1, 2]]}) == 2


def test_wrong_shapes_are_refused_by_name(towers: tuple[Any, MllamaVisionTower]) -> None:
    _, ours = towers
    one = torch.ones(1, dtype=torch.long)
    with pytest.raises(ValueError, match="pixel_values hold 3 tiles an image; the tower takes 4"):
        ours(torch.zeros(1, 3, 3, 28, 28), one, torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"pixel_values of \(42, 42\) give 9 patches a tile"):
        ours(torch.zeros(1, 4, 3, 42, 42), one, torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="intermediate_layers_indices=\\[4\\]"):
        MllamaVisionTower({**VISION, "intermediate_layers_indices": [4]})
