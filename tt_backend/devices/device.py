"""The Device protocol: what the runtime asks of a device, whichever it is (torch CPU, torch CUDA,
a ttnn mesh), and the two-stage step a device captures.

The lifecycle, in the toolkit's order: allocate persistent tensors; copy host inputs in (blocking,
or asynchronously behind the device's queue); capture a step over those tensors once (begin/end
capture, one call here); replay it after refreshing the inputs in place; copy results out, blocking
or asynchronously with an event to wait on (`launch` → `Launched.host()`); synchronize; release.
On ttnn these are `allocate_tensor_on_device`, `copy_host_to_device_tensor`,
`begin_trace_capture`/`end_trace_capture`, `execute_trace`, `from_device(blocking=False)` with
`record_event`/`wait_for_event`, `synchronize_device` and `release_trace`/`close_mesh_device`.

What differs between devices beyond these calls is policy, and each device states it as a property
(`default_trace_mode`, `dense_prefill_shapes`, `step_may_branch_on_host`, `captures_largest_first`)
with its reason, so no caller tests what kind of device it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import torch

from tt_backend.contract.modes import TraceMode

T = TypeVar("T")
StepFn = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class StagedStep:
    """A step declared in two stages: `body` over every input, then `head` (if any) over the
    body's output and the inputs from `head_from` on. A device may capture the body once for every
    head that follows it, and each head on its own."""

    body: StepFn
    head: StepFn | None = None
    head_from: int = 0
    head_traceable: bool = True
    """False when the head decides on the host (it then runs as it is after the captured body)."""

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        out = self.body(*inputs)
        return out if self.head is None else self.head(out, *inputs[self.head_from:])


class Capture(Protocol):
    def replay(self) -> torch.Tensor:
        """Run the recorded step on the current contents of its persistent inputs."""

    def release(self) -> None: ...


class Launched(Protocol):
    def host(self) -> torch.Tensor:
        """Block until the result is on the host (its event has fired); return it."""

    def device_value(self) -> torch.Tensor:
        """The result where the device holds it, for work launched after this one (which runs
        after it, in device order)."""


class Device(Protocol):
    device: torch.device
    """Where tensors of this device live, as torch names it."""

    # ---- policy: what suits this device, decided by it --------------------------------------------
    @property
    def captures_largest_first(self) -> bool:
        """The capture order that suits this device (largest first shares a memory pool)."""

    @property
    def default_trace_mode(self) -> TraceMode:
        """What `trace_mode=auto` traces here (never AUTO): every step where one capture serves every
        shape of a step, decode only where each shape costs a capture of its own."""

    @property
    def dense_prefill_shapes(self) -> bool:
        """Whether prefill waves may pad to the denser batch set (`prefill_plan.DENSE_BATCHES`), not
        only to powers of two, and rows to the finer length buckets (`padded_length(n, fine=True)`):
        true where one more shape costs only its capture."""

    @property
    def step_may_branch_on_host(self) -> bool:
        """Whether a step may decide on the host partway through (read a tensor's value in Python,
        as top-k/top-p do to skip the full sort): true where the step runs on the host anyway, so
        the decision costs no device round trip and the step need not be one captured graph."""

    def allocate(self, shape: Sequence[int], dtype: torch.dtype, fill: float | int = 0) -> torch.Tensor:
        """A persistent device tensor (a trace's input, the KV cache)."""

    def copy_in(self, host: torch.Tensor, into: torch.Tensor) -> None:
        """Copy host values into a persistent device tensor, in device order (not blocking)."""

    def capture(self, step: StagedStep, inputs: Sequence[torch.Tensor]) -> Capture:
        """Record `step` once over persistent `inputs` (begin/end capture) for later replays."""

    def launch(self, work: Callable[[], torch.Tensor], asynchronous: bool) -> Launched:
        """Run `work` in device order and copy its result out: blocking, or behind an event."""

    def synchronize(self) -> None:
        """Block until every launched piece of work has finished."""

    def run_in_order(self, work: Callable[[], T]) -> T:
        """Run host work (sampling from a step's logits) once every launched piece of work has
        finished, where the device's own work runs; return what it returns."""

    def return_free_host_memory(self) -> None:
        """Hand freed host memory back to the system (after captures)."""

    def release(self) -> None:
        """Release captures and queues; idempotent."""
