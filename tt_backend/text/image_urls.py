"""An OpenAI `image_url` as an image: a `data:` URL, or a `file:` URL under an allowed folder.

The URL forms are vLLM's (vllm/multimodal/media/connector.py, MediaConnector): `data:` URLs per RFC
2397 with base64 data (`_load_data_url`; "Only base64 data URLs are supported"), and `file:` URLs
only under `--allowed-local-media-path` (`_load_file_url`: the resolved path, symlinks followed,
must lie below that folder), which is off unless given. Unlike vLLM, this server fetches nothing
over the network: an `http:` or `https:` URL is refused with a message that says so (the serving
machines reach no image host, and a server that fetches client-named URLs needs egress rules
vLLM spends a module on: private-address blocking, domain allow-lists, redirects).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from tt_backend.text.images import ImageInput, ImageLimits, decode_base64, decode_image

_NETWORK = ("http", "https", "ftp", "ws", "wss")


def local_media_root(path: str) -> Path | None:
    """The `--allowed-local-media-path` option: "" is off (None); else an existing folder, resolved."""
    if not path:
        return None
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise ValueError(f"--allowed-local-media-path {path!r}: {root} is not an existing folder")
    return root


def image_from_url(url: str, field: str, limits: ImageLimits, local_root: Path | None = None) -> ImageInput:
    """The image `url` holds or names; ValueError starting with `field` for anything else."""
    scheme, colon, _ = url.partition(":")
    scheme = scheme.lower() if colon and scheme.isascii() and scheme.isalnum() else ""
    if scheme == "data":
        return decode_image(_data_url(url, field, limits), field, limits)
    if scheme == "file":
        return decode_image(_local_file(url, field, limits, local_root), field, limits)
    if scheme in _NETWORK:
        raise ValueError(f"{field}: {scheme}: URLs are not fetched (this server makes no network requests); "
                         "send the image inline as a data: URL, data:image/png;base64,...")
    shown = f"a {scheme}: URL" if scheme else f"{url[:40]!r}"
    raise ValueError(f"{field} must be a data: URL (data:image/png;base64,...) or, with the front's "
                     f"--allowed-local-media-path, a file: URL; got {shown}")


def _data_url(url: str, field: str, limits: ImageLimits) -> bytes:
    """RFC 2397: data:[<mediatype>][;<param>=<value>]*;base64,<data> (as vLLM parses it)."""
    spec, comma, data = url[5:].partition(",")
    if not comma:
        raise ValueError(f"{field}: a data: URL needs a ',' before its data")
    media, semicolon, encoding = spec.rpartition(";")
    if not semicolon or encoding.strip().lower() != "base64":
        raise ValueError(f"{field}: only base64 data: URLs are taken (data:image/png;base64,...)")
    media = media.partition(";")[0].strip().lower()
    if media and not media.startswith("image/"):
        raise ValueError(f"{field}: the data: URL holds {media!r}, not an image")
    return decode_base64(data, field, limits)


def _local_file(url: str, field: str, limits: ImageLimits, root: Path | None) -> bytes:
    if root is None:
        raise ValueError(f"{field}: file: URLs are off; the front's --allowed-local-media-path names the "
                         "folder they may read from")
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{field}: a file: URL names a file on this server (file:///path), not on "
                         f"{parts.netloc[:40]!r}")
    try:
        path = Path(url2pathname(parts.path)).resolve()  # symlinks followed: the target must be inside
    except (OSError, ValueError) as exc:  # ValueError: a NUL (%00) in the path
        raise ValueError(f"{field}: the file: URL names no usable path ({exc})") from None
    if root not in path.parents:
        raise ValueError(f"{field}: {path} is outside --allowed-local-media-path {root}")
    try:
        # A link swapped in since resolve() is refused; a FIFO does not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ValueError(f"{field}: cannot open {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{field}: {path} is not a regular file")
        if info.st_size > limits.max_bytes:
            raise ValueError(f"{field}: the image is {info.st_size} bytes, more than the {limits.max_bytes} "
                             "bytes an image may have")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limits.max_bytes + 1)  # decode_image refuses it if it grew past the limit
    finally:
        os.close(fd)
