"""Images in (text/images.py, text/image_urls.py): PNG, JPEG and WebP files decoded whole at their
exact size, and each way an image is refused, in words that name the field and the limit."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tt_backend.text.image_urls import image_from_url, local_media_root
from tt_backend.text.images import ImageLimits, decode_base64, decode_image

LIMITS = ImageLimits()
FIELD = "messages[1].content[0].image_url.url"


def pixels(width: int = 5, height: int = 3) -> np.ndarray:
    """A pattern no two pixels of which are alike: [height, width, 3] uint8."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 40 + 7, y * 60 + 3, (x * 13 + y * 29) % 256], axis=-1).astype(np.uint8)


def encoded(array: np.ndarray, fmt: str, mode: str = "RGB", **options: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, fmt, **options)
    return out.getvalue()


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def pixel_hash(array: np.ndarray) -> str:
    height, width = array.shape[:2]
    return hashlib.sha256(f"RGB {width} {height}\0".encode() + array.tobytes()).hexdigest()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width x height over one empty IDAT (a decompression bomb's header)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


@pytest.mark.parametrize(("fmt", "options"), [("PNG", {}), ("WEBP", {"lossless": True})])
def test_a_lossless_png_or_webp_decodes_to_its_exact_pixels_and_hash(fmt: str, options: dict[str, object]
                                                                     ) -> None:
    array = pixels(5, 3)
    data = encoded(array, fmt, **options)
    image = decode_image(data, FIELD, LIMITS)
    assert (image.format, image.width, image.height, image.data) == (fmt, 5, 3, data)
    assert np.array_equal(np.asarray(image.rgb()), array)
    assert image.sha256 == pixel_hash(array)  # one key for the same pixels, PNG or WebP
    assert base64.b64decode(image.base64()) == data


def test_a_jpeg_decodes_at_its_size_as_pillow_decodes_it() -> None:
    data = encoded(pixels(64, 48), "JPEG", quality=90)
    image = decode_image(data, FIELD, LIMITS)
    reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert (image.format, image.width, image.height) == ("JPEG", 64, 48)
    assert np.array_equal(np.asarray(image.rgb()), reference)
    assert image.sha256 == pixel_hash(reference)


def test_transparency_is_composited_on_white_as_vllm_does() -> None:
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[0, 0] = (10, 20, 30, 255)  # opaque; the others fully transparent
    image = decode_image(encoded(rgba, "PNG", "RGBA"), FIELD, LIMITS)
    assert np.asarray(image.rgb()).tolist() == [[[10, 20, 30], [255, 255, 255]],
                                                [[255, 255, 255], [255, 255, 255]]]


@pytest.mark.parametrize(("data", "message"), [
    (b"hello world", "not a PNG, JPEG or WebP image (it starts with 68 65 6c 6c 6f 20 77 6f)"),
    (b"", "the image is empty (0 bytes)"),
    (encoded(pixels(), "GIF"), "the image is a GIF file; PNG, JPEG and WebP images are accepted"),
    (encoded(pixels(), "BMP"), "the image is a BMP file; PNG, JPEG and WebP images are accepted"),
    (encoded(pixels(), "TIFF"), "the image is a TIFF file; PNG, JPEG and WebP images are accepted"),
    (encoded(pixels(), "PNG")[:40], "the PNG image cannot be decoded (its header cannot be read)"),
    (encoded(pixels(64, 64), "PNG")[:205], "the PNG image cannot be decoded (image file is truncated)"),
    (encoded(pixels(64, 64), "JPEG")[:1140], "the JPEG image cannot be decoded (image file is truncated "
                                             "(97 bytes not processed))"),
    (encoded(pixels(64, 64), "WEBP")[:861], "the WebP image cannot be decoded (could not create decoder "
                                            "object)"),
])
def test_what_is_not_a_whole_png_jpeg_or_webp_is_refused_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(ValueError) as info:
        decode_image(data, FIELD, LIMITS)
    assert str(info.value) == f"{FIELD}: {message}"


def test_too_many_bytes_or_pixels_are_refused_with_the_size_and_the_limit() -> None:
    data = encoded(pixels(5, 3), "PNG")
    with pytest.raises(ValueError) as info:
        decode_image(data, "image[0]", ImageLimits(max_bytes=len(data) - 1))
    assert str(info.value) == (f"image[0]: the image is {len(data)} bytes, more than the {len(data) - 1} "
                               "bytes an image may have")
    with pytest.raises(ValueError) as info:
        decode_image(data, "image[0]", ImageLimits(max_pixels=14))
    assert str(info.value) == ("image[0]: the image is 5x3 = 15 pixels, more than the 14 pixels an image may "
                               "have")
    assert decode_image(data, "image[0]", ImageLimits(max_bytes=len(data), max_pixels=15)).width == 5


def test_a_decompression_bomb_is_refused_from_its_header_before_any_pixel_is_decoded() -> None:
    header = png_header_only(6000, 6000)  # 36 MP: past our limit, under Pillow's own warning
    assert len(header) < 100
    with pytest.raises(ValueError) as info:
        decode_image(header, FIELD, LIMITS)
    assert str(info.value) == (f"{FIELD}: the image is 6000x6000 = 36000000 pixels, more than the 33177600 "
                               "pixels an image may have")
    with pytest.raises(ValueError) as info:
        decode_image(png_header_only(20000, 20000), FIELD, LIMITS)  # Pillow's own bomb check comes first
    assert str(info.value) == (f"{FIELD}: the image has more than the 33177600 pixels an image may have "
                               "(Image size (400000000 pixels) exceeds limit of 178956970 pixels, could be "
                               "decompression bomb DOS attack.)")


def test_the_count_limit_names_the_first_image_over_it() -> None:
    ImageLimits(max_images=2).check_count(2, "image[2]")
    with pytest.raises(ValueError) as info:
        ImageLimits(max_images=2).check_count(3, "image[2]")
    assert str(info.value) == "image[2]: a request may hold at most 2 images, this one holds 3"
    with pytest.raises(ValueError, match="max_pixels must be an integer >= 1, got 0"):
        ImageLimits(max_pixels=0)


def test_base64_is_strict_and_its_size_counted_before_decoding() -> None:
    assert decode_base64(base64.b64encode(b"abcd").decode(), "image[0]", LIMITS) == b"abcd"
    for text, why in (("ab$d", "Only base64 data is allowed"), ("abc", "Incorrect padding"),
                      (b"\xffabc", "it holds non-ASCII bytes"), ("YW Jj", "Only base64 data is allowed")):
        with pytest.raises(ValueError) as info:
            decode_base64(text, "image[0]", LIMITS)
        assert str(info.value) == f"image[0]: the image is not valid base64 ({why})"
    with pytest.raises(ValueError) as info:  # 12 characters are 9 bytes, refused unread
        decode_base64("!" * 12, "image[0]", ImageLimits(max_bytes=8))
    assert str(info.value) == "image[0]: the image is 9 bytes, more than the 8 bytes an image may have"


def test_a_data_url_is_decoded_whatever_its_image_media_type() -> None:
    data = encoded(pixels(5, 3), "PNG")
    for media in ("image/png", "image/jpeg", "IMAGE/PNG;charset=x", ""):
        image = image_from_url(data_url(data, media), FIELD, LIMITS)
        assert (image.format, image.width, image.height) == ("PNG", 5, 3)
    upper = "DATA:image/png;base64," + base64.b64encode(data).decode()
    assert image_from_url(upper, FIELD, LIMITS).width == 5


@pytest.mark.parametrize(("url", "message"), [
    ("http://example.com/cat.png", "http: URLs are not fetched (this server makes no network requests); send "
     "the image inline as a data: URL, data:image/png;base64,..."),
    ("HTTPS://example.com/cat.png", "https: URLs are not fetched (this server makes no network requests); "
     "send the image inline as a data: URL, data:image/png;base64,..."),
    ("data:image/png,abc", "only base64 data: URLs are taken (data:image/png;base64,...)"),
    ("data:image/png;base64", "a data: URL needs a ',' before its data"),
    ("data:text/plain;base64,aGk=", "the data: URL holds 'text/plain', not an image"),
    ("data:image/png;base64,aGk=", "not a PNG, JPEG or WebP image (it starts with 68 69)"),
    ("file:///tmp/cat.png", "file: URLs are off; the front's --allowed-local-media-path names the folder "
     "they may read from"),
])
def test_urls_that_are_no_inline_image_are_refused_naming_the_field(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        image_from_url(url, FIELD, LIMITS)
    assert str(info.value) == f"{FIELD}: {message}"


def test_a_bare_path_or_another_scheme_is_no_image_url() -> None:
    for url, shown in (("/tmp/cat.png", "'/tmp/cat.png'"), ("blob:abc", "a blob: URL")):
        with pytest.raises(ValueError) as info:
            image_from_url(url, FIELD, LIMITS)
        assert str(info.value) == (f"{FIELD} must be a data: URL (data:image/png;base64,...) or, with the "
                                   f"front's --allowed-local-media-path, a file: URL; got {shown}")
    with pytest.raises(ValueError, match="ftp: URLs are not fetched"):
        image_from_url("ftp://host/cat.png", FIELD, LIMITS)


def test_file_urls_read_only_inside_the_allowed_folder(tmp_path: Path) -> None:
    allowed, outside = tmp_path / "media", tmp_path / "private"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "sub").mkdir()
    data = encoded(pixels(5, 3), "PNG")
    (allowed / "sub" / "cat.png").write_bytes(data)
    (outside / "secret.png").write_bytes(data)
    os.symlink(outside / "secret.png", allowed / "link.png")  # a link out of the folder
    root = local_media_root(str(allowed))
    assert root == allowed.resolve()
    image = image_from_url(f"file://{allowed}/sub/cat%2Epng", FIELD, LIMITS, root)
    assert (image.format, image.width, image.height, image.data) == ("PNG", 5, 3, data)
    assert image_from_url(f"file://localhost{allowed}/sub/cat.png", FIELD, LIMITS, root).width == 5
    escaped = f"{outside.resolve()}/secret.png is outside --allowed-local-media-path {root}"
    refused = {
        f"file://{outside}/secret.png": escaped,
        f"file://{allowed}/sub/../../private/secret.png": escaped,
        f"file://{allowed}/link.png": escaped,
        f"file://{allowed}": f"{root} is outside --allowed-local-media-path {root}",
        f"file://{allowed}/sub": f"{root}/sub is not a regular file",
        f"file://{allowed}/none.png": f"cannot open {root}/none.png: No such file or directory",
        f"file://{allowed}/a%00b.png": "the file: URL names no usable path (embedded null byte)",
        f"file://host.example{allowed}/sub/cat.png": "a file: URL names a file on this server "
                                                     "(file:///path), not on 'host.example'",
    }
    for url, message in refused.items():
        with pytest.raises(ValueError) as info:
            image_from_url(url, FIELD, LIMITS, root)
        assert str(info.value) == f"{FIELD}: {message}", url
    with pytest.raises(ValueError) as info:
        image_from_url(f"file://{allowed}/sub/cat.png", FIELD, ImageLimits(max_bytes=10), root)
    assert str(info.value) == (f"{FIELD}: the image is {len(data)} bytes, more than the 10 bytes an image "
                               "may have")


def test_the_allowed_folder_must_exist(tmp_path: Path) -> None:
    assert local_media_root("") is None
    with pytest.raises(ValueError) as info:
        local_media_root(str(tmp_path / "none"))
    assert str(info.value) == (f"--allowed-local-media-path {str(tmp_path / 'none')!r}: {tmp_path / 'none'} "
                               "is not an existing folder")
