"""EagerExecutor and TracedExecutor: run one planned step and return the logits of its sampling rows.

Both work on the same prepared calls: `EagerExecutor.prepare` turns a StepPlan into padded
model calls (one per decode step, one per prefill wave), each keyed by its `StepShape`.
`TracedExecutor` composes the exact eager executor (it does not inherit from it): it prepares
through it, preflights every call's trace, then replays. Which executor runs an operation is the
caller's choice (`trace_mode`); neither falls back to the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.contract.modes import DEVICE_VARIANTS, OPERATIONS, StepMode, StepVariant
from tt_backend.contract.sampling import SamplingPlan, SamplingTensors
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.device import Device, StagedStep
from tt_backend.runtime.config import DecodeRuntimeConfig, PrefillRuntimeConfig, StepKey, StepShape
from tt_backend.runtime.cross_images import cross_inputs
from tt_backend.runtime.image_embeds import ImageEncoderCache, image_embeds
from tt_backend.runtime.inputs import prepare_host_inputs, to_device
from tt_backend.runtime.kv_cache import PagedKVCacheManager
from tt_backend.runtime.prefill_plan import plan_prefill
from tt_backend.runtime.program_compiler import ProgramCompiler
from tt_backend.runtime.trace_compiler import TraceCompiler
from tt_backend.sampling.device_sampler import logits_plan, select_tokens


class ModelStep(nn.Module):
    """The model's forward over flat tensors: the `logits` variant of the step, and what programs
    compile and traces capture. It takes the step's sampling inputs too and ignores them. A decode
    step tells the model so (`ForwardBatch.decode`), and it is a distinct step from prefill's, so a
    device that shares one capture across a step's shapes never mixes the two."""

    def __init__(self, model: nn.Module, decode: bool = False) -> None:
        super().__init__()
        self.model = model
        self.decode = decode

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, slot_mapping: torch.Tensor,
                block_tables: torch.Tensor, context_lens: torch.Tensor, logits_indices: torch.Tensor,
                kv_cache: torch.Tensor, *sampling: torch.Tensor) -> torch.Tensor:
        batch = ForwardBatch(input_ids, positions, slot_mapping, block_tables, context_lens, logits_indices,
                             self.decode)
        logits: torch.Tensor = self.model(batch, kv_cache)
        return logits


class SamplingHead(nn.Module):
    """Token choice over a step's logits, for one device variant. With `may_branch` (a step that
    runs on the host: the CPU) top-k/top-p may decide on the host to skip the full sort; such a
    head is not traceable, and a device runs it as it is after the traced model."""

    def __init__(self, variant: StepVariant, may_branch: bool = False) -> None:
        super().__init__()
        assert variant in DEVICE_VARIANTS
        self.variant = variant
        self.may_branch = may_branch
        self.traceable = not (may_branch and variant is StepVariant.SAMPLE_FILTERED)

    def forward(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                top_p: torch.Tensor, min_p: torch.Tensor, seed: torch.Tensor,
                counter: torch.Tensor) -> torch.Tensor:
        sampling = SamplingTensors(temperature, top_k, top_p, min_p, seed, counter)
        return select_tokens(logits, sampling, self.variant, self.may_branch)


HEAD_FROM = 7
"""A sampling head reads the model's logits, then the step's inputs from this index (the sampling ones)."""


def model_steps(model: nn.Module, device: Device) -> dict[StepKey, StagedStep]:
    """One step per operation and variant, over the same model: the `logits` variant is the model
    alone, a device variant is the model, then its sampling head (a device may capture the model
    once for every variant and each head on its own). The heads branch on the host where the
    device allows it (`Device.step_may_branch_on_host`)."""
    may_branch = device.step_may_branch_on_host
    steps: dict[StepKey, StagedStep] = {}
    for op in OPERATIONS:
        body = ModelStep(model, decode=op is StepMode.DECODE)
        steps[op, StepVariant.LOGITS] = StagedStep(body)
        for variant in DEVICE_VARIANTS:
            head = SamplingHead(variant, may_branch)
            steps[op, variant] = StagedStep(body, head, HEAD_FROM, head.traceable)
    return steps


@dataclass(frozen=True)
class PreparedCall:
    shape: StepShape
    source_rows: tuple[int, ...]
    """The plan's rows this call computes, in the order of its first rows."""
    inputs: ForwardBatch
    """Host tensors of the padded geometry."""
    sampling: SamplingTensors
    """Host sampling inputs of the same rows, padded likewise."""


