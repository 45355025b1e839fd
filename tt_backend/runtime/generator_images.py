"""A prefill's images as a multimodal tt-metal generator takes them."""

from __future__ import annotations

from typing import Any

from tt_backend.contract.step import PlannedRow


def image_inputs(rows: list[PlannedRow]) -> dict[str, list[Any]]:
    """The rows' images as the Tenstorrent plugin passes them to a multimodal prefill_forward
    (model_runner.py `_gather_multi_modal_inputs`): per row None, or its images' `pixel_values` (and
    `image_grid_thw`, each of shape (3,), where the processor gives one). A row prefills its whole
    prompt (the generators take no start_pos past 0), so its images are all of the request's."""
    inputs: dict[str, list[Any]] = {"pixel_values": []}
    grids: list[Any] = []
    for row in rows:
        assert not row.images or row.start_position == 0, "a prefill with images starts at position 0"
        pixels: list[dict[str, Any]] = []
        for image in row.images:
            assert isinstance(image.pixels, dict), "an image's processor output"
            pixels.append(image.pixels)
        inputs["pixel_values"].append([p["pixel_values"] for p in pixels] if pixels else None)
        has_grid = bool(pixels) and all("image_grid_thw" in p for p in pixels)
        grids.append([p["image_grid_thw"].reshape(3) for p in pixels] if has_grid else None)
    if any(grid is not None for grid in grids):
        inputs["image_grid_thw"] = grids
    return inputs
