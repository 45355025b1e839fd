"""Llama 3.2 Vision (MllamaForConditionalGeneration) served by the engine against HF transformers on a
tiny random checkpoint (tests/vision_checkpoints.py), fp32: greedy tokens and their logprobs for a
chat prompt with an image, with text before the image (tokens that see no image), with two images of
different tile counts, and with none (the cross-attention layers skipped); its images' keys and
values held in the request's own blocks and freed with it; two requests with the same picture
sharing one encoder run; a request whose images would outgrow max_model_len refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.vision_checkpoints import (
    MLLAMA_TILE_TOKENS,
    assert_same,
    build_tiny_mllama,
    engine_greedy,
    hf_vision_greedy,
    picture,
)
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.images import ImageLimits, decode_image

ONE = "<|im_start|>user\n<|image|>What is in this picture?<|im_end|>\n<|im_start|>assistant\n"
AFTER = "<|im_start|>user\nHere is a picture: <|image|> What is in it?<|im_end|>\n<|im_start|>assistant\n"
TWO = "<|im_start|>user\n<|image|>and then<|image|>: which is brighter?<|im_end|>\n<|im_start|>assistant\n"
TEXT = "<|im_start|>user\nWhat is a lighthouse?<|im_end|>\n<|im_start|>assistant\n"
WIDE = (70, 30)
"""A picture of 3 tiles of the 4 (a 1 x 3 grid); the default picture (40 x 30) takes all 4 (2 x 2)."""


@pytest.fixture(scope="module")
def mllama_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("tiny_mllama")
    build_tiny_mllama(model_dir, out)
    return out


@pytest.fixture(scope="module")
def engine(mllama_dir: Path) -> Iterator[LLMEngine]:
    engine = build_engine(EngineConfig(model=str(mllama_dir), dtype="float32", max_model_len=256,
                                       max_num_seqs=4, max_num_batched_tokens=64))
    yield engine
    engine.shutdown()


def wide_or_default(seed: int) -> bytes:
    return picture(seed, WIDE) if seed % 2 else picture(seed)


@pytest.mark.parametrize(("text", "seeds"), [(ONE, [2]), (AFTER, [4]), (TWO, [1, 6]), (TEXT, [])])
def test_greedy_tokens_equal_hf(engine: LLMEngine, mllama_dir: Path, text: str, seeds: list[int]) -> None:
    ours = engine_greedy(engine, text, seeds, f"m{seeds}{len(text)}", image_of=wide_or_default)
    assert_same(ours, hf_vision_greedy(mllama_dir, text, [wide_or_default(s) for s in seeds], 8))
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


def test_the_prompt_keeps_one_token_per_image_and_the_images_count_their_tiles(engine: LLMEngine) -> None:
    prompts = engine.image_prompts
    assert prompts is not None and prompts.cross_tokens_per_tile == MLLAMA_TILE_TOKENS
    ids = engine.tokenizer(TWO).input_ids
    images = tuple(decode_image(wide_or_default(s), "image", ImageLimits()) for s in (1, 6))
    prompt = prompts.prepare(ids, images, TWO)
    placeholder = prompts.placeholder_id
    assert prompt.token_ids.count(placeholder) == 2 and len(prompt.token_ids) == len(ids)
    places = [i for i, t in enumerate(ids) if t == placeholder]
    assert [(s.offset, s.length) for s in prompt.images] == [(i, 1) for i in places]
    # 4 tiles of 5 tokens each in the cross-attention KV; the wide picture fills 3 tiles, the other 4
    assert [(s.cross_tokens, s.cross_seen) for s in prompt.images] == [(20, 15), (20, 20)]


def test_a_chunked_prompt_ids_and_a_shared_picture(engine: LLMEngine, mllama_dir: Path) -> None:
    """The prompt as ids (max_num_batched_tokens=64 chunks the longer prompt), twice at once with the
    same picture: one encoder run for both, and both equal HF's tokens."""
    runner: Any = engine.runner
    before = runner.mm_cache_counts
    long_text = AFTER.replace("What is in it?", "What is in it? " * 12)
    expected = hf_vision_greedy(mllama_dir, long_text, [picture(8)], 8)
    ids = engine.tokenizer(long_text).input_ids
    assert len(ids) > 64
    outputs: dict[str, list[Any]] = {"a": [], "b": []}
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    image = (decode_image(picture(8), "image", ImageLimits()),)
    for rid, sink in outputs.items():
        engine.add_request(rid, ids, params, sink.append, image)
    while engine.has_unfinished:
        engine.step()
    for sink in outputs.values():
        assert [t for out in sink for t in out.new_token_ids] == expected.tokens
    queries, hits = (after - was for after, was in zip(runner.mm_cache_counts, before, strict=True))
    assert (queries, hits) == (2, 1)
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


def test_images_larger_than_max_model_len_are_refused(mllama_dir: Path) -> None:
    engine = build_engine(EngineConfig(model=str(mllama_dir), dtype="float32", max_model_len=32,
                                       max_num_seqs=2))
    try:
        ids = engine.tokenizer(TWO).input_ids
        images = tuple(decode_image(picture(s), "image", ImageLimits()) for s in (1, 2))
        refusal = "image: the request's 2 image.s. take 40 tokens of cross-attention KV, more than " \
            "max_model_len=32"
        with pytest.raises(ValueError, match=refusal):
            engine.add_request("big", ids, SamplingParams(max_tokens=2), lambda out: None, images, TWO)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("places", [[3], [1, 5], [1, 2, 6], [2, 6, 7], [0, 1, 2]])
def test_which_tokens_see_which_image_follows_transformers(places: list[int]) -> None:
    """runtime/cross_images.seen_ranges against transformers' get_cross_attention_token_mask over a
    prompt of 10 tokens (and past it: decode tokens see what the last prompt token saw)."""
    from transformers.models.mllama.processing_mllama import get_cross_attention_token_mask

    from tt_backend.contract.step import ImageSpan
    from tt_backend.runtime.cross_images import seen_ranges

    ids = [99 if i in places else 1 for i in range(10)]
    expected = [(start, 10 if end == -1 else end) for start, end in get_cross_attention_token_mask(ids, 99)]
    ranges = seen_ranges([ImageSpan(str(p), p, 1, cross_tokens=5, cross_seen=5) for p in places])
    assert [(int(a), min(b, 10)) for a, b in ranges] == expected
    last = [j for j, (a, b) in enumerate(ranges) if a <= 9 < b]
    assert [j for j, (a, b) in enumerate(ranges) if a <= 40 < b] == last  # a decode token at 40


def test_a_model_taking_one_image_refuses_two_by_name_and_keeps_the_picture(mllama_dir: Path) -> None:
    """Tenstorrent's Mllama generator takes one image a request (assembly/tt_engine.py gives the
    prompts max_images=1) and the picture itself (ImageSpan.picture)."""
    from tt_backend.models.image_prompts import ImagePrompts

    prompts = ImagePrompts.load(mllama_dir, cross_tokens_per_tile=MLLAMA_TILE_TOKENS, max_images=1)
    images = tuple(decode_image(picture(seed), "image", ImageLimits()) for seed in (1, 2))
    tokenizer = prompts.processor.tokenizer
    with pytest.raises(ValueError, match=r"^image: this model takes at most 1 image\(s\) a request, got 2$"):
        prompts.prepare(tokenizer(TWO).input_ids, images, TWO)
    span, = prompts.prepare(tokenizer(ONE).input_ids, images[:1], ONE).images
    assert span.picture is not None and span.picture.size == (40, 30)
    assert span.cross_tokens == 4 * MLLAMA_TILE_TOKENS