class EagerExecutor:
    def __init__(self, steps: dict[StepKey, StagedStep], kv: PagedKVCacheManager, device: torch.device,
                 decode: DecodeRuntimeConfig, prefill: PrefillRuntimeConfig,
                 programs: ProgramCompiler, images: ImageEncoderCache | None = None) -> None:
        self.steps = steps
        self.images = images
        """A vision-language model's encoder outputs, for prefill rows that hold image placeholders."""
        self.kv = kv
        self.device = device
        self.decode = decode
        self.prefill = prefill
        self.programs = programs

    def prepare(self, plan: StepPlan, sampling: SamplingPlan | None = None) -> tuple[PreparedCall, ...]:
        sampling = sampling or logits_plan(len(plan.rows))
        block_size = self.kv.layout.block_size
        per_lane = self.kv.layout.blocks_per_lane  # rows hold lane-local ids; the inputs map them
        if plan.mode is StepMode.DECODE:
            shape = self.decode.shape(len(plan.rows), max(r.context_len for r in plan.rows), sampling.variant)
            inputs = prepare_host_inputs(plan.rows, block_size, shape.batch, 1, shape.table_width, per_lane)
            inputs = self._with_cross(inputs, plan.rows, shape.batch, 1)
            source = tuple(range(len(plan.rows)))
            return (PreparedCall(shape, source, inputs, sampling.tensors.rows(list(source), shape.batch)),)
        assert plan.mode is StepMode.PREFILL
        calls = []
        for wave in plan_prefill(plan, self.prefill.plan):
            rows = [plan.rows[i] for i in wave.source_rows]
            shape = self.prefill.shape(wave.padded_batch, wave.padded_len, max(r.context_len for r in rows),
                                       sampling.variant)
            inputs = prepare_host_inputs(rows, block_size, shape.batch, shape.seq_len, shape.table_width,
                                         per_lane)
            if self.images is not None and any(row.images for row in rows):
                found = image_embeds(rows, self.images, shape.batch, shape.seq_len)
                if found is not None:
                    inputs = dataclasses.replace(inputs, embeds=found.embeds, embed_mask=found.mask,
                                                 image_ends=found.ends)
            inputs = self._with_cross(inputs, rows, shape.batch, shape.seq_len)
            calls.append(PreparedCall(shape, wave.source_rows, inputs,
                                      sampling.tensors.rows(list(wave.source_rows), shape.batch)))
        return tuple(calls)

    def _with_cross(self, inputs: ForwardBatch, rows: Sequence[PlannedRow], batch: int,
                    seq_len: int) -> ForwardBatch:
        """`inputs` with the rows' images for a cross-attention model, if any row has them."""
        if self.images is None or not any(row.cross_images for row in rows):
            return inputs
        return dataclasses.replace(inputs, cross=cross_inputs(rows, self.images, self.kv.layout.block_size,
                                                              self.kv.layout.blocks_per_lane, batch, seq_len))

    def compile(self, shape: StepShape) -> None:
        self.programs.compile(shape)

    def run(self, call: PreparedCall, feedback: torch.Tensor | None = None) -> torch.Tensor:
        self.programs.compile(call.shape)  # registers on first use; refused once the gate closed
        inputs = to_device(call.inputs, self.device)
        if feedback is not None:
            inputs = feed_back(inputs, feedback)
        step, sampling = self.steps[call.shape.step], call.sampling.to(self.device)
        if inputs.embeds is not None or inputs.rope_positions is not None or inputs.cross is not None:
            # image embeddings, M-RoPE positions or cross-attention images: the model over the whole
            # batch, then its head
            assert isinstance(step.body, ModelStep)
            inputs = dataclasses.replace(inputs, decode=step.body.decode)
            logits: torch.Tensor = step.body.model(inputs, self.kv.context.cache)
            return logits if step.head is None else step.head(logits, *sampling.tensors)
        out: torch.Tensor = step(*inputs.tensors, self.kv.context.cache, *sampling.tensors)
        return out

    @torch.inference_mode()
    def execute(self, plan: StepPlan, sampling: SamplingPlan | None = None,
                feedback: torch.Tensor | None = None) -> torch.Tensor:
        """For the rows with sample=True, in row order: fp32 logits [rows, vocab] (`logits` variant)
        or token ids [rows] (a device variant). `feedback` (decode only): the previous step's
        sampled tokens, still on the device, as this step's input tokens."""
        calls = self.prepare(plan, sampling)
        return assemble(plan, calls, [self.run(call, feedback) for call in calls])


class TracedExecutor:
    def __init__(self, eager: EagerExecutor, traces: TraceCompiler) -> None:
        assert traces.programs is eager.programs, "traces must compose the eager executor's programs"
        self.eager = eager
        self.traces = traces

    def compile(self, shape: StepShape) -> None:
        self.eager.compile(shape)
        self.traces.register_capture_plan(shape)

    @torch.inference_mode()
    def execute(self, plan: StepPlan, sampling: SamplingPlan | None = None,
                feedback: torch.Tensor | None = None) -> torch.Tensor:
        calls = self.eager.prepare(plan, sampling)
        if any(call.inputs.embeds is not None or call.inputs.rope_positions is not None
               or call.inputs.cross is not None for call in calls):
            # ModelRunner runs these steps eagerly
            raise RuntimeError("a traced step replays token inputs only; a step with images runs eagerly")
        self.traces.preflight(call.shape for call in calls)  # before any call writes KV
        outputs = [self.traces.replay(call.shape, call.inputs, call.sampling, feedback) for call in calls]
        return assemble(plan, calls, outputs)


def feed_back(inputs: ForwardBatch, tokens: torch.Tensor) -> ForwardBatch:
    """Decode inputs whose first len(tokens) rows take `tokens` (device-side feedback)."""
    inputs.input_ids[: tokens.shape[0], 0].copy_(tokens, non_blocking=True)
    return inputs


def assemble(plan: StepPlan, calls: Sequence[PreparedCall], outputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """The outputs (logits or tokens) of the plan's sampling rows, in row order, from each call's
    padded output."""
    parts: dict[int, torch.Tensor] = {}
    for call, out in zip(calls, outputs, strict=True):
        for k, row in enumerate(call.source_rows):
            parts[row] = out[k]
    sampled = [parts[i] for i, row in enumerate(plan.rows) if row.sample]
    return torch.stack(sampled) if sampled else outputs[0][:0].clone()
