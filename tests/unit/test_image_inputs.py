"""tt_llm's `image` input (vllm_backend's: base64 files, TYPE_STRING dims [-1]) parsed and checked
into the request, and the engine's refusal of images for a model that takes none: a ValueError
naming `image` before the request holds an id, a slot or a KV block, while other requests go on."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.engine.outputs import RequestOutput
from tt_backend.models.capabilities import TORCH_LLAMA
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.images import decode_image
from tt_backend.triton.request_inputs import IMAGE_LIMITS, parse_generate_request

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (width, height, 7)).save(out, "PNG")
    return out.getvalue()


def image_input(*files: bytes) -> np.ndarray:
    return np.array([base64.b64encode(f) for f in files], dtype=np.object_)


TEXT = {"text_input": np.array([b"Describe it."], dtype=np.object_)}


def test_image_elements_are_base64_files_decoded_in_order() -> None:
    files = (png(4, 2), png(3, 5))
    parsed = parse_generate_request({**TEXT, "image": image_input(*files)})
    assert parsed.images == tuple(decode_image(f, "image", IMAGE_LIMITS) for f in files)
    assert [(i.width, i.height) for i in parsed.images] == [(4, 2), (3, 5)]
    ids = {"input_ids": np.array([1, 2], dtype=np.int32), "image": image_input(files[0]).reshape(1, 1)}
    assert [i.data for i in parse_generate_request(ids).images] == [files[0]]
    assert parse_generate_request(TEXT).images == ()


@pytest.mark.parametrize(("image", "message"), [
    (np.array([b"not base64!"], dtype=np.object_),
     "image[0]: the image is not valid base64 (Only base64 data is allowed)"),
    (image_input(png(2, 2), b"GIF89a....."),
     "image[1]: the image is a GIF file; PNG, JPEG and WebP images are accepted"),
    (image_input(*[png(1, 1)] * 5), "image[4]: a request may hold at most 4 images, this one holds 5"),
    (image_input(png(1, 1), png(1, 1)).reshape(2, 1), "input image must be a 1-D list of base64 images, got "
                                                      "shape [2, 1]"),
    (np.array([5]), "image[0] must be a base64 string (BYTES), got int64"),
])
def test_a_bad_image_input_is_refused_naming_the_element(image: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_generate_request({**TEXT, "image": image})
    assert str(info.value) == message


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return build_engine(EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=4))


def collect(outputs: dict[str, list[RequestOutput]]) -> Any:
    return lambda out: outputs.setdefault(out.request_id, []).append(out)


def run_until_idle(engine: LLMEngine) -> None:
    for _ in range(500):
        if not engine.has_unfinished:
            return
        engine.step()
    raise AssertionError("the engine did not finish")


def test_a_text_only_engine_refuses_images_holding_nothing_while_others_go_on(engine: LLMEngine,
                                                                               chat_ids: Any) -> None:
    assert TORCH_LLAMA.takes_images is False and engine.takes_images is False
    images = parse_generate_request({**TEXT, "image": image_input(png(4, 2))}).images
    outputs: dict[str, list[RequestOutput]] = {}
    prompt = chat_ids("Name a colour.")
    engine.add_request("before", prompt, GREEDY, collect(outputs))
    engine.step()  # it is running: its blocks are held
    with pytest.raises(ValueError) as info:
        engine.add_request("with-image", prompt, GREEDY, collect(outputs), images)
    assert str(info.value) == ("image: the model 'SmolLM2-135M-Instruct' takes no images (a text-only "
                               "model), got 1; send the prompt alone")
    assert "with-image" not in engine.requests and "with-image" not in outputs
    engine.add_request("with-image", prompt, GREEDY, collect(outputs))  # its id was never taken
    run_until_idle(engine)
    tokens = {rid: [t for o in outs for t in o.new_token_ids] for rid, outs in outputs.items()}
    assert tokens["before"] == tokens["with-image"] and len(tokens["before"]) == 12
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


def test_an_engine_whose_model_takes_images_carries_them_on_the_live_request(engine: LLMEngine,
                                                                             chat_ids: Any) -> None:
    images = parse_generate_request({**TEXT, "image": image_input(png(4, 2), png(2, 2))}).images
    engine.takes_images = True  # as a vision model's capabilities would set it
    try:
        outputs: dict[str, list[RequestOutput]] = {}
        engine.add_request("vision", chat_ids("Name a colour."), GREEDY, collect(outputs), images)
        engine.step()
        assert engine.requests["vision"].images == images
        run_until_idle(engine)
    finally:
        engine.takes_images = False
    assert outputs["vision"][-1].finished
