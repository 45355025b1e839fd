"""TraceCompiler: capture plans, capture, replay and release of traced steps.

A trace belongs to one compiled program shape and owns that shape's persistent device inputs.
Replay copies a prepared step's host inputs into them in place, then replays. A shape without a
captured trace is a `TraceCoverageError`, raised by `preflight` before any step of the call runs
(so before any KV write), never an eager fallback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.contract.sampling import SamplingTensors
from tt_backend.devices.device import Capture, Device, StagedStep
from tt_backend.runtime.config import StepKey, StepShape
from tt_backend.runtime.kv_cache import PagedKVCacheManager
from tt_backend.runtime.program_compiler import ProgramCompiler
from tt_backend.sampling.device_sampler import sampling_tensors


class TraceCoverageError(RuntimeError):
    """A traced operation met a shape that has no captured trace."""


@dataclass
class _Trace:
    shape: StepShape
    inputs: ForwardBatch
    sampling: SamplingTensors
    capture: Capture | None = None


def blank_inputs(shape: StepShape, device: Device) -> ForwardBatch:
    """Persistent inputs of the shape that compute nothing observable: every token is padding."""
    B, T, W = shape.batch, shape.seq_len, shape.table_width

    def full(size: tuple[int, ...], value: int) -> torch.Tensor:
        return device.allocate(size, torch.long, value)

    return ForwardBatch(full((B, T), 0), full((B, T), 0), full((B, T), -1), full((B, W), -1), full((B,), 1),
                        full((B,), 0))


class TraceCompiler:
    def __init__(self, programs: ProgramCompiler, device: Device, steps: Mapping[StepKey, StagedStep],
                 kv: PagedKVCacheManager) -> None:
        self.programs = programs
        self._device = device
        self._steps = steps
        self._kv = kv
        self._traces: dict[str, _Trace] = {}
        self.replays = 0

    def register_capture_plan(self, shape: StepShape) -> None:
        if not self.programs.compiled(shape):
            raise RuntimeError(f"cannot plan a trace of {shape.key}: its program is not compiled")
        if shape.key not in self._traces:
            greedy = sampling_tensors([], [], [], batch=shape.batch).to(self._device.device)
            self._traces[shape.key] = _Trace(shape, blank_inputs(shape, self._device), greedy)

    def capture_all(self) -> int:
        """Capture every registered plan, in the device's order (see `captures_largest_first`); then
        close the compile gate. Return how many were captured now."""
        sign = -1 if self._device.captures_largest_first else 1
        pending = sorted((t for t in self._traces.values() if t.capture is None),
                         key=lambda t: sign * t.shape.batch * t.shape.seq_len * t.shape.table_width)
        cache = self._kv.context.cache
        for trace in pending:
            trace.capture = self._device.capture(self._steps[trace.shape.step],
                                                 (*trace.inputs.tensors, cache, *trace.sampling.tensors))
        self.programs.close_gate()
        return len(pending)

    def covers(self, shape: StepShape) -> bool:
        trace = self._traces.get(shape.key)
        return trace is not None and trace.capture is not None

    def preflight(self, shapes: Iterable[StepShape]) -> None:
        missing = sorted({s.key for s in shapes if not self.covers(s)})
        if missing:
            raise TraceCoverageError(f"no captured trace for {', '.join(missing)}; traced steps never run "
                                     "eagerly (warm up these shapes or choose another trace_mode)")

    def replay(self, shape: StepShape, host: ForwardBatch, sampling: SamplingTensors,
               feedback: torch.Tensor | None = None) -> torch.Tensor:
        """Refresh the trace's inputs from `host` and `sampling` (and the first rows' tokens from
        `feedback`, a device tensor of the previous step's tokens), then replay."""
        trace = self._traces.get(shape.key)
        if trace is None or trace.capture is None:
            raise TraceCoverageError(f"no captured trace for {shape.key}")
        pairs = zip((*trace.inputs.tensors, *trace.sampling.tensors), (*host.tensors, *sampling.tensors),
                    strict=True)
        for dst, src in pairs:
            self._device.copy_in(src, dst)
        if feedback is not None:
            self._device.copy_in(feedback, trace.inputs.input_ids[: feedback.shape[0], 0])
        self.replays += 1
        return trace.capture.replay()

    @property
    def shapes(self) -> tuple[StepShape, ...]:
        return tuple(t.shape for t in self._traces.values() if t.capture is not None)

    def release(self) -> None:
        for trace in self._traces.values():
            if trace.capture is not None:
                trace.capture.release()
        self._traces.clear()
