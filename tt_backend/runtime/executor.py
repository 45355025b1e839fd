"""EagerExecutor and TracedExecutor: run one planned step and return the logits of its sampling rows.

Both work on the same prepared calls: `EagerExecutor.prepare` turns a StepPlan into padded
model calls (one per decode step, one per prefill wave), each keyed by its `StepShape`.
`TracedExecutor` composes the exact eager executor (it does not inherit from it): it prepares
through it, preflights every call's trace, then replays. Which executor runs an operation is the
caller's choice (`trace_mode`); neither falls back to the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from tt_backend.models.llama import ForwardBatch
from tt_backend.runtime.config import DecodeRuntimeConfig, PrefillRuntimeConfig, StepShape
from tt_backend.runtime.inputs import prepare_host_inputs, to_device
from tt_backend.runtime.kv_cache import PagedKVCacheManager
from tt_backend.runtime.plan import StepPlan
from tt_backend.runtime.prefill_plan import plan_prefill
from tt_backend.runtime.program_compiler import ProgramCompiler
from tt_backend.runtime.trace_compiler import TraceCompiler


class ModelStep(nn.Module):
    """The model's forward over flat tensors: what programs compile and traces capture."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, slot_mapping: torch.Tensor,
                block_tables: torch.Tensor, context_lens: torch.Tensor, logits_indices: torch.Tensor,
                kv_cache: torch.Tensor) -> torch.Tensor:
        batch = ForwardBatch(input_ids, positions, slot_mapping, block_tables, context_lens, logits_indices)
        logits: torch.Tensor = self.model(batch, kv_cache)
        return logits


@dataclass(frozen=True)
class PreparedCall:
    shape: StepShape
    source_rows: tuple[int, ...]
    """The plan's rows this call computes, in the order of its first rows."""
    inputs: ForwardBatch
    """Host tensors of the padded geometry."""


class EagerExecutor:
    def __init__(self, step: ModelStep, kv: PagedKVCacheManager, device: torch.device,
                 decode: DecodeRuntimeConfig, prefill: PrefillRuntimeConfig,
                 programs: ProgramCompiler) -> None:
        self.step = step
        self.kv = kv
        self.device = device
        self.decode = decode
        self.prefill = prefill
        self.programs = programs

    def prepare(self, plan: StepPlan) -> tuple[PreparedCall, ...]:
        block_size = self.kv.layout.block_size
        if plan.mode == "decode":
            shape = self.decode.shape(len(plan.rows), max(r.context_len for r in plan.rows))
            inputs = prepare_host_inputs(plan.rows, block_size, shape.batch, 1, shape.table_width)
            return (PreparedCall(shape, tuple(range(len(plan.rows))), inputs),)
        assert plan.mode == "prefill"
        calls = []
        for wave in plan_prefill(plan, self.prefill.plan):
            rows = [plan.rows[i] for i in wave.source_rows]
            shape = self.prefill.shape(wave.padded_batch, wave.padded_len, max(r.context_len for r in rows))
            inputs = prepare_host_inputs(rows, block_size, shape.batch, shape.seq_len, shape.table_width)
            calls.append(PreparedCall(shape, wave.source_rows, inputs))
        return tuple(calls)

    def compile(self, shape: StepShape) -> None:
        self.programs.compile(shape)

    def run(self, call: PreparedCall, feedback: torch.Tensor | None = None) -> torch.Tensor:
        self.programs.compile(call.shape)  # registers on first use; refused once the gate closed
        inputs = to_device(call.inputs, self.device)
        if feedback is not None:
            inputs = feed_back(inputs, feedback)
        return self.run_inputs(inputs)

    def run_inputs(self, inputs: ForwardBatch) -> torch.Tensor:
        return self.step(*inputs.tensors, self.kv.context.cache)

    @torch.inference_mode()
    def execute(self, plan: StepPlan, feedback: torch.Tensor | None = None) -> torch.Tensor:
        """fp32 logits [rows with sample=True, vocab], in row order. `feedback` (decode only): the
        previous step's sampled tokens, still on the device, as this step's input tokens."""
        calls = self.prepare(plan)
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
    def execute(self, plan: StepPlan, feedback: torch.Tensor | None = None) -> torch.Tensor:
        calls = self.eager.prepare(plan)
        self.traces.preflight(call.shape for call in calls)  # before any call writes KV
        outputs = [self.traces.replay(call.shape, call.inputs, feedback) for call in calls]
        return assemble(plan, calls, outputs)


def feed_back(inputs: ForwardBatch, tokens: torch.Tensor) -> ForwardBatch:
    """Decode inputs whose first len(tokens) rows take `tokens` (device-side feedback)."""
    inputs.input_ids[: tokens.shape[0], 0].copy_(tokens, non_blocking=True)
    return inputs


def assemble(plan: StepPlan, calls: Sequence[PreparedCall], outputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """The logits of the plan's sampling rows, in row order, from each call's padded output."""
    parts: dict[int, torch.Tensor] = {}
    for call, out in zip(calls, outputs, strict=True):
        for k, row in enumerate(call.source_rows):
            parts[row] = out[k]
    sampled = [parts[i] for i, row in enumerate(plan.rows) if row.sample]
    return torch.stack(sampled) if sampled else outputs[0][:0].clone()
