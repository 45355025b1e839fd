"""The torch devices: CPU by default, CUDA when present (or asked for), one class each.

Both implement `devices.device.Device`, the protocol a ttnn mesh device implements too: `allocate`
and `copy_in` (persistent tensors, refreshed in place); `capture(step, inputs)` (record a
`StagedStep` once over persistent inputs; the `Capture` replays it after they are refreshed);
`launch(work)` (enqueue in device order; `Launched.host()` blocks until the result is on the host);
`synchronize()` and `release()`; the policy properties, each value with its reason where it is set.

`TorchDevice.for_device` picks the class once. CPU capture is a TorchScript trace of the step
(measured fastest here; `CpuTorchDevice.capture`), CUDA capture a CUDA graph. CPU work launched
asynchronously runs in order on one device thread, like a command queue (all of an engine's work,
once it started that thread: `start_device_thread`); CUDA work is launched inline.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import queue
import threading
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import torch

from tt_backend.contract.modes import TraceMode
from tt_backend.devices.device import Capture, Launched, StagedStep, StepFn
from tt_backend.devices.torch.captures import (
    ComposedCapture,
    CudaRead,
    FromThread,
    Graph,
    GraphCapture,
    Ready,
    ScriptCapture,
    inlined,
)

T = TypeVar("T")
_Jobs = queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None]


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


_LIBC = _glibc()


def select_device(name: str) -> torch.device:
    """The torch device for `name` (auto: CUDA when torch sees one, else the CPU)."""
    assert name != "tt", "device=tt is a ttnn mesh (devices/tt/mesh.py), not a torch device"
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no CUDA device")
    return torch.device(name)


class TorchDevice(ABC):
    """A torch device: persistent tensors in torch's memory, refreshed in place. Build one with
    `for_device`; `CpuTorchDevice` and `CudaTorchDevice` state their policy and how they capture,
    launch and synchronize."""

    captures_largest_first: bool
    default_trace_mode: TraceMode
    dense_prefill_shapes: bool
    max_prefill_tokens: int | None  # the option's default (None: max_num_batched_tokens)
    step_may_branch_on_host: bool
    auto_kv_cache_cap: int | None
    """The most an auto-sized KV cache (kv_cache_memory_bytes=auto) takes here; None: no cap."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @staticmethod
    def for_device(device: torch.device) -> TorchDevice:
        """The device class of `device`'s kind (cpu or cuda), decided here once."""
        if device.type == "cuda":
            return CudaTorchDevice(device)
        if device.type == "cpu":
            return CpuTorchDevice(device)
        raise ValueError(f"device={device.type!r}: the torch devices are cpu and cuda")

    # ---- persistent tensors ---------------------------------------------------------------------
    def allocate(self, shape: Sequence[int], dtype: torch.dtype, fill: float | int = 0) -> torch.Tensor:
        return torch.full(tuple(shape), fill, dtype=dtype, device=self.device)

    def copy_in(self, host: torch.Tensor, into: torch.Tensor) -> None:
        into.copy_(host, non_blocking=True)

    # ---- what each kind does its own way ---------------------------------------------------------
    @abstractmethod
    def capture(self, step: StagedStep, inputs: Sequence[torch.Tensor]) -> Capture: ...

    @abstractmethod
    def launch(self, work: Callable[[], torch.Tensor], asynchronous: bool) -> Launched: ...

    @abstractmethod
    def synchronize(self) -> None:
        """Block until every launched piece of work has finished."""

    def run_in_order(self, work: Callable[[], T]) -> T:
        """Run host work once every launched piece of work has finished; return what it returns."""
        self.synchronize()
        return work()

    @abstractmethod
    def start_device_thread(self) -> None:
        """Run all work on a device thread of its own from now on, where the device has one."""

    @abstractmethod
    def return_free_host_memory(self) -> None: ...

    @abstractmethod
    def release(self) -> None: ...


