"""Grammar compilation off the step loop: one worker thread, a deadline per request, and a cache
bounded in bytes.

The engine submits a request's constraint on admission and the request waits in skipped_waiting
until its future is done; other requests keep stepping. Requests with the same constraint share
one compile. The cache holds the compiled start state (requests copy it), so a repeated
constraint costs no compile. Compile times and cache hits are collected here for the stats, which
the engine thread drains.

What bounds it:
- Time: a request whose grammar has not compiled `timeout_s` after its submit gets
  `CompileTimeout` (naming grammar_compile_timeout_s), queued or compiling. llguidance compiles in
  native code with the GIL released and has no way to stop a compile part-way (its parser limits
  bound the work, not the time), so a compile that runs past `timeout_s` is abandoned: its thread
  finishes in the background, its result is dropped, and a fresh worker takes the queue. At most
  `MAX_ABANDONED` threads run abandoned compiles; past that the queue waits until one of them
  finishes (and the waiting requests still end at their deadlines).
- Aborts: `release` drops a request's claim. A queued compile that no other request waits for is
  cancelled; a running one runs on and its result is not cached.
- Memory: compiled start states are kept least-recently-used first within `cache_bytes`, each
  counted by `size_of` (by default `estimated_size`).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from tt_backend.sampling.structured import FIELD, StructuredOutputs

logger = logging.getLogger(__name__)

Compile = Callable[[StructuredOutputs], Any]
SizeOf = Callable[[StructuredOutputs, Any], int]
Key = tuple[str, str]

MAX_ABANDONED = 2
"""Threads that may go on running compiles abandoned past the timeout, beside the worker."""
ENTRY_BYTES = 96 << 10
BYTES_PER_SPEC_BYTE = 48


def estimated_size(constraint: StructuredOutputs, compiled: Any) -> int:
    """The bytes a cached start state holds, from its constraint's text (llguidance reports no
    size): ENTRY_BYTES plus BYTES_PER_SPEC_BYTE per byte of the constraint. Measured here with
    glibc's mallinfo2 around llguidance 1.9 compiles for the SmolLM2 tokenizer: 40-85 KiB for a
    small regex, choice, grammar or JSON schema, and 42-47 bytes per constraint byte for regexes of
    30,000-90,000 words (15-41 MiB) and an enum of 50,000 (29 MiB). The lexer states that requests'
    copies build while they decode are not counted."""
    return ENTRY_BYTES + BYTES_PER_SPEC_BYTE * len(constraint.spec.encode())


class CompileTimeout(ValueError):
    """The request's grammar did not compile within grammar_compile_timeout_s."""


