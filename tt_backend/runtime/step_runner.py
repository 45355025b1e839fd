"""What the engine asks of a runner, whichever executes the model (ModelRunner over a torch model,
GeneratorRunner over a tt-metal generator).

`StepRunner` runs each step to its tokens before returning. `AsyncStepRunner` also launches a
decode step without waiting for it (the engine's async decode overlap); only a runner whose model
declares async decode is one, and the engine decides once, at construction, which it holds.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.contract.step import StepPlan
from tt_backend.runtime.config import SamplingConfig


class StepRunner(Protocol):
    @property
    def sampling(self) -> SamplingConfig:
        """Where its steps may choose tokens (the engine plans each step's sampling against it)."""

    @property
    def eager_steps(self) -> int:
        """Steps run eagerly so far (a counter the stats read)."""

    @property
    def traced_steps(self) -> int:
        """Steps replayed from a trace so far."""

    @property
    def mm_cache_counts(self) -> tuple[int, int]:
        """(images whose encoder output was asked for, those read from the encoder cache) so far."""

    @property
    def cache_dtype(self) -> str:
        """The KV cache's element type as users read it (float32, bfloat16, bfloat8_b)."""

    def run_and_sample(self, plan: StepPlan, sampling: SamplingPlan) -> SampledTokens:
        """Run the step and choose its sampling rows' tokens, in row order."""

    def drain(self) -> int:
        """Wait for every launched step and drop its result; return how many there were."""

    def close(self) -> None:
        """Terminal first, then release in the toolkit's order; idempotent."""


@runtime_checkable
class AsyncStepRunner(StepRunner, Protocol):
    def launch(self, plan: StepPlan, sampling: SamplingPlan, after: int | None = None) -> int:
        """Launch a device-sampled decode step without waiting; return the read's handle. With
        `after` (the handle of the step launched just before, still not completed), its input
        tokens are that step's sampled tokens, fed back on the device. May raise: the step then
        never was in flight and fails like a synchronous one."""

    def complete(self, handle: int) -> SampledTokens:
        """Wait for the launched step's tokens; its handle is spent (the engine completes steps in
        launch order)."""
