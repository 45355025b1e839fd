"""Qwen2-VL and Qwen2.5-VL on torch against HF transformers on tiny random checkpoints
(tests/vision_checkpoints.py), fp32: the vision transformer's merged tokens (Qwen2.5-VL's attends
within 2x2 windows in one block: attending over the whole image there is 4e-3 off), the M-RoPE
positions against HF's `get_rope_index`, and the engine's greedy tokens for prompts with images of
different grids, through a whole prefill, a prefill chunked inside an image and a text-only prompt.
Greedy decode reads shifted positions after an image: without M-RoPE every token differs (max
|logprob - HF| 0.47 on the first prompt)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.vision_checkpoints import (
    Greedy,
    assert_same,
    build_tiny_qwen2_vl,
    engine_greedy,
    hf_vision_greedy,
    picture,
)
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.contract.step import ImageSpan
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.qwen2_vl import Qwen2VLForConditionalGeneration
from tt_backend.runtime.rope_positions import rope_positions

IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
PROMPT = f"<|im_start|>user\n{IMAGE}What is in this picture?<|im_end|>\n<|im_start|>assistant\n"
TWO = f"<|im_start|>user\n{IMAGE}and {IMAGE}Which is brighter?<|im_end|>\n<|im_start|>assistant\n"
SIZES = {1: (40, 30), 2: (30, 100), 3: (90, 90), 4: (160, 150)}
"""Picture sizes by seed: grids (rows x columns of tokens) 2x3, 4x1, 3x3 and 3x4."""


def photo(seed: int) -> bytes:
    return picture(seed, SIZES.get(seed, (40, 30)))


ARCHITECTURES = {"2": "Qwen2VLForConditionalGeneration", "2.5": "Qwen2_5_VLForConditionalGeneration"}


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def qwen_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp(f"tiny_qwen{request.param}_vl")
    build_tiny_qwen2_vl(model_dir, out, version=request.param)
    return out


def hf_inputs(model_dir: Path, text: str, seeds: list[int]) -> tuple[Any, dict[str, torch.Tensor]]:
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from tt_backend.models.processors import load_processor

    rgb = [Image.open(io.BytesIO(photo(s))).convert("RGB") for s in seeds]
    encoded = dict(load_processor(model_dir)(text=[text], images=rgb, return_tensors="pt"))
    hf: Any = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    return hf, encoded


def test_the_vision_transformer_gives_hf_image_features(qwen_dir: Path) -> None:
    from tt_backend.devices.cpu.compute_plan import ComputePlan
    from tt_backend.models.loader import load_model

    ours = load_model(qwen_dir, ComputePlan.resolve(torch.device("cpu"), "float32"))
    assert ours.architecture in ARCHITECTURES.values() and ours.capabilities.takes_images
    for seed, tokens in ((1, 6), (2, 4), (3, 9), (4, 12)):
        hf, encoded = hf_inputs(qwen_dir, IMAGE, [seed])
        with torch.no_grad():
            ref = hf.model.get_image_features(pixel_values=encoded["pixel_values"],
                                              image_grid_thw=encoded["image_grid_thw"]).pooler_output[0]
            mine = ours.module.encode_image({k: encoded[k] for k in ("pixel_values", "image_grid_thw")})
        assert mine.shape == (tokens, 64)
        assert (mine - ref).abs().max().item() < 1e-5


def test_rope_positions_are_hf_get_rope_index(qwen_dir: Path) -> None:
    hf, encoded = hf_inputs(qwen_dir, "Two: " + TWO, [1, 2])
    ids = encoded["input_ids"]
    ref, delta = hf.model.get_rope_index(ids, encoded["mm_token_type_ids"], encoded["image_grid_thw"])
    pad = int(hf.config.image_token_id)
    runs = [i for i, t in enumerate(ids[0].tolist()) if t == pad]
    images = (ImageSpan("a", runs[0], 6, grid=(1, 2, 3)), ImageSpan("b", runs[6], 4, grid=(1, 4, 1)))
    assert len(runs) == 10 and runs[6] > runs[5] + 1  # text between the images
    n = ids.shape[1]
    assert rope_positions(images, 0, n).tolist() == ref[:, 0].tolist()
    # a chunk inside the first image, and generated tokens after the prompt (index + HF's delta)
    assert rope_positions(images, runs[2], 7).tolist() == ref[:, 0, runs[2]:runs[2] + 7].tolist()
    assert rope_positions(images, n, 3).tolist() == [[n + int(delta) + i for i in range(3)]] * 3


@pytest.fixture(scope="module")
def engine(qwen_dir: Path) -> Iterator[LLMEngine]:
    engine = build_engine(EngineConfig(model=str(qwen_dir), dtype="float32", max_model_len=256,
                                       max_num_seqs=4))
    yield engine
    engine.shutdown()


def greedy(engine: LLMEngine, text: str, seeds: list[int], request_id: str, as_text: bool = True) -> Greedy:
    return engine_greedy(engine, text, seeds, request_id, as_text, photo)


def test_greedy_tokens_equal_hf_and_the_same_picture_reads_the_encoder_cache(engine: LLMEngine,
                                                                            qwen_dir: Path) -> None:
    cache = engine.runner.images  # type: ignore[attr-defined]
    ref = hf_vision_greedy(qwen_dir, PROMPT, [photo(1)], 8)
    misses, hits = cache.misses, cache.hits
    assert_same(greedy(engine, PROMPT, [1], "first"), ref)
    assert (cache.misses, cache.hits) == (misses + 1, hits)
    assert_same(greedy(engine, PROMPT, [1], "again", as_text=False), ref)  # as input_ids: a prefix-cache hit
    other = "Once more. " + PROMPT  # no KV block of the first prompt is reused, its encoder output is
    assert_same(greedy(engine, other, [1], "other"), hf_vision_greedy(qwen_dir, other, [photo(1)], 8))
    assert (cache.misses, cache.hits) == (misses + 1, hits + 1)
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


def test_two_images_of_different_grids(engine: LLMEngine, qwen_dir: Path) -> None:
    ref = hf_vision_greedy(qwen_dir, TWO, [photo(2), photo(3)], 8)
    assert_same(greedy(engine, TWO, [2, 3], "two"), ref)


def test_a_text_prompt_on_the_traced_decode_gives_hf_tokens(engine: LLMEngine, qwen_dir: Path) -> None:
    text = "<|im_start|>user\nWhat is a picture?<|im_end|>\n<|im_start|>assistant\n"
    traced = engine.runner.traced_steps  # type: ignore[attr-defined]
    assert_same(greedy(engine, text, [], "text"), hf_vision_greedy(qwen_dir, text, [], 8))
    assert engine.runner.traced_steps > traced  # type: ignore[attr-defined]


def test_a_prefill_chunked_inside_an_image_gives_hf_tokens(qwen_dir: Path) -> None:
    ref = hf_vision_greedy(qwen_dir, TWO, [photo(3), photo(1)], 8)
    chunked = build_engine(EngineConfig(model=str(qwen_dir), dtype="float32", max_model_len=256,
                                        max_num_seqs=2, max_num_batched_tokens=8,
                                        enable_prefix_caching=False))
    try:
        assert_same(greedy(chunked, TWO, [3, 1], "chunked"), ref)
    finally:
        chunked.shutdown()


def test_checkpoint_names_of_both_forms_load_as_ours() -> None:
    names = {"model.language_model.layers.0.mlp.up_proj.weight":
             "language_model.model.layers.0.mlp.up_proj.weight",
             "model.layers.1.self_attn.q_proj.bias": "language_model.model.layers.1.self_attn.q_proj.bias",
             "model.embed_tokens.weight": "language_model.model.embed_tokens.weight",
             "lm_head.weight": "language_model.lm_head.weight",
             "model.visual.blocks.0.attn.qkv.weight": "visual.blocks.0.attn.qkv.weight",
             "visual.merger.mlp.2.bias": "visual.merger.mlp.2.bias"}
    state = {name: torch.zeros(1) for name in names}
    assert Qwen2VLForConditionalGeneration.checkpoint_names(state).keys() == set(names.values())


def test_the_default_dtype_serves_images_on_the_packed_linears(qwen_dir: Path) -> None:
    default = build_engine(EngineConfig(model=str(qwen_dir), max_model_len=256, max_num_seqs=2))
    try:
        ours = greedy(default, PROMPT, [1], "default")
    finally:
        default.shutdown()
    ref = hf_vision_greedy(qwen_dir, PROMPT, [photo(1)], 8)
    assert len(ours.tokens) == 8 and ours.tokens[0] == ref.tokens[0]
    assert abs(ours.logprobs[0] - ref.logprobs[0]) < 0.1
