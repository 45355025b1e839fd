"""OutputReader: blocking reads, and asynchronous reads that hand back a handle to complete later.

An asynchronous read is launched work whose result lands in a host destination behind an event
(`Device.launch`); the reader owns it until `complete` returns the host value. `drain`
waits for and retires whatever was never completed (cleanup, or a pipeline that stopped).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeVar

import torch

from tt_backend.devices.device import Device, Launched

T = TypeVar("T")


class OutputReader:
    def __init__(self, device: Device) -> None:
        self._device = device
        self._pending: dict[int, Launched] = {}
        self._ids = itertools.count()

    def read(self, work: Callable[[], torch.Tensor]) -> torch.Tensor:
        """Run `work` after everything launched before it; return its result on the host."""
        return self._device.launch(work, asynchronous=False).host()

    def after_launched(self, work: Callable[[], T]) -> T:
        """Run `work` once everything launched before it has finished, where the device runs its
        work (`Device.run_in_order`); return what it returns (the host path: its logits stay where
        the device put them)."""
        return self._device.run_in_order(work)

    def submit(self, work: Callable[[], torch.Tensor]) -> int:
        handle = next(self._ids)
        self._pending[handle] = self._device.launch(work, asynchronous=True)
        return handle

    def launched(self, handle: int) -> Launched:
        """The pending read (for work launched later that consumes its result in device order)."""
        return self._pending[handle]

    def complete(self, handle: int) -> torch.Tensor:
        return self._pending.pop(handle).host()

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def drain(self) -> int:
        """Wait for every pending read and drop it; return how many there were. A failed read is
        dropped too (its error belongs to whoever stopped waiting for it)."""
        pending, self._pending = self._pending, {}
        for launched in pending.values():
            try:
                launched.host()
            except Exception:  # noqa: S110  (retired unread on purpose)
                pass
        return len(pending)
