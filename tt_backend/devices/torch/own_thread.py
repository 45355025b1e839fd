"""`on_own_thread`: run a piece of torch work on a thread of its own that ends with it.

Why: torch's CPU ops run their parallel regions on OpenMP, and with GNU libgomp (torch's own
runtime) a thread that has run a parallel region keeps its pool of OpenMP workers until it ends.
While two such threads live, libgomp manages more threads than there are CPUs and shortens its
spin-wait, so its workers sleep and are woken region by region: every region in either thread costs
about 90 us more (OMP_WAIT_POLICY and GOMP_SPINCOUNT do not lift that throttle). A prefill of 100
tokens of the default model took 52 ms on the engine thread after the weights had been loaded and
the steps warmed up on the main thread, and 30 ms once that happened on a thread that had ended
(2-core Xeon with AMX, libgomp; `bench/openmp_threads.py` measures it on any machine). The torch
engine is built here, so that the one thread that steps it is the only one with a pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def on_own_thread(fn: Callable[[], T], name: str) -> T:
    """Run `fn` on a new thread named `name`, wait for it to end, and return what `fn` returned
    (or raise what it raised)."""
    result: list[T] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # re-raised on the caller's thread
            error.append(exc)

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]
