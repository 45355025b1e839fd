"""The torch device: CPU by default, CUDA when present (or asked for).

It implements `devices.device.Device`, the protocol a ttnn mesh device implements too:
- `allocate` and `copy_in`: persistent tensors and in-place refreshes of them;
- `capture(step, inputs)`: record a `StagedStep` once over persistent input tensors (begin/end
  trace capture); the returned `Capture` replays it after the caller refreshed those inputs;
- `launch(work)`: enqueue work in device order and return a `Launched` whose `host()` blocks
  until the result is on the host (an asynchronous read with an event to wait on);
- `synchronize()`, and `release()` of captures and the device queue.

CPU capture is a TorchScript trace of the step (measured fastest here; see `capture_cpu`), CUDA
capture is a CUDA graph. CPU work launched asynchronously runs on one device thread, in order,
like a device command queue; CUDA work is launched inline (kernels are asynchronous already).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import queue
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future

import torch

from tt_backend.devices.device import Capture, Launched, StagedStep, StepFn

_Graph = torch.jit.ScriptFunction | torch.jit.ScriptModule
_Jobs = queue.SimpleQueue[tuple[Callable[[], torch.Tensor], Future[torch.Tensor]] | None]


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


class _ComposedCapture:
    """A two-stage step replayed as its body's graph, then its head's graph on the body's output."""

    def __init__(self, body: _ScriptCapture, head: StepFn, head_inputs: tuple[torch.Tensor, ...]) -> None:
        self._body: _ScriptCapture | None = body
        self._head = head
        self._head_inputs = head_inputs

    def replay(self) -> torch.Tensor:
        assert self._body is not None, "replay of a released capture"
        logits = self._body.replay()
        with torch.jit.optimized_execution(False):
            out: torch.Tensor = self._head(logits, *self._head_inputs)
        return out

    def release(self) -> None:
        if self._body is not None:
            self._body.release()
        self._body = None
        self._head_inputs = ()


class _ScriptCapture:
    """A TorchScript graph of the step bound to persistent inputs of one geometry.

    The traced graph records shapes as `aten::size` ops, so one graph serves every geometry of the
    same function: capturing 60 decode shapes traces once (a trace costs ~1 s). The graph runs
    without the profiling executor's optimisations: with several shapes over one graph they
    changed greedy tokens, and at batch 1 and 32 they made no measurable speed difference."""

    def __init__(self, graph: torch.jit.ScriptFunction | torch.jit.ScriptModule,
                 inputs: tuple[torch.Tensor, ...]) -> None:
        self._graph: torch.jit.ScriptFunction | torch.jit.ScriptModule | None = graph
        self._inputs = inputs

    def replay(self) -> torch.Tensor:
        assert self._graph is not None, "replay of a released capture"
        with torch.jit.optimized_execution(False):
            out: torch.Tensor = self._graph(*self._inputs)
        return out

    def release(self) -> None:
        self._graph = None
        self._inputs = ()


class _GraphCapture:
    def __init__(self, graph: torch.cuda.CUDAGraph, output: torch.Tensor) -> None:
        self._graph: torch.cuda.CUDAGraph | None = graph
        self._output = output

    def replay(self) -> torch.Tensor:
        assert self._graph is not None, "replay of a released capture"
        self._graph.replay()
        return self._output

    def release(self) -> None:
        if self._graph is not None:
            self._graph.reset()
        self._graph = None


class _Ready:
    def __init__(self, value: torch.Tensor) -> None:
        self._value = value

    def host(self) -> torch.Tensor:
        return self._value

    def device_value(self) -> torch.Tensor:
        return self._value


class _FromThread:
    def __init__(self, future: Future[torch.Tensor]) -> None:
        self._future = future

    def host(self) -> torch.Tensor:
        return self._future.result()

    def device_value(self) -> torch.Tensor:
        return self._future.result()


class _CudaRead:
    def __init__(self, value: torch.Tensor, host: torch.Tensor, event: torch.cuda.Event) -> None:
        self._value, self._host, self._event = value, host, event

    def host(self) -> torch.Tensor:
        self._event.synchronize()
        return self._host

    def device_value(self) -> torch.Tensor:
        return self._value


