"""Images a request brings: decoded once, checked against the limits, kept as validated bytes.

Both fronts decode with this module: the OpenAI front (chat content parts, `image_urls.py`) and
`tt_llm`'s `image` input, which takes images as triton-inference-server/vllm_backend does
(src/model.py: an optional input `image`, TYPE_STRING, dims [-1], one base64-encoded image file
per element; its src/utils/request.py decodes each with base64.b64decode and
`Image.open(...).convert("RGB")` into vLLM's `multi_modal_data["image"]`).
TensorRT-LLM's multimodal ensemble (triton_backend/all_models/multimodal/ensemble/config.pbtxt)
takes `image_url_input` (TYPE_STRING: `data:image/jpeg;base64,` URLs, others fetched with
requests.get by its preprocessing model), `image_bytes_input` (TYPE_UINT8 decoded pixel arrays) and
`image_input` (TYPE_FP16 pixel values for its encoder); our `ensemble` declares none of them yet.

An image is accepted when its bytes are a PNG, JPEG or WebP file (read from the bytes, whatever a
data URL's media type says), within `max_bytes`, of at most `max_pixels` (width x height, read
from the header before any pixel is decoded, so a small file that would inflate to gigapixels,
a decompression bomb, is refused unread), and when it decodes whole. Each error is a ValueError
that starts with the field's path (`messages[1].content[0].image_url.url`, `image[2]`).

The defaults, beside vLLM's: vLLM allows 999 images per prompt for each modality
(vllm/config/multimodal.py `get_limit_per_prompt`, its `--limit-mm-per-prompt`) and has no byte or
pixel bound of its own (Pillow's MAX_IMAGE_PIXELS, 89.5 MP, warns); OpenAI's API takes images of up
to 20 MB. Here: 4 images a request (every one is a vision-encoder pass inside the request's
prefill on a CPU or a Tenstorrent chip), 20 MiB an image, 33,177,600 pixels (an 8K frame,
7680x4320) an image.

An ImageInput keeps the file's bytes (what a model's HF processor opens again) and `sha256`, the
key of the encoder-output cache: the SHA-256 of the decoded RGB pixels with their size, so the
same picture sent as PNG or as lossless WebP shares the cache, and a re-encoded JPEG does not.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from dataclasses import dataclass, field
from typing import Literal

from PIL import Image, UnidentifiedImageError

ImageFormat = Literal["PNG", "JPEG", "WEBP"]
FORMATS: tuple[ImageFormat, ...] = ("PNG", "JPEG", "WEBP")
_PILLOW_FORMATS: dict[str, ImageFormat] = {"PNG": "PNG", "JPEG": "JPEG", "MPO": "JPEG", "WEBP": "WEBP"}
"""Pillow's format names → ours (a camera's multi-picture JPEG opens as MPO)."""
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"RIFF", "WEBP"))
_OTHER_FORMATS = ((b"GIF8", "a GIF"), (b"BM", "a BMP"), (b"II*\x00", "a TIFF"), (b"MM\x00*", "a TIFF"),
                  (b"<svg", "an SVG"), (b"<?xml", "an XML (SVG?)"), (b"%PDF", "a PDF"))
"""Leading bytes of formats people send, to say what came instead."""
_NAMES = {"PNG": "PNG", "JPEG": "JPEG", "WEBP": "WebP"}
_WHITE = (255, 255, 255)


@dataclass(frozen=True)
class ImageLimits:
    """What one request's images may be (the front's --limit-mm-per-prompt, --max-image-bytes and
    --max-image-pixels; tt_llm holds these defaults)."""

    max_images: int = 4
    max_bytes: int = 20 << 20
    max_pixels: int = 7680 * 4320

    def __post_init__(self) -> None:
        for name in ("max_images", "max_bytes", "max_pixels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    def check_count(self, count: int, field: str) -> None:
        """`field` names the first image over the limit."""
        if count > self.max_images:
            raise ValueError(f"{field}: a request may hold at most {self.max_images} images, this one "
                             f"holds {count}")


@dataclass(frozen=True)
class ImageInput:
    """One validated image: its file's bytes, what they are, and the hash of its pixels."""

    data: bytes = field(repr=False)
    format: ImageFormat
    width: int
    height: int
    sha256: str
    """hex SHA-256 of b"RGB <width> <height>\\0" and the decoded RGB pixels (alpha composited on
    white, as vLLM's ImageMediaIO converts RGBA)."""

    def rgb(self) -> Image.Image:
        """The image decoded again, as RGB (what an HF image processor takes)."""
        return _rgb(_open(self.data))

    def base64(self) -> str:
        """The file as tt_llm's `image` input element takes it."""
        return base64.b64encode(self.data).decode("ascii")