class _State(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"


@dataclass(eq=False)
class _Compile:
    """One constraint's compile in flight, shared by the requests that wait for it."""

    constraint: StructuredOutputs
    state: _State = _State.QUEUED
    started: float = 0.0
    """time.monotonic() when the worker began it (RUNNING)."""
    waiters: dict[Future[Any], float] = field(default_factory=dict)
    """Each waiting request's future, with its deadline (time.monotonic())."""


@dataclass(frozen=True)
class _Cached:
    value: Any
    size: int


class GrammarCompiler:
    def __init__(self, compile_fn: Compile, timeout_s: float = 10.0, cache_bytes: int = 64 << 20,
                 size_of: SizeOf = estimated_size) -> None:
        self._compile = compile_fn
        self._timeout_s = timeout_s
        self._cache_bytes = cache_bytes
        self._size_of = size_of
        self._cache: OrderedDict[Key, _Cached] = OrderedDict()  # least recently used first
        self._cache_used = 0
        self._inflight: dict[Key, _Compile] = {}
        self._queue: deque[_Compile] = deque()
        self._waiting: dict[Future[Any], _Compile] = {}
        self._running: _Compile | None = None
        self._worker: threading.Thread | None = None
        self._timer: threading.Thread | None = None
        self._abandoned = 0
        self._stopping = False
        self._cv = threading.Condition()
        self._compile_seconds: list[float] = []
        self._hits = 0

    # ---- the engine's calls (any thread) --------------------------------------------------------
    def submit(self, constraint: StructuredOutputs) -> Future[Any]:
        """This request's compiled start state, now or later. The future holds the compile's
        ValueError, or CompileTimeout past timeout_s; `release` it if the request ends first."""
        future: Future[Any] = Future()
        key = constraint.key
        with self._cv:
            if self._stopping:
                future.set_exception(RuntimeError("the grammar compiler is shut down"))
                return future
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self._hits += 1
                future.set_result(cached.value)
                return future
            job = self._inflight.get(key)
            if job is None:
                job = self._inflight[key] = _Compile(constraint)
                self._queue.append(job)
            else:
                self._hits += 1  # shares the compile in flight
            job.waiters[future] = time.monotonic() + self._timeout_s
            self._waiting[future] = job
            self._start_threads()
            self._cv.notify_all()
        return future

    def release(self, future: Future[Any]) -> None:
        """The request waiting on `future` has ended (a no-op once the future is done): a queued
        compile no other request waits for is cancelled; a running one's result is not cached."""
        with self._cv:
            job = self._waiting.pop(future, None)
            if job is None:
                return
            del job.waiters[future]
            future.cancel()
            self._drop_if_unwanted(job)

    @property
    def num_waiting(self) -> int:
        """Requests whose compile is queued or running."""
        with self._cv:
            return len(self._waiting)

    @property
    def cached(self) -> list[Key]:
        """The cached constraints' keys, least recently used first."""
        with self._cv:
            return list(self._cache)

    @property
    def cache_used(self) -> int:
        """The bytes the cached entries count for (by `size_of`)."""
        with self._cv:
            return self._cache_used

    def take_stats(self) -> tuple[list[float], int]:
        """Compile times and cache hits since the last call."""
        with self._cv:
            seconds, self._compile_seconds = self._compile_seconds, []
            hits, self._hits = self._hits, 0
        return seconds, hits

    def shutdown(self) -> None:
        """Stop the threads and cancel what still waits (the engine has ended those requests). A
        compile in progress finishes in its thread, unobserved."""
        with self._cv:
            self._stopping = True
            for future in self._waiting:
                future.cancel()
            self._waiting.clear()
            self._queue.clear()
            self._inflight.clear()
            self._cv.notify_all()

    # ---- the threads (all state under self._cv) ----------------------------------------------
    def _start_threads(self) -> None:
        if self._timer is None:
            self._timer = threading.Thread(target=self._watch, name="tt-grammar-timer", daemon=True)
            self._timer.start()
        if self._worker is None and self._abandoned < MAX_ABANDONED:
            self._worker = threading.Thread(target=self._work, name="tt-grammar", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cv:
                while not self._stopping and self._worker is me and not self._queue:
                    self._cv.wait()
                if self._stopping or self._worker is not me:
                    return
                job = self._queue.popleft()
                job.state, job.started = _State.RUNNING, time.monotonic()
                self._running = job
                self._cv.notify_all()  # the timer now watches this compile
            start = time.perf_counter()
            value: Any = None
            error: Exception | None = None
            try:
                value = self._compile(job.constraint)
            except Exception as exc:  # noqa: BLE001 (it goes to the requests that wait for it)
                error = exc
            with self._cv:
                self._compile_seconds.append(time.perf_counter() - start)
                if self._stopping:
                    return
                if self._running is not job:  # abandoned past timeout_s: its requests have their error
                    self._abandoned -= 1
                    if self._worker is not None or self._stopping:
                        return
                    self._worker = me  # MAX_ABANDONED kept a fresh worker from starting: serve again
                    continue
                self._running = None
                del self._inflight[job.constraint.key]
                waiters = list(job.waiters)
                for future in waiters:
                    del self._waiting[future]
                if error is None and waiters:  # a failed compile is not cached: the next one retries
                    self._store(job.constraint, value)
                self._cv.notify_all()
            for future in waiters:
                if error is None:
                    future.set_result(value)
                else:
                    future.set_exception(error)

    def _watch(self) -> None:
        """The timer: ends requests at their deadlines and abandons a compile past timeout_s."""
        with self._cv:
            while not self._stopping:
                wake = self._expire(time.monotonic())
                self._cv.wait(None if wake is None else max(0.0, wake - time.monotonic()))

    def _expire(self, now: float) -> float | None:
        """Apply what is due at `now`; return when the next thing falls due (None: nothing)."""
        running = self._running
        if running is not None and now - running.started >= self._timeout_s:
            self._abandon(running)
        due = [future for future, job in self._waiting.items() if job.waiters[future] <= now]
        for future in due:
            job = self._waiting.pop(future)
            del job.waiters[future]
            future.set_exception(self._timeout())
            self._drop_if_unwanted(job)
        times = [job.waiters[future] for future, job in self._waiting.items()]
        if self._running is not None:
            times.append(self._running.started + self._timeout_s)
        return min(times, default=None)

    def _abandon(self, job: _Compile) -> None:
        """A compile ran past timeout_s and cannot be stopped: end its requests, leave its thread
        to finish on its own (its result dropped), and hand the queue to a fresh worker."""
        logger.warning("a %s grammar compile (%d bytes) ran past grammar_compile_timeout_s=%g s; its "
                       "thread is left to finish and a fresh worker takes the queue",
                       job.constraint.kind.value, len(job.constraint.spec.encode()), self._timeout_s)
        self._running = None
        self._abandoned += 1
        del self._inflight[job.constraint.key]
        for future in job.waiters:
            del self._waiting[future]
            future.set_exception(self._timeout())
        job.waiters.clear()
        self._worker = None
        self._start_threads()

    def _drop_if_unwanted(self, job: _Compile) -> None:
        if not job.waiters and job.state is _State.QUEUED:
            self._queue.remove(job)
            del self._inflight[job.constraint.key]

    def _store(self, constraint: StructuredOutputs, value: Any) -> None:
        """Cache a compiled start state, evicting the least recently used past cache_bytes."""
        size = self._size_of(constraint, value)
        if size > self._cache_bytes:
            return  # larger than the whole cache: served to its requests, not kept
        replaced = self._cache.pop(constraint.key, None)
        self._cache_used += size - (replaced.size if replaced is not None else 0)
        self._cache[constraint.key] = _Cached(value, size)
        while self._cache_used > self._cache_bytes:
            _, evicted = self._cache.popitem(last=False)
            self._cache_used -= evicted.size

    def _timeout(self) -> CompileTimeout:
        return CompileTimeout(f"{FIELD}: the grammar did not compile within "
                              f"grammar_compile_timeout_s={self._timeout_s:g} s")
