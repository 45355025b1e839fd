"""The step watchdog: a thread of its own that fails the engine when a step runs past
step_timeout_s.

The engine thread stays where it hangs (a hung device call cannot be interrupted from Python);
the verdict goes to the engine, whose failure listener ends every request in flight, and the model
instance exits (tt_backend/triton/llm_model.py), as a hung device leaves no other way out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tt_backend.scheduler.scheduled_step import ScheduledStep

logger = logging.getLogger(__name__)


class StepTimeout(RuntimeError):
    """A step ran past step_timeout_s (the watchdog's verdict)."""


class Watchdog:
    def __init__(self, timeout_s: int, current_step: Callable[[], ScheduledStep | None],
                 on_timeout: Callable[[StepTimeout], None], stop: threading.Event) -> None:
        """`timeout_s` 0: no watchdog (no thread; `timing` still costs only two stores).
        `current_step`: the step the pipeline last handed over or waited on (named in the verdict).
        `on_timeout`: called once, on the watchdog's thread. `stop`: set at shutdown, ends the thread."""
        self.timeout_s = timeout_s
        self._current_step = current_step
        self._on_timeout = on_timeout
        self._stop = stop
        self._started: float | None = None
        """When the step running now began; None between steps (written by the engine thread only)."""
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        assert self._thread is None
        if self.timeout_s > 0:
            self._thread = threading.Thread(target=self._watch, name="tt-watchdog", daemon=True)
            self._thread.start()

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Time the step run inside the block."""
        self._started = time.monotonic()
        try:
            yield
        finally:
            self._started = None

    def _watch(self) -> None:
        timeout = self.timeout_s
        while not self._stop.wait(min(1.0, timeout / 4)):
            started = self._started
            if started is None or time.monotonic() - started <= timeout:
                continue
            step = self._current_step()
            what = f"the {step.mode} step of {len(step.request_ids)} request(s)" if step else "a step"
            exc = StepTimeout(f"{what} has run {time.monotonic() - started:.1f} s, past "
                              f"step_timeout_s={timeout}: the device or the model is hung")
            logger.critical("%s; the engine fails", exc)
            self._on_timeout(exc)
            return
