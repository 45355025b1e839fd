"""Grammar compilation off the step loop: one worker thread and a cache keyed by the constraint.

The engine submits a request's constraint on admission and the request waits in skipped_waiting
until its compile is done; other requests keep stepping. The cache holds the compiled start
state (requests copy it), so a repeated schema costs no compile. Compile times and cache hits are
collected here for the stats, which the engine thread drains.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tt_backend.sampling.structured import StructuredOutputs

Compile = Callable[[StructuredOutputs], Any]


class GrammarCompiler:
    def __init__(self, compile_fn: Compile, cache_size: int = 256) -> None:
        self._compile = compile_fn
        self._cache: OrderedDict[tuple[str, str], Future[Any]] = OrderedDict()
        self._cache_size = cache_size
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._compile_seconds: list[float] = []
        self._hits = 0

    def submit(self, constraint: StructuredOutputs) -> Future[Any]:
        """The compiled start state, now or later; a failed compile's future holds its ValueError."""
        key = constraint.key
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self._hits += 1
                return cached
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="tt-grammar")
            future = self._pool.submit(self._timed, constraint)
            self._cache[key] = future
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return future

    def _timed(self, constraint: StructuredOutputs) -> Any:
        start = time.perf_counter()
        try:
            return self._compile(constraint)
        except Exception:
            with self._lock:  # a failed compile is not cached: the next request tries again
                self._cache.pop(constraint.key, None)
            raise
        finally:
            with self._lock:
                self._compile_seconds.append(time.perf_counter() - start)

    def take_stats(self) -> tuple[list[float], int]:
        """Compile times and cache hits since the last call."""
        with self._lock:
            seconds, self._compile_seconds = self._compile_seconds, []
            hits, self._hits = self._hits, 0
        return seconds, hits

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
