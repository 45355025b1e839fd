"""Stale build locks of torch's extension builder.

`torch.utils.cpp_extension.load` guards a build with a `lock` file in the extension's build folder
(`torch.utils.file_baton.FileBaton`: created with O_EXCL, deleted when the build ends) and waits,
without a limit, while that file exists. A build killed mid-way (a test timeout, Ctrl-C during
`make setup`) leaves the file behind, and every later start then hangs in that wait. The file
records no owner, so its age decides: one build of a level takes under a minute on 2 busy cores,
and a lock older than `STALE_AFTER_S` belongs to no live build.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

logger = logging.getLogger(__name__)

STALE_AFTER_S = 15 * 60


def clear_stale_lock(extension_name: str, now: float | None = None) -> bool:
    """Delete the build lock of `extension_name` if it is older than STALE_AFTER_S; returns whether
    one was deleted."""
    from torch.utils.cpp_extension import _get_build_directory

    lock = Path(_get_build_directory(extension_name, False)) / "lock"
    try:
        age = (time.time() if now is None else now) - lock.stat().st_mtime
    except FileNotFoundError:
        return False
    if age < STALE_AFTER_S:
        return False
    lock.unlink(missing_ok=True)
    logger.warning("removed the stale build lock %s (%.0f min old: left by a build that was killed)",
                   lock, age / 60)
    return True
