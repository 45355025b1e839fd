"""The TRT-LLM multimodal ensemble's image inputs (tt_backend/triton/trtllm_images.py): data: URLs
and RGB pixel arrays become the same checked images `tt_llm` takes; each bad one is refused naming
the input and element."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from tt_backend.text.images import ImageLimits, decode_image
from tt_backend.triton.trtllm_images import trtllm_images

LIMITS = ImageLimits()


def pixels(seed: int, size: tuple[int, int] = (5, 4)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)


def png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array, "RGB").save(out, "PNG")
    return out.getvalue()


def url(data: bytes) -> bytes:
    return b"data:image/png;base64," + base64.b64encode(data)


def test_urls_and_pixels_give_the_same_images_as_their_files() -> None:
    files = [png(pixels(1)), png(pixels(2))]
    expected = [decode_image(f, "x", LIMITS).sha256 for f in files]
    by_url = trtllm_images({"image_url_input": np.array([[url(f) for f in files]], dtype=np.object_)}, LIMITS)
    assert [i.sha256 for i in by_url] == expected
    by_pixels = trtllm_images({"image_bytes_input": np.stack([pixels(1), pixels(2)])[None]}, LIMITS)
    assert [i.sha256 for i in by_pixels] == expected and [i.format for i in by_pixels] == ["PNG", "PNG"]
    assert trtllm_images({}, LIMITS) == ()
    assert trtllm_images({"image_url_input": np.zeros((1, 0), dtype=np.object_)}, LIMITS) == ()


@pytest.mark.parametrize(("inputs", "message"), [
    ({"image_url_input": np.array([[b"http://example.com/cat.png"]], dtype=np.object_)},
     "image_url_input[0]: http: URLs are not fetched (this server makes no network requests); send the image "
     "inline as a data: URL, data:image/png;base64,..."),
    ({"image_url_input": np.array([[url(png(pixels(1))), url(b"GIF89a...")]], dtype=np.object_)},
     "image_url_input[1]: the image is a GIF file; PNG, JPEG and WebP images are accepted"),
    ({"image_url_input": np.array([[url(png(pixels(1)))] * 5], dtype=np.object_)},
     "image_url_input[4]: a request may hold at most 4 images, this one holds 5"),
    ({"image_bytes_input": np.zeros((1, 1, 4, 4, 4), dtype=np.uint8)},
     "image_bytes_input must be [images, height, width, 3] RGB pixels, got shape [1, 4, 4, 4]"),
    ({"image_bytes_input": np.zeros((1, 1, 4, 4, 3), dtype=np.float16)},
     "image_bytes_input must be UINT8 pixels, got float16"),
    ({"image_bytes_input": np.zeros((1, 1, 4, 4, 3), dtype=np.uint8),
      "image_url_input": np.array([[url(png(pixels(1)))]], dtype=np.object_)},
     "send the images as image_url_input or as image_bytes_input, not both"),
])
def test_bad_images_are_refused_naming_the_input(inputs: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(ValueError) as info:
        trtllm_images(inputs, LIMITS)
    assert str(info.value) == message


def test_too_many_pixels_are_refused_before_any_is_encoded() -> None:
    small = ImageLimits(max_pixels=19)
    with pytest.raises(ValueError) as info:
        trtllm_images({"image_bytes_input": pixels(3)[None, None]}, small)
    assert str(info.value) == ("image_bytes_input[0]: the image is 5x4 = 20 pixels, more than the 19 pixels "
                               "an image may have")
