"""StepRunner: what the engine asks of a runner, whichever executes the model (ModelRunner over
a torch model, GeneratorRunner over a tt-metal generator)."""

from __future__ import annotations

from typing import Protocol

from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.contract.step import StepPlan
from tt_backend.runtime.config import SamplingConfig


class StepRunner(Protocol):
    sampling: SamplingConfig
    eager_steps: int
    traced_steps: int

    @property
    def cache_dtype(self) -> str:
        """The KV cache's element type as users read it (float32, bfloat16, bfloat8_b)."""

    def run_and_sample(self, plan: StepPlan, sampling: SamplingPlan) -> SampledTokens:
        """Run the step and choose its sampling rows' tokens, in row order."""

    def launch(self, plan: StepPlan, sampling: SamplingPlan, after: int | None = None) -> int:
        """Launch a device-sampled decode step without waiting; return the read's handle (only
        for a model that declares async decode)."""

    def complete(self, handle: int) -> SampledTokens: ...

    def drain(self) -> int:
        """Wait for every launched step and drop its result; return how many there were."""

    def close(self) -> None:
        """Terminal first, then release in the toolkit's order; idempotent."""
