"""Images on the Tenstorrent path, on a mock n150, over the contract generator's Qwen2.5-VL
(tests/tt/bundles/tt_contract_llama, variant qwen25_vl: tt-metal's Qwen2_5_VLForConditionalGeneration
calls, HF's Qwen2.5-VL computing the numbers on the host). A chat prompt with an image, one with two
images of different grids and a text-only one go through the engine: each prefill hands the images
over as the Tenstorrent plugin does (per-row lists of per-image pixel_values and (3,) grids), the
generator's rope deltas come back, and each decode sends them as rope_deltas_all_users. Greedy
tokens equal HF's, which they do not if the deltas are dropped (decode positions would be the
token's index, not its M-RoPE position)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from tests.tt.mock_device import BUNDLES, run_scenario
from tests.vision_checkpoints import (
    GEMMA3_IMAGE_TOKENS,
    Greedy,
    build_tiny_gemma3,
    build_tiny_mllama,
    build_tiny_qwen2_vl,
    hf_vision_greedy,
    picture,
)

IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
MAX_TOKENS = 6


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("tiny_qwen2_5_vl_tt")
    build_tiny_qwen2_vl(model_dir, out, version="2.5", hidden=128)
    return out


def run_vision(model_dir: Path, variant: str, requests: list[dict[str, Any]], pictures: dict[int, bytes],
               together: bool = False, **options: str) -> tuple[dict[str, Any], list[Greedy]]:
    """The engine_images scenario on a mock n150 over the contract generator's `variant` (each request:
    its text and the seeds of its pictures), and HF's greedy tokens for each request."""
    params = {"device": "tt", "model": str(model_dir),
              "extra_models_dir": str(BUNDLES / "tt_contract_llama" / "variants" / variant),
              "max_model_len": "256", "max_num_batched_tokens": "256", "dtype": "float32", **options}
    sent = [{"text": r["text"], "images": [base64.b64encode(pictures[s]).decode() for s in r["seeds"]]}
            for r in requests]
    seen = run_scenario("engine_images", "n150", timeout=900, params=params, max_tokens=MAX_TOKENS,
                        requests=sent, together=together)
    refs = [hf_vision_greedy(model_dir, r["text"], [pictures[s] for s in r["seeds"]], MAX_TOKENS)
            for r in requests]
    return seen, refs


def test_qwen2_5_vl_prefills_with_its_images_and_decodes_with_its_rope_deltas(qwen_dir: Path) -> None:
    pictures = {1: picture(1, (40, 30)), 2: picture(2, (30, 100)), 3: picture(3, (90, 90))}
    requests: list[dict[str, Any]] = [
        {"text": chat(f"{IMAGE}What is in this picture?"), "seeds": [1]},
        {"text": chat(f"{IMAGE}and {IMAGE}Which is brighter?"), "seeds": [2, 3]},
        {"text": chat("What is a picture?"), "seeds": []}]
    seen, refs = run_vision(qwen_dir, "qwen25_vl", requests, pictures, max_num_seqs="2", num_kv_blocks="32")
    assert seen["tokens"] == [ref.tokens for ref in refs]
    # one prefill a request, its whole prompt, its images as the plugin sends them: 2x3, then 4x1 and
    # 3x3 tokens (4x6, 8x2 and 6x6 patches of 3 x 2 x 14 x 14 pixels)
    assert [call["prompt_lens"] for call in seen["prefills"]] == [[len(ref.prompt)] for ref in refs]
    assert [call["images"] for call in seen["prefills"]] == [
        [[[24, 1176]]], [[[16, 1176], [36, 1176]]], [None]]
    assert [call["grids"] for call in seen["prefills"]] == [[[[1, 4, 6]]], [[[1, 8, 2], [1, 6, 6]]], [None]]
    # every decode sends each slot's delta: the first request's image takes 3 positions for its 6
    # tokens (-3), the second's 4 + 3 for 4 + 9 (-6), text none (requests run one after another in slot 0)
    deltas = {tuple(d[:1]) for d in seen["decode_deltas"]}
    assert seen["decode_calls"] == 3 * (MAX_TOKENS - 1) and len(seen["decode_deltas"]) == seen["decode_calls"]
    assert deltas == {(-3,), (-6,), (0,)}


GEMMA_IMAGE = "<start_of_image>"


def gemma_chat(text: str) -> str:
    return f"<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("tiny_gemma3_tt")
    build_tiny_gemma3(model_dir, out, head_dim=32)
    return out


