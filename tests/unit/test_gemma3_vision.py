"""Gemma 3 with its vision tower on torch against HF transformers on a tiny random checkpoint
(tests/vision_checkpoints.py), fp32: SigLIP and the projector's features; the engine's greedy
tokens for a chat prompt with images (its image tokens attending to each other both ways, a sliding
layer of window 8 across them), processed whole as HF does, also when a prefill step's budget
would end a chunk inside an image (the chunk stops before it), and with two images; an image larger
than a prefill step is refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.vision_checkpoints import (
    GEMMA3_IMAGE_TOKENS,
    assert_same,
    build_tiny_gemma3,
    encoders,
    engine_greedy,
    hf_ids_greedy,
    hf_vision_greedy,
    picture,
)
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.images import ImageLimits, decode_image

PROMPT = "<start_of_turn>user\nLook:\n<start_of_image>What is in this picture?<end_of_turn>\n" \
         "<start_of_turn>model\n"
TWO = "<start_of_turn>user\n<start_of_image> and <start_of_image>: which is brighter?<end_of_turn>\n" \
      "<start_of_turn>model\n"


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("tiny_gemma3_vision")
    build_tiny_gemma3(model_dir, out)
    return out


def test_the_encoder_gives_hf_image_features(gemma_dir: Path) -> None:
    ours, mine, ref = encoders(gemma_dir)
    assert ours.architecture == "Gemma3ForConditionalGeneration" and ours.capabilities.bidirectional_images
    assert mine.shape == (GEMMA3_IMAGE_TOKENS, 64)
    assert (mine - ref).abs().max().item() < 1e-5


@pytest.fixture(scope="module")
def engine(gemma_dir: Path) -> Iterator[LLMEngine]:
    engine = build_engine(EngineConfig(model=str(gemma_dir), dtype="float32", max_model_len=256,
                                       max_num_seqs=4))
    yield engine
    engine.shutdown()


@pytest.mark.parametrize(("text", "seeds"), [(PROMPT, [1]), (TWO, [2, 3])])
def test_greedy_tokens_equal_hf(engine: LLMEngine, gemma_dir: Path, text: str, seeds: list[int]) -> None:
    assert_same(engine_greedy(engine, text, seeds, f"g{seeds}"),
                hf_vision_greedy(gemma_dir, text, [picture(s) for s in seeds], 8))
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


def test_ids_that_are_not_their_texts_tokenization_expand_token_by_token(engine: LLMEngine,
                                                                         gemma_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gemma_dir)
    pieces = [tokenizer.encode(part, add_special_tokens=False) for part in ("user: hel", "lo\n", "What?")]
    ids = pieces[0] + pieces[1] + [tokenizer.boi_token_id] + pieces[2]  # "hel" + "lo": "hello" retokenizes
    text = tokenizer.decode(ids, skip_special_tokens=False)
    assert tokenizer.encode(text, add_special_tokens=False) != ids
    ref = hf_ids_greedy(gemma_dir, ids, [picture(7)], 8)
    # boi -> \n\n, boi, the soft tokens, eoi, \n\n
    assert len(ref.prompt) == len(ids) - 1 + 4 + GEMMA3_IMAGE_TOKENS
    assert_same(engine_greedy(engine, ids, [7], "ids", as_text=False), ref)


def test_a_chunk_stops_before_an_image_it_would_split(gemma_dir: Path) -> None:
    ref = hf_vision_greedy(gemma_dir, PROMPT, [picture(4)], 8)
    start = ref.prompt.index(_soft(gemma_dir))
    budget = start + 2  # the first chunk would end inside the image: it ends before it
    chunked = build_engine(EngineConfig(model=str(gemma_dir), dtype="float32", max_model_len=256,
                                        max_num_seqs=2, max_num_batched_tokens=budget,
                                        enable_prefix_caching=False))
    try:
        steps: list[tuple[int, ...]] = []
        run = chunked.runner.run_and_sample  # type: ignore[attr-defined]

        def record(plan: Any, sampling: Any) -> Any:
            steps.append(tuple(len(row.token_ids) for row in plan.rows))
            return run(plan, sampling)

        chunked.runner.run_and_sample = record  # type: ignore[method-assign]
        assert_same(engine_greedy(chunked, PROMPT, [4], "chunked"), ref)
        assert steps[0] == (start,)  # up to the image, which the next chunk holds whole
    finally:
        chunked.shutdown()


def _soft(gemma_dir: Path) -> int:
    from transformers import AutoTokenizer

    return int(AutoTokenizer.from_pretrained(gemma_dir).convert_tokens_to_ids("<image_soft_token>"))


def test_an_image_larger_than_a_prefill_step_is_refused(gemma_dir: Path) -> None:
    small = build_engine(EngineConfig(model=str(gemma_dir), dtype="float32", max_model_len=256,
                                      max_num_seqs=2, max_num_batched_tokens=GEMMA3_IMAGE_TOKENS - 1))
    try:
        with pytest.raises(ValueError) as info:
            engine_greedy(small, PROMPT, [1], "big")
        assert str(info.value) == (
            f"image[0] is {GEMMA3_IMAGE_TOKENS} tokens, prefilled in one step (they attend to each other), "
            f"more than max_num_batched_tokens={GEMMA3_IMAGE_TOKENS - 1}")
        assert not small.has_unfinished
    finally:
        small.shutdown()


def test_preempted_image_requests_recompute_exactly_and_an_aborted_one_frees_its_blocks(
        gemma_dir: Path) -> None:
    # 8 blocks of 16 hold one request of ~80 tokens, not four: requests are preempted and their whole
    # sequences, images and all, prefilled again (each image in one chunk); one more is aborted.
    engine = build_engine(EngineConfig(model=str(gemma_dir), dtype="float32", max_model_len=128,
                                       max_num_seqs=4, num_kv_blocks=8))
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    outputs: dict[str, list[RequestOutput]] = {}
    done = threading.Semaphore(0)

    def collect(out: RequestOutput) -> None:
        outputs.setdefault(out.request_id, []).append(out)
        if out.finished:
            done.release()
        if out.request_id == "doomed" and len(outputs["doomed"]) == 2:
            engine.abort("doomed")

    engine.start()
    try:
        for name, seed in (("a", 21), ("b", 22), ("c", 23), ("doomed", 24)):
            image = decode_image(picture(seed), "image", ImageLimits())
            engine.add_request(name, engine.tokenizer(PROMPT).input_ids, params, collect, (image,), PROMPT)
        for _ in range(4):
            assert done.acquire(timeout=300)
    finally:
        engine.shutdown()
    assert sum(lane.stats.preemptions for lane in engine.scheduler.lanes) >= 1
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)
    assert outputs["doomed"][-1].finish_reason == "abort"
    for name, seed in (("a", 21), ("b", 22), ("c", 23)):
        tokens = [t for out in outputs[name] for t in out.new_token_ids]
        assert tokens == hf_vision_greedy(gemma_dir, PROMPT, [picture(seed)], 40).tokens, name
