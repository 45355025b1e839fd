"""The images of a TRT-LLM multimodal ensemble request → the files `tt_llm`'s `image` input takes.

TensorRT-LLM's multimodal ensemble (triton_backend/all_models/multimodal/ensemble/config.pbtxt)
takes `image_url_input` (TYPE_STRING, dims [-1]: its preprocessing model decodes
`data:image/jpeg;base64,` URLs and fetches any other with requests.get) and `image_bytes_input`
(TYPE_UINT8, dims [-1, -1, -1, -1]: decoded pixels, one [H, W, C] array per image). Here:
`image_url_input` elements are `data:` URLs of PNG, JPEG or WebP files (nothing is fetched: an
`http:` URL is refused saying so; no local folder is allowed, as `tt_llm` has none), and
`image_bytes_input` is [images, height, width, 3] RGB pixels (channels last, as `np.asarray` of a
PIL image gives), each stored as a lossless PNG, so its pixel hash is the same picture's sent as a
PNG file. Its `image_input` (FP16 pixel values for TRT-LLM's encoder engine) is not declared: the
model's own processor makes the pixel values. Each error names the input and element.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from tt_backend.text.image_urls import image_from_url
from tt_backend.text.images import ImageInput, ImageLimits, decode_image

URL_INPUT = "image_url_input"
BYTES_INPUT = "image_bytes_input"


def trtllm_images(inputs: dict[str, np.ndarray], limits: ImageLimits) -> tuple[ImageInput, ...]:
    """The request's images (with the batch dimension of its one prompt, or without), checked."""
    urls, pixels = inputs.get(URL_INPUT), inputs.get(BYTES_INPUT)
    if urls is not None and urls.size and pixels is not None and pixels.size:
        raise ValueError(f"send the images as {URL_INPUT} or as {BYTES_INPUT}, not both")
    if urls is not None and urls.size:
        values = urls.reshape(-1).tolist()
        limits.check_count(len(values), f"{URL_INPUT}[{limits.max_images}]")
        return tuple(image_from_url(_text(v, f"{URL_INPUT}[{i}]"), f"{URL_INPUT}[{i}]", limits)
                     for i, v in enumerate(values))
    if pixels is not None and pixels.size:
        return _from_pixels(pixels, limits)
    return ()


def _text(value: object, field: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{field} is not UTF-8 text") from None
    if isinstance(value, str):
        return value
    raise ValueError(f"{field} must be a string (BYTES), got {type(value).__name__}")


def _from_pixels(pixels: np.ndarray, limits: ImageLimits) -> tuple[ImageInput, ...]:
    if pixels.dtype != np.uint8:
        raise ValueError(f"{BYTES_INPUT} must be UINT8 pixels, got {pixels.dtype}")
    if pixels.ndim == 5 and pixels.shape[0] == 1:  # the batch dimension of one prompt
        pixels = pixels[0]
    if pixels.ndim != 4 or pixels.shape[-1] != 3:
        raise ValueError(f"{BYTES_INPUT} must be [images, height, width, 3] RGB pixels, got shape "
                         f"{list(pixels.shape)}")
    limits.check_count(pixels.shape[0], f"{BYTES_INPUT}[{limits.max_images}]")
    height, width = pixels.shape[1:3]
    if height * width > limits.max_pixels:
        raise ValueError(f"{BYTES_INPUT}[0]: the image is {width}x{height} = {width * height} pixels, more "
                         f"than the {limits.max_pixels} pixels an image may have")
    out = []
    for i, picture in enumerate(pixels):
        png = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(picture), "RGB").save(png, "PNG")
        out.append(decode_image(png.getvalue(), f"{BYTES_INPUT}[{i}]", limits))
    return tuple(out)