class TorchDevice:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.kind = device.type
        self._graphs: dict[StepFn, torch.jit.ScriptFunction | torch.jit.ScriptModule] = {}
        self._pool: tuple[int, int] | None = None
        self._queue: _Jobs | None = None
        self._worker: threading.Thread | None = None

    # ---- capture ------------------------------------------------------------------------------
    @property
    def captures_largest_first(self) -> bool:
        """The order that suits this device: CUDA graphs largest first, so later ones reuse the
        first's memory pool; CPU traces smallest first, since the first capture of a step runs it
        (tracing, and the sampling heads' example): at the largest prefill shape (2048 tokens) that
        took ~2 s a run, at the smallest milliseconds."""
        return self.kind == "cuda"

    # ---- persistent tensors ---------------------------------------------------------------------
    def allocate(self, shape: Sequence[int], dtype: torch.dtype, fill: float | int = 0) -> torch.Tensor:
        return torch.full(tuple(shape), fill, dtype=dtype, device=self.device)

    def copy_in(self, host: torch.Tensor, into: torch.Tensor) -> None:
        into.copy_(host, non_blocking=True)

    def capture(self, step: StagedStep, inputs: Sequence[torch.Tensor]) -> Capture:
        inputs = tuple(inputs)
        if self.kind == "cuda":
            return self._capture_cuda(step, inputs)
        return self._capture_cpu(step, inputs)

    def _capture_cpu(self, step: StagedStep, inputs: tuple[torch.Tensor, ...]) -> Capture:
        # Measured on the default model (bench/decode.py): a TorchScript trace removes the Python
        # dispatch of ~900 ops per step; torch.compile (inductor) took 72 s per shape to compile
        # and ran 1.6 s per step (it copies the whole KV cache it mutates), so it is not used.
        head = step.head
        if head is None:
            return _ScriptCapture(self._trace(step.body, inputs), inputs)
        # A two-stage step (the model, then sampling): the model's trace (~1 s) is shared by every
        # stage after it, and each head traces in milliseconds.
        body_capture = _ScriptCapture(self._trace(step.body, inputs), inputs)
        head_inputs = inputs[step.head_from:]
        if not step.head_traceable:  # it branches on the host: runs as it is
            return _ComposedCapture(body_capture, head, head_inputs)
        graph = self._graphs.get(head)
        if graph is None:
            with torch.inference_mode():
                example = body_capture.replay()
            graph = self._trace(head, (example, *head_inputs))
        return _ComposedCapture(body_capture, graph, head_inputs)

    def _trace(self, fn: StepFn, inputs: tuple[torch.Tensor, ...]) -> _Graph:
        graph = self._graphs.get(fn)
        if graph is None:
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch.jit: see above
                graph = torch.jit.trace(fn, inputs, check_trace=False)
            self._graphs[fn] = graph
        return graph

    def _capture_cuda(self, fn: StagedStep, inputs: tuple[torch.Tensor, ...]) -> Capture:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.inference_mode():
            fn(*inputs)  # warm up kernels and workspaces outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph, pool=self._pool):  # type: ignore[arg-type]
            output = fn(*inputs)
        return _GraphCapture(graph, output)

    # ---- ordered launches and reads --------------------------------------------------------------
    def launch(self, work: Callable[[], torch.Tensor], asynchronous: bool) -> Launched:
        """Run `work` in device order. Asynchronous CPU work runs on the device thread; CUDA work
        is launched here and its result copied to pinned host memory behind an event."""
        if self.kind == "cuda":
            out = work()
            host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
            host.copy_(out, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            read = _CudaRead(out, host, event)
            if not asynchronous:
                read.host()
            return read
        if not asynchronous:
            self.synchronize()
            return _Ready(work())
        future: Future[torch.Tensor] = Future()
        self._device_queue().put((work, future))
        return _FromThread(future)

    def synchronize(self) -> None:
        """Block until every launched piece of work has finished."""
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
        elif self._queue is not None:
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
        if self.kind == "cpu" and _LIBC is not None:
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

