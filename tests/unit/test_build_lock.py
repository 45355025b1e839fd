"""A killed native build's lock file is removed once it is stale, never while a build may hold it; every
build runs the same ninja."""

import os
import time
from pathlib import Path

import pytest

from tt_backend.devices.cpu import build_lock
from tt_backend.devices.cpu.build_lock import STALE_AFTER_S, clear_stale_lock


@pytest.fixture
def lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    folder = tmp_path / "tt_backend_test_kernels"
    folder.mkdir()
    return folder / "lock"


def test_a_fresh_lock_is_kept(lock: Path) -> None:
    lock.touch()
    assert not clear_stale_lock("tt_backend_test_kernels")
    assert lock.exists()


def test_a_stale_lock_is_removed(lock: Path, caplog: pytest.LogCaptureFixture) -> None:
    lock.touch()
    old = time.time() - STALE_AFTER_S - 1
    os.utime(lock, (old, old))
    with caplog.at_level("WARNING", logger=build_lock.__name__):
        assert clear_stale_lock("tt_backend_test_kernels")
    assert not lock.exists()
    assert "removed the stale build lock" in caplog.text and str(lock) in caplog.text


def test_no_lock_is_nothing_to_do(lock: Path) -> None:
    assert not clear_stale_lock("tt_backend_test_kernels")


def test_every_build_runs_the_ninja_wheels_ninja(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ninja 1.11 (Debian's) and 1.13 (the wheel's) read each other's build logs as changed commands:
    whichever came first on PATH rebuilt every level the other had built. The wheel's goes first."""
    import shutil

    import ninja

    from tt_backend.devices.cpu.kernels import _ninja_first_on_path

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    _ninja_first_on_path()
    assert os.environ["PATH"] == f"{ninja.BIN_DIR}{os.pathsep}/usr/bin:/bin"
    assert shutil.which("ninja") == str(Path(ninja.BIN_DIR) / "ninja")
    _ninja_first_on_path()  # already first: PATH unchanged
    assert os.environ["PATH"] == f"{ninja.BIN_DIR}{os.pathsep}/usr/bin:/bin"
