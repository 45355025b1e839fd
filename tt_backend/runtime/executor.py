"""EagerExecutor: runs one planned step on the model and returns logits of sampling rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from tt_backend.runtime.inputs import prepare_host_inputs, to_device
from tt_backend.runtime.kv_cache import PagedKVCacheManager
from tt_backend.runtime.plan import PlannedRow, StepPlan
from tt_backend.runtime.prefill_plan import PrefillPlanConfig, plan_prefill


class EagerExecutor:
    def __init__(self, model: nn.Module, kv: PagedKVCacheManager, device: torch.device,
                 prefill_config: PrefillPlanConfig) -> None:
        self.model = model
        self.kv = kv
        self.device = device
        self.prefill_config = prefill_config

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> torch.Tensor:
        """fp32 logits [rows with sample=True, vocab], in row order."""
        assert plan.mode != "empty"
        if plan.mode == "decode":
            logits = self._forward(plan.rows)
        else:
            parts: list[torch.Tensor | None] = [None] * len(plan.rows)
            for wave in plan_prefill(plan, self.prefill_config):
                rows = [plan.rows[i] for i in wave.source_rows]
                out = self._forward(rows, wave.padded_batch, wave.padded_len)
                for k, i in enumerate(wave.source_rows):
                    parts[i] = out[k]
            logits = torch.stack([p for p in parts if p is not None])
        sampling_rows = [i for i, row in enumerate(plan.rows) if row.sample]
        if len(sampling_rows) == len(plan.rows):
            return logits
        return logits[torch.tensor(sampling_rows, device=logits.device, dtype=torch.long)]

    def _forward(self, rows: Sequence[PlannedRow], padded_batch: int | None = None,
                 padded_len: int | None = None) -> torch.Tensor:
        host = prepare_host_inputs(rows, self.kv.config.block_size, padded_batch, padded_len)
        return self.model(to_device(host, self.device), self.kv.cache)