class CpuTorchDevice(TorchDevice):
    """The host CPU: steps captured as TorchScript graphs, asynchronous work on one device thread."""

    captures_largest_first = False
    """Smallest first: the first capture of a step runs it (tracing, and the sampling heads' example):
    at the largest prefill shape (2048 tokens) that took ~2 s a run, at the smallest milliseconds."""
    default_trace_mode = TraceMode.ALL
    """Every step: one TorchScript graph serves all shapes of a step, so capturing the ~1000 shapes
    of the default model takes under 2 s."""
    dense_prefill_shapes = True
    """One graph per step function serves every shape, so denser waves cost only their capture (the
    default model's 293 prefill shapes became 1185, its build 3.6 -> 3.8 s)."""
    max_prefill_tokens = 256
    """Prefill runs at the CPU's matmul peak (8 100-token rows took 56 ms a row, 2 rows 65), so a
    burst prefilled a few prompts a step gets first tokens sooner: 2-core Zen 4, against 2048, TTFT
    p50 at 8 concurrent 352 vs 511 ms, at 32 1144 vs 1366 ms, output tok/s 2-3% lower."""
    step_may_branch_on_host = True
    """The step runs on the host: deciding there costs no device round trip."""
    auto_kv_cache_cap = 4 << 30
    """Host memory is shared and grows after the cache is sized: half the free RAM (11 GiB for the
    default model in float32 on 24 GiB) got the process OOM-killed when other servers started
    beside it. vLLM's CPU backend reserves a fixed 4 GiB (VLLM_CPU_KVCACHE_SPACE) by default."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self._graphs: dict[StepFn, Graph] = {}
        self._queue: _Jobs | None = None
        self._worker: threading.Thread | None = None

    def capture(self, step: StagedStep, inputs: Sequence[torch.Tensor]) -> Capture:
        # Measured on the default model (bench/decode.py): a TorchScript trace removes the Python
        # dispatch of ~900 ops per step; torch.compile (inductor) took 72 s per shape to compile
        # and ran 1.6 s per step (it copies the whole KV cache it mutates), so it is not used.
        inputs = tuple(inputs)
        head = step.head
        if head is None:
            return ScriptCapture(self._trace(step.body, inputs), inputs)
        # A two-stage step (the model, then sampling): the model's trace (~1 s) is shared by every
        # stage after it, and each head traces in milliseconds.
        body_capture = ScriptCapture(self._trace(step.body, inputs), inputs)
        head_inputs = inputs[step.head_from:]
        if not step.head_traceable:  # it branches on the host: runs as it is
            return ComposedCapture(body_capture, head, head_inputs)
        graph = self._graphs.get(head)
        if graph is None:
            with torch.inference_mode():
                example = body_capture.replay()
            graph = self._trace(head, (example, *head_inputs))
        return ComposedCapture(body_capture, graph, head_inputs)

    def _trace(self, fn: StepFn, inputs: tuple[torch.Tensor, ...]) -> Graph:
        graph = self._graphs.get(fn)
        if graph is None:
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch.jit: see above
                graph = inlined(torch.jit.trace(fn, inputs, check_trace=False))
            self._graphs[fn] = graph
        return graph

    def start_device_thread(self) -> None:
        """Run all work on the device thread from now on (an engine that launches asynchronously
        calls this before its first step): blocking work and host work too, not only what is
        launched asynchronously, or two threads would run torch's parallel regions, and with libgomp
        every region in either costs ~90 us more (`devices/torch/own_thread.py`): async decode ran
        at half the synchronous speed."""
        self._device_queue()

    def launch(self, work: Callable[[], torch.Tensor], asynchronous: bool) -> Launched:
        """Run `work` in device order: on the device thread behind the work before it, or, blocking
        while there is no device thread, here."""
        if not asynchronous:
            return Ready(self.run_in_order(work))
        future: Future[torch.Tensor] = Future()
        self._device_queue().put((work, future))
        return FromThread(future)

    def run_in_order(self, work: Callable[[], T]) -> T:
        if self._queue is None:
            return work()
        future: Future[T] = Future()
        self._queue.put((work, future))
        return future.result()

    def synchronize(self) -> None:
        if self._queue is not None:
            done: Future[torch.Tensor] = Future()
            self._queue.put((lambda: torch.empty(0), done))
            done.result()

    def release(self) -> None:
        """Stop the device thread and drop traced graphs; idempotent."""
        if self._queue is not None and self._worker is not None:
            self._queue.put(None)
            self._worker.join()
        self._queue, self._worker = None, None
        self._graphs.clear()
        self.return_free_host_memory()

    def return_free_host_memory(self) -> None:
        """Hand the host allocator's free memory back to the system (glibc's malloc_trim).

        Tracing and capturing the prefill steps allocates ~1.4 GB of temporaries (the default
        model in fp32) that glibc keeps after they are freed; a process that builds engines one
        after another (the tests) grew by that much per engine until it ran out of memory."""
        if _LIBC is not None:
            _LIBC.malloc_trim(0)

    def _device_queue(self) -> _Jobs:
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            self._worker = threading.Thread(target=self._serve, args=(self._queue,), name="tt-device",
                                            daemon=True)
            self._worker.start()
        return self._queue

    @staticmethod
    def _serve(jobs: _Jobs) -> None:
        while (job := jobs.get()) is not None:
            work, future = job
            try:
                with torch.inference_mode():
                    future.set_result(work())
            except BaseException as exc:  # handed to whoever reads the result
                future.set_exception(exc)


class CudaTorchDevice(TorchDevice):
    """A CUDA GPU: steps captured as CUDA graphs in one shared pool, work launched inline."""

    captures_largest_first = True
    """Largest first, so later CUDA graphs reuse the first's memory pool."""
    default_trace_mode = TraceMode.DECODE_ONLY
    """Decode only: every shape is a CUDA graph of its own, with its own capture and memory."""
    dense_prefill_shapes = False
    """Each shape costs a graph (memory) or a compiled program (time): waves pad to powers of two."""
    max_prefill_tokens = None
    """A GPU prefills a batch of prompts in about the time of one: the whole budget."""
    step_may_branch_on_host = False
    """A step is one CUDA graph: a host decision inside it would synchronize, and cannot be captured."""
    auto_kv_cache_cap = None
    """The GPU's memory is the engine's own: the fraction of what is free is the budget (vLLM's
    gpu_memory_utilization idea)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self._pool: tuple[int, int] | None = None

    def capture(self, step: StagedStep, inputs: Sequence[torch.Tensor]) -> Capture:
        inputs = tuple(inputs)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.inference_mode():
            step(*inputs)  # warm up kernels and workspaces outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph, pool=self._pool):  # type: ignore[arg-type]
            output = step(*inputs)
        return GraphCapture(graph, output)

    def start_device_thread(self) -> None:
        """Nothing: CUDA work is launched inline, its kernels run asynchronously already."""

    def launch(self, work: Callable[[], torch.Tensor], asynchronous: bool) -> Launched:
        """Launch `work` here and copy its result to pinned host memory behind an event."""
        out = work()
        host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        host.copy_(out, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        read = CudaRead(out, host, event)
        if not asynchronous:
            read.host()
        return read

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def release(self) -> None:
        """Nothing to stop: each CUDA graph is released with its capture."""

    def return_free_host_memory(self) -> None:
        """Nothing to hand back: the captures' temporaries live in CUDA's caching allocator."""
