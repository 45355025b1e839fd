"""Images through the OpenAI front without Triton: chat content parts `image_url` / `input_image`
checked in order (count, URL, bytes, pixels) into 400s in OpenAI's error shape naming the field; a
text-only model refusing the first image before rendering; for a vision model, the template's
`{"type": "image"}` parts and the images going to tt_llm as vllm_backend's `image`, which tt_llm's
own parser reads back to the same images; and the front's image flags."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.unit.test_openai_front import MODEL, decode, encode, front_config, render
from tt_backend.openai_front import app as app_module
from tt_backend.openai_front.__main__ import _parser, image_flags
from tt_backend.openai_front.app import create_app
from tt_backend.openai_front.chat_messages import ImagePolicy, config_takes_images
from tt_backend.openai_front.chat_template import TemplateArgs
from tt_backend.openai_front.requests import GenerateCall, RequestPolicy, chat_call
from tt_backend.openai_front.triton_stream import Delta, image_tensor
from tt_backend.text.images import ImageLimits
from tt_backend.triton.request_inputs import parse_generate_request

TEXT_ONLY = ImagePolicy(served_model=MODEL)
VISION = ImagePolicy(takes_images=True, served_model="tiny-vl")


def png(width: int = 4, height: int = 2, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB").save(out, "PNG")
    return out.getvalue()


def url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def image_part(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url(data)}}


def chat(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": list(parts)}], "max_tokens": 4, **fields}


TEXT = {"type": "text", "text": "What is in the picture?"}


def error(message: str, param: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": 400}}


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[GenerateCall]:
    """Triton replaced by a one-delta stream; the calls the front makes."""
    calls: list[GenerateCall] = []

    async def answer(client: Any, model: str, call: GenerateCall) -> AsyncIterator[Delta]:
        calls.append(call)
        yield Delta("a cat", 2, num_prompt_tokens=len(call.prompt), finish_reason="stop")

    monkeypatch.setattr(app_module, "stream", answer)
    return calls


@pytest.fixture
def text_front() -> Iterator[TestClient]:
    limits = ImageLimits(max_images=2, max_bytes=4096, max_pixels=64)
    config = front_config(images=ImagePolicy(False, limits, None, MODEL))
    with TestClient(create_app(config, render, decode, encode)) as client:
        yield client


BIG = png(64, 64, seed=1)  # over 4096 bytes
WIDE = png(9, 8)  # 72 pixels: over 64
BAD_PARTS: list[tuple[list[dict[str, Any]], str, str]] = [
    ([TEXT, {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8gd29ybGQ="}}],
     "messages[0].content[1].image_url.url",
     "not a PNG, JPEG or WebP image (it starts with 68 65 6c 6c 6f 20 77 6f)"),
    ([image_part(BIG)], "messages[0].content[0].image_url.url",
     f"the image is {len(BIG)} bytes, more than the 4096 bytes an image may have"),
    ([image_part(WIDE)], "messages[0].content[0].image_url.url",
     "the image is 9x8 = 72 pixels, more than the 64 pixels an image may have"),
    ([{"type": "image_url", "image_url": {"url": "http://example.com/cat.png"}}],
     "messages[0].content[0].image_url.url", "http: URLs are not fetched (this server makes no network "
     "requests); send the image inline as a data: URL, data:image/png;base64,..."),
    ([TEXT, {"type": "input_image", "image_url": "https://example.com/cat.png"}],
     "messages[0].content[1].image_url", "https: URLs are not fetched (this server makes no network "
     "requests); send the image inline as a data: URL, data:image/png;base64,..."),
    ([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}],
     "messages[0].content[0].image_url.url",
     "file: URLs are off; the front's --allowed-local-media-path names the folder they may read from"),
]


@pytest.mark.parametrize(("parts", "param", "message"), BAD_PARTS)
def test_a_bad_image_is_a_400_naming_its_field(text_front: TestClient, parts: list[dict[str, Any]],
                                               param: str, message: str) -> None:
    reply = text_front.post("/v1/chat/completions", json=chat(*parts))
    assert (reply.status_code, reply.json()) == (400, error(f"{param}: {message}", param))


def test_too_many_images_name_the_first_one_over_the_limit(text_front: TestClient) -> None:
    body = {"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "user", "content": [TEXT, image_part(png())]},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": [image_part(png()), image_part(b"never decoded")]}]}
    reply = text_front.post("/v1/chat/completions", json=body)
    assert (reply.status_code, reply.json()) == (400, error(
        "messages[2].content[1]: a request may hold at most 2 images (the front's --limit-mm-per-prompt), "
        "this one holds 3", "messages[2].content[1]"))


def test_a_text_only_model_refuses_a_good_image_naming_it_before_rendering(
        text_front: TestClient, sent: list[GenerateCall]) -> None:
    message = (f"the model {MODEL!r} takes no images (messages[0].content[1]): it is a text-only model; send "
               "text parts alone")
    for route in ("/v1/chat/completions", "/tokenize"):
        reply = text_front.post(route, json=chat(TEXT, image_part(png())))
        assert (reply.status_code, reply.json()) == (400, error(message, "messages[0].content[1]"))
    text = text_front.post("/v1/chat/completions", json=chat(TEXT, {"type": "text", "text": "!"}))
    assert text.status_code == 200 and text.json()["choices"][0]["message"]["content"] == "a cat"
    assert len(sent) == 1 and sent[0].images == ()  # text parts joined, as before
    assert sent[0].prompt == tuple(ord(c) for c in "<user>What is in the picture?!<assistant>")


def test_a_vision_model_gets_image_parts_in_the_template_and_the_images_beside_the_prompt() -> None:
    seen: list[list[dict[str, Any]]] = []

    def capture(messages: list[dict[str, Any]], tools: Any, template: TemplateArgs) -> list[int]:
        seen.append(messages)
        return [1, 2, 3]

    first, second = png(4, 2, seed=2), png(3, 3, seed=3)
    parts = [image_part(first), TEXT, {"type": "input_image", "image_url": url(second)}]
    answer = [{"type": "text", "text": "Two "}, {"type": "text", "text": "cats."}]
    body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts},
                         {"role": "assistant", "content": answer}], "echo": True}
    call = chat_call(body, capture, RequestPolicy(images=VISION))
    assert seen == [[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in the picture?"},
                                     {"type": "image"}]},
        {"role": "assistant", "content": "Two cats."}]]
    assert [(i.data, i.format, i.width, i.height) for i in call.images] == [(first, "PNG", 4, 2),
                                                                           (second, "PNG", 3, 3)]
    assert call.echoed == "Two cats."
    # tt_llm's parser reads the front's `image` tensor back to the same images
    parsed = parse_generate_request({"input_ids": np.array(call.prompt, dtype=np.int32),
                                     "image": image_tensor(call.images)})
    assert parsed.images == call.images
    assert image_tensor(call.images).tolist() == [base64.b64encode(first), base64.b64encode(second)]


def test_file_urls_under_the_allowed_folder_reach_the_call(tmp_path: Path) -> None:
    data = png(4, 2, seed=4)
    (tmp_path / "cat.png").write_bytes(data)
    policy = RequestPolicy(images=ImagePolicy(True, ImageLimits(), tmp_path.resolve(), "tiny-vl"))
    part = {"type": "image_url", "image_url": {"url": f"file://{tmp_path}/cat.png", "detail": "low"}}
    call = chat_call({"messages": [{"role": "user", "content": [part]}]}, render, policy)
    assert [i.data for i in call.images] == [data]


def test_the_model_takes_images_when_its_config_has_a_vision_config(model_dir: Path) -> None:
    smollm = json.loads((model_dir / "config.json").read_text())
    assert config_takes_images(smollm) is False
    qwen2_vl = {"architectures": ["Qwen2VLForConditionalGeneration"], "vision_config": {"depth": 32}}
    assert config_takes_images(qwen2_vl) is True


def test_the_image_flags_and_their_errors(tmp_path: Path) -> None:
    def flags(*argv: str) -> tuple[ImageLimits, Path | None]:
        return image_flags(_parser().parse_args(list(argv)))

    assert flags() == (ImageLimits(4, 20 << 20, 33177600), None)
    given = flags("--limit-mm-per-prompt", '{"image": 2}', "--max-image-bytes", "100", "--max-image-pixels",
                  "50", "--allowed-local-media-path", str(tmp_path))
    assert given == (ImageLimits(2, 100, 50), tmp_path.resolve())
    assert flags("--limit-mm-per-prompt", '{"image": {"count": 3}}')[0].max_images == 3  # vLLM's other form
    shape = '--limit-mm-per-prompt must be {"image": N} (images are the only media taken), got '
    missing = tmp_path / "x"
    for argv, message in (
            (("--limit-mm-per-prompt", '{"video": 1}'), shape + "'{\"video\": 1}'"),
            (("--limit-mm-per-prompt", "image=2"), shape + "'image=2'"),
            (("--limit-mm-per-prompt", '{"image": 0}'),
             "--limit-mm-per-prompt image must be an integer >= 1, got 0"),
            (("--max-image-bytes", "0"), "--max-image-bytes must be an integer >= 1, got 0"),
            (("--allowed-local-media-path", str(missing)),
             f"--allowed-local-media-path {str(missing)!r}: {missing} is not an existing folder")):
        with pytest.raises(ValueError) as info:
            flags(*argv)
        assert str(info.value) == message