def decode_base64(text: str | bytes, field: str, limits: ImageLimits) -> bytes:
    """Strict base64 (RFC 4648, no whitespace, as vLLM's `pybase64.b64decode(validate=True)`) of at
    most `limits.max_bytes` decoded bytes, counted before decoding."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"{field}: the image is not valid base64 (it holds non-ASCII bytes)") from None
    size = len(text) // 4 * 3 - (len(text) - len(text.rstrip("=")))
    if size > limits.max_bytes:
        raise ValueError(f"{field}: the image is {size} bytes, more than the {limits.max_bytes} bytes an "
                         "image may have")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII text
        raise ValueError(f"{field}: the image is not valid base64 ({exc})") from None


def decode_image(data: bytes, field: str, limits: ImageLimits) -> ImageInput:
    """`data` checked and decoded whole; ValueError starting with `field` says what is wrong."""
    if not data:
        raise ValueError(f"{field}: the image is empty (0 bytes)")
    if len(data) > limits.max_bytes:
        raise ValueError(f"{field}: the image is {len(data)} bytes, more than the {limits.max_bytes} bytes "
                         "an image may have")
    try:
        image = _open(data)
    except Image.DecompressionBombError as exc:  # over twice Pillow's MAX_IMAGE_PIXELS: ours is lower
        raise ValueError(f"{field}: the image has more than the {limits.max_pixels} pixels an image may "
                         f"have ({exc})") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:  # UnidentifiedImageError is an OSError
        raise ValueError(f"{field}: {_unreadable(data, exc)}") from None
    width, height = image.size
    if width * height > limits.max_pixels:
        raise ValueError(f"{field}: the image is {width}x{height} = {width * height} pixels, more than the "
                         f"{limits.max_pixels} pixels an image may have")
    kind = _PILLOW_FORMATS[str(image.format)]
    try:
        rgb = _rgb(image)  # loads every pixel: a truncated or corrupt file fails here
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ValueError(f"{field}: the {_NAMES[kind]} image cannot be decoded ({exc})") from None
    digest = hashlib.sha256(b"RGB %d %d\0" % (width, height))
    digest.update(rgb.tobytes())
    return ImageInput(data, kind, width, height, digest.hexdigest())


def _open(data: bytes) -> Image.Image:
    """The image's header only (Pillow decodes pixels on load), by the accepted formats' readers."""
    return Image.open(io.BytesIO(data), formats=list(FORMATS))


def _rgb(image: Image.Image) -> Image.Image:
    """RGB pixels; transparency composited on white (vLLM's rgba_to_rgb default background)."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, _WHITE)
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return image.convert("RGB")


def _unreadable(data: bytes, exc: BaseException) -> str:
    """Why `data` could not be opened: a damaged file of an accepted format, or what it is instead."""
    head = data[:16]
    kind = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
    if kind is not None and (kind != "WEBP" or head[8:12] == b"WEBP"):
        why = "its header cannot be read" if isinstance(exc, UnidentifiedImageError) else str(exc)
        return f"the {_NAMES[kind]} image cannot be decoded ({why})"
    named = next((what for magic, what in _OTHER_FORMATS if head.startswith(magic)), None)
    if named is None and head[4:8] == b"ftyp":
        named = "an HEIF/AVIF"
    if named is not None:
        return f"the image is {named} file; PNG, JPEG and WebP images are accepted"
    return f"not a PNG, JPEG or WebP image (it starts with {head[:8].hex(' ')})"