def test_gemma3_prefills_each_image_row_alone_untraced_with_its_images(gemma_dir: Path) -> None:
    """Variant gemma3_vision (tt-metal's Gemma3ForConditionalGeneration: images through
    prefill_forward_text, rules 80-84): two image requests and a text one, all in flight together
    (max_num_seqs 3), so one scheduler step prefills all three; each row with images goes to its own
    untraced prefill_forward, the text row may be traced, and greedy tokens equal HF's."""
    pictures = {1: picture(1, (40, 30)), 2: picture(2, (30, 100)), 3: picture(3, (90, 90))}
    requests: list[dict[str, Any]] = [
        {"text": gemma_chat(f"{GEMMA_IMAGE}What is in this picture?"), "seeds": [1]},
        {"text": gemma_chat(f"{GEMMA_IMAGE} and {GEMMA_IMAGE}: which is brighter?"), "seeds": [2, 3]},
        {"text": gemma_chat("What is a picture?"), "seeds": []}]
    seen, refs = run_vision(gemma_dir, "gemma3_vision", requests, pictures, together=True, max_num_seqs="3",
                            num_kv_blocks="48", trace_mode="all")
    assert seen["tokens"] == [ref.tokens for ref in refs]
    # the images as the plugin sends Gemma 3's: per image [1, 3, 32, 32] (no crops); each row with
    # images alone in an untraced call; the text row traced as text prefills are
    soft = AutoTokenizer.from_pretrained(gemma_dir).convert_tokens_to_ids("<image_soft_token>")
    assert [ref.prompt.count(soft) for ref in refs] == [GEMMA3_IMAGE_TOKENS, 2 * GEMMA3_IMAGE_TOKENS, 0]
    lens = [len(ref.prompt) for ref in refs]
    calls = sorted(((c["prompt_lens"], c["images"], c["enable_trace"]) for c in seen["prefills"]), key=str)
    assert calls == sorted([([lens[0]], [[[1, 3, 32, 32]]], False),
                            ([lens[1]], [[[1, 3, 32, 32], [1, 3, 32, 32]]], False),
                            ([lens[2]], [None], seen["trace_prefill"])], key=str)
    assert seen["steps_with_prefill"] == 1  # all three prefilled in one scheduler step


MLLAMA_ONE = "<|im_start|>user\n<|image|>What is in this picture?<|im_end|>\n<|im_start|>assistant\n"
MLLAMA_AFTER = ("<|im_start|>user\nHere is a picture: <|image|> What is in it?<|im_end|>\n"
                "<|im_start|>assistant\n")
MLLAMA_TEXT = "<|im_start|>user\nWhat is a lighthouse?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def mllama_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("tiny_mllama_tt")
    # tt-metal hard-codes Llama 3.2 Vision's image token id; its tiles want heads of 32
    build_tiny_mllama(model_dir, out, image_token_id=128256, heads=2)
    return out


def test_mllama_prefills_its_image_with_a_cross_table_and_decodes_with_its_masks(mllama_dir: Path) -> None:
    """Variant mllama (tt-metal's MllamaForConditionalGeneration, rules 90-99): an image request, a
    text one and one with text before its image, all in flight together (max_num_seqs 3). Each
    prefill hands the image itself and a cross_page_table (the row's own blocks, which hold the
    image's cross-attention KV in the cross-attention layers' caches); every decode step sends each
    image row the masks its prefill returned, with the same cross table, and the text row none.
    Greedy tokens equal HF's (which they do not if the masks are dropped: the stand-in refuses)."""
    pictures = {1: picture(1, (40, 30)), 2: picture(2, (70, 30))}
    requests: list[dict[str, Any]] = [{"text": MLLAMA_ONE, "seeds": [1]}, {"text": MLLAMA_TEXT, "seeds": []},
                                      {"text": MLLAMA_AFTER, "seeds": [2]}]
    seen, refs = run_vision(mllama_dir, "mllama", requests, pictures, together=True, max_num_seqs="3",
                            num_kv_blocks="48", block_size="32")
    assert seen["tokens"] == [ref.tokens for ref in refs]
    # one step prefills all three, a call a row (an image row alone), the pictures as they came
    lens = [len(ref.prompt) for ref in refs]
    calls = sorted(((c["prompt_lens"], c["pictures"]) for c in seen["prefills"]), key=str)
    assert calls == sorted([([lens[0]], [[40, 30]]), ([lens[1]], [None]), ([lens[2]], [[70, 30]])], key=str)
    assert seen["steps_with_prefill"] == 1
    # an image's 4 tiles of nearest_32(2 x 2 + 1) = 32 tokens: 128 tokens, 4 blocks of 32, in the
    # row's own page-table row (no block twice); the text row's table holds its prompt's block
    image_tables = {c["pictures"][0][0]: c["cross_page_table"][0] for c in seen["prefills"]
                    if c["pictures"][0]}
    for table in image_tables.values():
        assert len(set(table[:4])) == 4 and all(0 <= b < 48 for b in table[:4])
    assert not set(image_tables[40][:4]) & set(image_tables[70][:4])
    # every decode: masks for the two image rows only, each with its prefill's cross table
    assert seen["decode_calls"] == MAX_TOKENS - 1 and len(seen["decode_masks"]) == seen["decode_calls"]
    rows = {tuple(sorted(step)) for step in seen["decode_masks"]}
    assert len(rows) == 1 and len(next(iter(rows))) == 2
    tables = {tuple(table[:4]) for step in seen["decode_masks"] for table in step.values()}
    assert tables == {tuple(t[:4]) for t in image_tables.values()}
    assert seen["traced_steps"] == 0  # tt-metal's Mllama decode would capture its trace while serving
