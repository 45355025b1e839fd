"""Images against the real tritonserver and the OpenAI front serving the text-only default model:
bad images (not an image, too many pixels, too many images, an http:// URL) are 400s naming their
field, a good one is refused as the model takes no images, through the front and through tt_llm's
`image` (tritonclient gRPC, and HTTP /generate for the status), while a stream in flight carries on
to the same text as alone."""

from __future__ import annotations

import base64
import io
import struct
import threading
import zlib
from typing import Any

import numpy as np
import requests
from openai import OpenAI
from PIL import Image

from tests.integration.clients import grpc_stream, s
from tests.integration.conftest import Server

MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"
REFUSAL = "image: the model 'SmolLM2-135M-Instruct' takes no images (a text-only model), got 1; send the " \
          "prompt alone"


def png(width: int = 4, height: int = 3) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 90)).save(out, "PNG")
    return out.getvalue()


def bomb_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height over no pixel data."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def part(data: bytes) -> dict[str, Any]:
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    return {"type": "image_url", "image_url": {"url": url}}


TEXT = {"type": "text", "text": "What is in the picture?"}
FRONT_CASES: list[tuple[list[dict[str, Any]], str, str]] = [
    ([TEXT, part(b"GIF89a not a png")], "messages[0].content[1].image_url.url",
     "the image is a GIF file; PNG, JPEG and WebP images are accepted"),
    ([part(bomb_header(8000, 8000))], "messages[0].content[0].image_url.url",
     "the image is 8000x8000 = 64000000 pixels, more than the 33177600 pixels an image may have"),
    ([part(png())] * 5, "messages[0].content[4]",
     "a request may hold at most 4 images (the front's --limit-mm-per-prompt), this one holds 5"),
    ([TEXT, {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/cat.png"}}],
     "messages[0].content[1].image_url.url", "http: URLs are not fetched (this server makes no network "
     "requests); send the image inline as a data: URL, data:image/png;base64,..."),
    ([TEXT, part(png())], "messages[0].content[1]",
     None),  # a good image: the text-only model's refusal
]


def test_bad_images_and_a_good_one_are_400s_naming_the_field_while_a_stream_carries_on(server: Server
                                                                                      ) -> None:
    assert server.openai is not None
    client = OpenAI(base_url=server.openai, api_key="unused", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": QUESTION}]
    outcome: dict[str, Any] = {}

    def long_stream() -> None:
        parts = client.chat.completions.create(model=MODEL, messages=messages,
                                               max_tokens=48, temperature=0, stream=True)
        outcome["text"] = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)

    thread = threading.Thread(target=long_stream)
    thread.start()
    for content, param, message in FRONT_CASES:
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4}
        reply = requests.post(f"{server.openai}/chat/completions", json=body, timeout=60)
        expected = f"{param}: {message}" if message is not None else (
            f"the model {MODEL!r} takes no images ({param}): it is a text-only model; send text parts alone")
        assert (reply.status_code, reply.json()) == (400, {"error": {
            "message": expected, "type": "invalid_request_error", "param": param, "code": 400}})
    thread.join(timeout=300)
    alone = client.chat.completions.create(model=MODEL, messages=messages,
                                           max_tokens=48, temperature=0)
    assert outcome["text"] == alone.choices[0].message.content


def image(*files: bytes) -> np.ndarray:
    return np.array([base64.b64encode(f) for f in files], dtype=np.object_)


def test_tt_llm_takes_vllm_backends_image_input_and_refuses_it_for_a_text_model(server: Server) -> None:
    outcome: dict[str, Any] = {}
    long = {"text_input": s("Count from one to twenty:"), "stream": np.array([True]),
            "sampling_parameters": s('{"temperature": 0, "max_tokens": 32, "ignore_eos": true}')}

    def long_stream() -> None:
        outcome["result"] = grpc_stream(server.grpc, "tt_llm", long, timeout=300)

    thread = threading.Thread(target=long_stream)
    thread.start()
    cases = [
        (image(b"not a png at all"), "image[0]: not a PNG, JPEG or WebP image (it starts with 6e 6f 74 20 61 "
                                     "20 70 6e)"),
        (np.array([b"%%%"], dtype=np.object_), "image[0]: the image is not valid base64 (Only base64 data is "
                                               "allowed)"),
        (image(*[png()] * 5), "image[4]: a request may hold at most 4 images, this one holds 5"),
        (image(bomb_header(8000, 8000)), "image[0]: the image is 8000x8000 = 64000000 pixels, more than the "
                                         "33177600 pixels an image may have"),
        (image(png()), REFUSAL),
    ]
    for value, message in cases:
        result = grpc_stream(server.grpc, "tt_llm", {"text_input": s("Describe it."), "image": value})
        assert result.responses == [] and result.error is not None and message in result.error, result.error
    http = requests.post(f"http://{server.http}/v2/models/tt_llm/generate", timeout=60, json={
        "text_input": "Describe it.", "image": [base64.b64encode(png()).decode()], "max_tokens": 4})
    assert (http.status_code, http.json()) == (400, {"error": REFUSAL})  # INVALID_ARG
    thread.join(timeout=300)
    alone = grpc_stream(server.grpc, "tt_llm", long, timeout=300)
    assert outcome["result"].error is None and outcome["result"].text() == alone.text()
    assert len(alone.text()) > 0
