"""ModelRunner: the execution of every lane's merged batch for a torch model, composed from the
runtime parts, and the root of their cleanup. The lanes share one physical KV cache, a region per
lane (`PageTableLayout.lanes`); a row's lane-local block ids become physical ones in one place,
`prepare_host_inputs`.

    model ─▶ PagedKVCacheManager ─▶ ProgramCompiler ─▶ EagerExecutor
                                   └▶ TraceCompiler ─▶ TracedExecutor (over that exact eager one)
             OutputReader, WarmupCoordinator

`trace_mode` picks the executor per operation: decode is traced unless the mode is `none`,
prefill only with `all`. Steps run synchronously (`execute`) or are launched and read later
(`launch` / `complete`, the engine's async decode overlap).
"""

from __future__ import annotations

import dataclasses
import logging

import torch
from torch import nn

from tt_backend.contract.modes import SampleOnDeviceMode, StepMode
from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.contract.step import StepPlan
from tt_backend.devices.cleanup import CleanupError, CleanupLog
from tt_backend.devices.device import Device, Launched
from tt_backend.runtime.config import (
    DecodeRuntimeConfig,
    PageTableLayout,
    PrefillRuntimeConfig,
    SamplingConfig,
    TraceConfig,
    WarmupConfig,
)
from tt_backend.runtime.executor import EagerExecutor, TracedExecutor, model_steps
from tt_backend.runtime.image_embeds import ImageEncoderCache
from tt_backend.runtime.kv_cache import PagedKVCacheConfig, PagedKVCacheManager
from tt_backend.runtime.output_reader import OutputReader
from tt_backend.runtime.program_compiler import ProgramCompiler
from tt_backend.runtime.trace_compiler import TraceCompiler
from tt_backend.runtime.warmup import LaneExecutors, WarmupCoordinator, WarmupReport

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model: nn.Module, kv_config: PagedKVCacheConfig, layout: PageTableLayout,
                 device: Device, trace: TraceConfig, decode: DecodeRuntimeConfig,
                 prefill: PrefillRuntimeConfig, sampling: SamplingConfig | None = None) -> None:
        self.device = device
        self.trace = trace
        self.sampling = sampling or SamplingConfig(SampleOnDeviceMode.ALL)
        self.kv = PagedKVCacheManager(kv_config, layout, device.device)
        self.programs = ProgramCompiler(self.kv)
        steps = model_steps(model, device)
        encode = getattr(model, "encode_image", None)
        self.images = ImageEncoderCache(encode) if encode is not None else None
        """A vision-language model's encoder outputs by image (its `encode_image`)."""
        self.eager = EagerExecutor(steps, self.kv, device.device, decode, prefill, self.programs, self.images)
        self.traces = TraceCompiler(self.programs, device, steps, self.kv) if trace.decode else None
        self.traced = TracedExecutor(self.eager, self.traces) if self.traces is not None else None
        self.reader = OutputReader(device)
        self.cleanup_log = CleanupLog()
        self.eager_steps = 0
        self.traced_steps = 0
        self._closed = False

    @property
    def mm_cache_counts(self) -> tuple[int, int]:
        images = self.images
        return (0, 0) if images is None else (images.hits + images.misses, images.hits)

    @property
    def cache_dtype(self) -> str:
        return str(self.kv.config.dtype).removeprefix("torch.")

    # ---- construction-time decisions ----------------------------------------------------------
    def configure_capacity(self, num_blocks: int) -> PageTableLayout:
        """Set the physical KV capacity before allocation; shrinks the geometry, keeps the model."""
        layout = self.kv.configure(num_blocks)
        self.eager.decode = dataclasses.replace(self.eager.decode, layout=layout)
        self.eager.prefill = dataclasses.replace(self.eager.prefill, layout=layout)
        return layout

    def allocate(self) -> None:
        self.kv.allocate()

    def warmup(self) -> WarmupReport:
        config = WarmupConfig.resolve(self.trace, self.eager.decode, self.eager.prefill, self.sampling)
        report = WarmupCoordinator(config, [LaneExecutors(self.eager, self.traced)]).warmup()
        self.device.return_free_host_memory()  # the captures' temporaries
        return report

    # ---- steps -------------------------------------------------------------------------------
    def execute(self, plan: StepPlan, sampling: SamplingPlan | None = None,
                feedback: torch.Tensor | None = None) -> torch.Tensor:
        """Run the step now; for its sampling rows, in row order, fp32 logits (no `sampling`, or
        the `logits` variant) or token ids (a device variant)."""
        if self._closed:
            raise RuntimeError("the model runner is closed")
        if self.traced is not None and self.trace.traces(plan.mode) and not _has_images(plan):
            self.traced_steps += 1
            return self.traced.execute(plan, sampling, feedback)
        self.eager_steps += 1
        return self.eager.execute(plan, sampling, feedback)

    # A prefill whose rows hold image placeholders runs eagerly by design (its embeddings are not
    # among a trace's token inputs), whatever trace_mode says of prefill; its decode steps replay,
    # except a model's with M-RoPE (their rows' rotary positions follow the images: not a trace input).

    def run_and_sample(self, plan: StepPlan, sampling: SamplingPlan) -> SampledTokens:
        """Run the step and choose its tokens: inside it (a device variant), or from its logits on
        the host (the plan's host path, which also gives logprobs)."""
        host = sampling.host
        if host is not None:  # sampled where the logits are (on CUDA: on the GPU)
            return self.reader.after_launched(lambda: host.sample(self.execute(plan, sampling)))
        return SampledTokens.read(self.reader.read(lambda: self.execute(plan, sampling)))

    def launch(self, plan: StepPlan, sampling: SamplingPlan, after: int | None = None) -> int:
        """Launch a decode step that samples on the device, without waiting; return the read's
        handle. With `after` (the handle of the step launched just before), this step's input
        tokens are that step's sampled tokens, fed back on the device."""
        assert plan.mode is StepMode.DECODE and sampling.host is None, "only device-sampled decode runs ahead"
        previous: Launched | None = None if after is None else self.reader.launched(after)

        def work() -> torch.Tensor:
            feedback = None if previous is None else previous.device_value()
            return self.execute(plan, sampling, feedback)

        return self.reader.submit(work)

    def complete(self, handle: int) -> SampledTokens:
        return SampledTokens.read(self.reader.complete(handle))

    def drain(self) -> int:
        """Wait for every launched step and drop its result; return how many there were."""
        return self.reader.drain()

    # ---- cleanup -----------------------------------------------------------------------------
    def close(self) -> None:
        """Terminal first, then release in order: pending reads, traces, programs, KV cache, the
        device queue. Idempotent; a failed release is kept and retried by the next close."""
        self._closed = True
        log = self.cleanup_log
        log.retry_orphans()
        if not log.events:
            log.release("output_reads", lambda: logger.debug("retired %d reads", self.drain()))
            if self.traces is not None:
                log.release("traces", self.traces.release)
            log.release("programs", self.programs.release)
            if self.images is not None:
                log.release("encoder_outputs", self.images.clear)
            log.release("kv_cache", self.kv.release)
            log.release("device", self.device.release)
        if log.orphans:
            raise CleanupError(list(log.orphans))


def _has_images(plan: StepPlan) -> bool:
    """Rows with image embeddings (prefill), M-RoPE positions that follow images or images read by
    cross-attention (any step)."""
    return any(row.images or row.rope_images or row.cross_images for row in plan.rows)
