"""EagerExecutor: runs one planned step on the model and returns logits of sampling rows."""

from __future__ import annotations

import torch
from torch import nn

from tt_backend.runtime.inputs import prepare_host_inputs, to_device
from tt_backend.runtime.kv_cache import PagedKVCacheManager
from tt_backend.runtime.plan import StepPlan


class EagerExecutor:
    def __init__(self, model: nn.Module, kv: PagedKVCacheManager, device: torch.device) -> None:
        self.model = model
        self.kv = kv
        self.device = device

    @torch.inference_mode()
    def execute(self, plan: StepPlan) -> torch.Tensor:
        """fp32 logits [rows with sample=True, vocab], in row order."""
        assert plan.mode != "empty"
        batch = to_device(prepare_host_inputs(plan, self.kv.config.block_size), self.device)
        logits = self.model(batch, self.kv.cache)
        sampling_rows = [i for i, row in enumerate(plan.rows) if row.sample]
        if len(sampling_rows) == len(plan.rows):
            return logits
        return logits[torch.tensor(sampling_rows, device=logits.device, dtype=torch.long)]
