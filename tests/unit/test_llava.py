"""LLaVA on torch against HF transformers on a tiny random checkpoint (tests/vision_checkpoints.py),
fp32: the encoder's features, and the engine's greedy tokens for prompts with images, through a
whole prefill, a prefill chunked across an image's placeholders, the encoder cache and the prefix
cache (whose block hashes hold the image: the same prompt with another picture shares no image
block). A prompt whose placeholders do not pair with its images is refused naming `image`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.vision_checkpoints import (
    IMAGE_TOKENS,
    assert_same,
    build_tiny_llava,
    encoders,
    engine_greedy,
    hf_vision_greedy,
    picture,
)
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.llava import LlavaForConditionalGeneration
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.images import ImageInput, ImageLimits, decode_image

PROMPT = "USER: <image>\nWhat is in this picture?\nASSISTANT:"
TWO = "USER: <image>\nand <image>\nWhich is brighter?\nASSISTANT:"
PAIRING = "write one '<image>' where each image goes (a chat request's image parts place theirs)"
GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("tiny_llava")
    build_tiny_llava(model_dir, out)
    return out


def image(seed: int) -> ImageInput:
    return decode_image(picture(seed), "image", ImageLimits())


def test_the_encoder_gives_hf_image_features(llava_dir: Path) -> None:
    ours, mine, ref = encoders(llava_dir)
    assert ours.architecture == "LlavaForConditionalGeneration" and ours.capabilities.takes_images
    assert mine.shape == (IMAGE_TOKENS, 64)
    assert (mine - ref).abs().max().item() < 1e-5


@pytest.fixture(scope="module")
def engine(llava_dir: Path) -> Iterator[LLMEngine]:
    engine = build_engine(EngineConfig(model=str(llava_dir), dtype="float32", max_model_len=256,
                                       max_num_seqs=4))
    yield engine
    engine.shutdown()


def test_greedy_tokens_equal_hf_and_the_same_picture_reads_the_encoder_cache(engine: LLMEngine,
                                                                            llava_dir: Path) -> None:
    cache = engine.runner.images  # type: ignore[attr-defined]
    ref = hf_vision_greedy(llava_dir, PROMPT, [picture(1)], 8)
    misses, hits = cache.misses, cache.hits
    assert_same(engine_greedy(engine, PROMPT, [1], "first"), ref)
    assert (cache.misses, cache.hits) == (misses + 1, hits)
    assert_same(engine_greedy(engine, PROMPT, [1], "again", as_text=False), ref)  # as input_ids
    assert (cache.misses, cache.hits) == (misses + 1, hits + 1)
    other = hf_vision_greedy(llava_dir, PROMPT, [picture(2)], 8)
    assert other.tokens != ref.tokens  # the picture matters; the first one's cached prefix is not reused
    assert_same(engine_greedy(engine, PROMPT, [2], "other"), other)
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


def test_two_images_in_one_prompt(engine: LLMEngine, llava_dir: Path) -> None:
    ref = hf_vision_greedy(llava_dir, TWO, [picture(4), picture(5)], 8)
    assert ref.prompt.count(ref.prompt[4]) >= 2 * IMAGE_TOKENS
    assert_same(engine_greedy(engine, TWO, [4, 5], "two"), ref)
    adjacent = "USER: <image><image>\nWhich is brighter?\nASSISTANT:"  # two runs of image tokens, joined
    assert_same(engine_greedy(engine, adjacent, [4, 5], "adjacent", as_text=False),
                hf_vision_greedy(llava_dir, adjacent, [picture(4), picture(5)], 8))


def test_a_prefill_chunked_through_the_image_gives_hf_tokens(llava_dir: Path) -> None:
    ref = hf_vision_greedy(llava_dir, PROMPT, [picture(6)], 8)
    chunked = build_engine(EngineConfig(model=str(llava_dir), dtype="float32", max_model_len=256,
                                        max_num_seqs=2, max_num_batched_tokens=16,
                                        enable_prefix_caching=False))
    try:
        assert_same(engine_greedy(chunked, PROMPT, [6], "chunked"), ref)
    finally:
        chunked.shutdown()


@pytest.mark.parametrize(("text", "seeds", "message"), [
    ("USER: What is this?\nASSISTANT:", [1], "image: the prompt holds 0 image placeholder(s) ('<image>') and "
     f"1 image(s) came with it; {PAIRING}"),
    (TWO, [1], "image: the prompt holds 2 image placeholder(s) ('<image>') and 1 image(s) came with it; "
     f"{PAIRING}"),
])
def test_placeholders_that_do_not_pair_with_the_images_are_refused(engine: LLMEngine, text: str,
                                                                    seeds: list[int], message: str) -> None:
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    with pytest.raises(ValueError) as info:
        engine.add_request("bad", ids, GREEDY, lambda out: None, tuple(image(s) for s in seeds))
    assert str(info.value) == message
    assert not engine.has_unfinished


def test_checkpoint_names_of_every_form_load_as_ours() -> None:
    names = {"model.language_model.layers.0.mlp.up_proj.weight": "language_model.model.layers.0.mlp.up_proj."
             "weight",
             "language_model.model.norm.weight": "language_model.model.norm.weight",
             "lm_head.weight": "language_model.lm_head.weight",
             "language_model.lm_head.weight": "language_model.lm_head.weight",
             "model.vision_tower.vision_model.pre_layrnorm.bias": "vision_tower.pre_layrnorm.bias",
             "vision_tower.vision_model.encoder.layers.1.mlp.fc1.bias":
                 "vision_tower.encoder.layers.1.mlp.fc1.bias",
             "vision_tower.embeddings.class_embedding": "vision_tower.embeddings.class_embedding",
             "model.multi_modal_projector.linear_1.bias": "multi_modal_projector.linear_1.bias"}
    dropped = ["vision_tower.vision_model.post_layernorm.weight", "model.vision_tower.post_layernorm.bias"]
    state = {name: torch.zeros(1) for name in [*names, *dropped]}
    assert sorted(LlavaForConditionalGeneration.checkpoint_names(state)) == sorted(set(names.values()))


def test_the_default_dtype_serves_images_on_the_packed_linears(llava_dir: Path) -> None:
    # bf16 where the CPU has the kernels for it: the vision tower's and projector's linears are the
    # kernels' too. The first token (the prefill's, image included) is HF fp32's, its logprob close.
    default = build_engine(EngineConfig(model=str(llava_dir), max_model_len=256, max_num_seqs=2))
    try:
        ours = engine_greedy(default, PROMPT, [1], "default")
    finally:
        default.shutdown()
    ref = hf_vision_greedy(llava_dir, PROMPT, [picture(1)], 8)
    assert len(ours.tokens) == 8 and ours.tokens[0] == ref.tokens[0]
    assert abs(ours.logprobs[0] - ref.logprobs[0]) < 0.1
