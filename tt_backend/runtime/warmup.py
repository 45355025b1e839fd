"""WarmupCoordinator: compile every configured shape, then capture every trace behind one barrier.

Capture closes the compile gate, so it must wait until every lane has compiled and registered
everything: otherwise a lane that captured early would refuse a program another lane still needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tt_backend.runtime.config import WarmupConfig
from tt_backend.runtime.executor import EagerExecutor, TracedExecutor

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaneExecutors:
    eager: EagerExecutor
    traced: TracedExecutor | None


@dataclass(frozen=True)
class WarmupReport:
    compiled: int
    captured: int
    seconds: float


class WarmupCoordinator:
    def __init__(self, config: WarmupConfig, lanes: Sequence[LaneExecutors]) -> None:
        if config.capture_shapes and any(lane.traced is None for lane in lanes):
            raise ValueError("traces are configured but a lane has no traced executor")
        self.config = config
        self.lanes = tuple(lanes)
        self._done = False

    def warmup(self) -> WarmupReport:
        """Idempotent: a second call does nothing."""
        if self._done:
            return WarmupReport(0, 0, 0.0)
        start = time.perf_counter()
        captured = {shape.key for shape in self.config.capture_shapes}
        for lane in self.lanes:
            for shape in self.config.compile_shapes:
                if shape.key in captured and lane.traced is not None:
                    lane.traced.compile(shape)
                else:
                    lane.eager.compile(shape)
        # The barrier: every lane is ready; only now may any of them capture and close its gate.
        count = sum(lane.traced.traces.capture_all() for lane in self.lanes if lane.traced is not None)
        self._done = True
        report = WarmupReport(len(self.config.compile_shapes) * len(self.lanes), count,
                              time.perf_counter() - start)
        logger.info("warmup: %d programs compiled, %d traces captured in %.1f s", report.compiled,
                    report.captured, report.seconds)
        return report
