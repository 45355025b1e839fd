"""What memory a torch device has free, and the peak a piece of work reached: the readings the
KV cache's late sizing takes (`kv_cache_memory_bytes=auto`, tt_backend/assembly/kv_sizing.py).

- CUDA: `torch.cuda.mem_get_info` (free bytes on the device) and the caching allocator's peak
  (`reset_peak_memory_stats` / `max_memory_allocated`).
- CPU: the memory the kernel says can be handed out without swapping (`MemAvailable` in
  /proc/meminfo), bounded by the cgroup's limit when the process runs under one (a container's
  `memory.max` less its `memory.current`), and the process's resident high-water mark (`VmHWM` in
  /proc/self/status, reset by writing 5 to /proc/self/clear_refs) over the work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")
_CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class PeakReading:
    bytes: int
    """How far the work raised the memory in use above where it started."""
    how: str
    """Which counter measured it (for the log)."""


def free_bytes(device: torch.device) -> tuple[int, str]:
    """Bytes the device can still allocate, and where the number comes from."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free), "cuda mem_get_info"
    available = _meminfo_kib("MemAvailable") * 1024
    limit = _cgroup_room()
    if limit is not None and limit < available:
        return limit, "cgroup memory.max - memory.current"
    return available, "MemAvailable"


def measure_peak(device: torch.device, work: Callable[[], T]) -> tuple[T, PeakReading]:
    """Run `work` and read how far above its starting point the memory in use peaked."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        result = work()
        torch.cuda.synchronize(device)
        return result, PeakReading(max(0, torch.cuda.max_memory_allocated(device) - start),
                                   "cuda max_memory_allocated")
    reset = _reset_hwm()
    start = _status_kib("VmRSS")
    result = work()
    if reset:
        return result, PeakReading(max(0, _status_kib("VmHWM") - start) * 1024, "VmHWM")
    # No high-water-mark reset here (clear_refs refused): the resident growth that stayed.
    return result, PeakReading(max(0, _status_kib("VmRSS") - start) * 1024, "VmRSS growth")


def _meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/meminfo has no {key}")


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup v2 memory limit; None without a limit."""
    try:
        own = Path("/proc/self/cgroup").read_text(encoding="utf-8").strip().splitlines()
        relative = next(line.split(":", 2)[2] for line in own if line.startswith("0::"))
        folder = _CGROUP / relative.lstrip("/")
        limit = (folder / "memory.max").read_text(encoding="utf-8").strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((folder / "memory.current").read_text(encoding="utf-8")))
    except (OSError, StopIteration, ValueError):
        return None


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5", encoding="utf-8")
    except OSError:
        return False
    return True
