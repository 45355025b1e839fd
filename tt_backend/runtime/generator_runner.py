"""GeneratorRunner: our runner contract over a tt-metal generator (one lane, one (sub)mesh).

The generator owns its TTNN model, traces and device sampling; this runner owns the step shapes,
the KV cache's handle (TTPagedKVCache) and the output reads:

    prefill: rows ─▶ tokens [B, S] (padded), page_table [B, W], prompt_lens, start_pos
             ─▶ generator.prefill_forward ─▶ logits [B, 1, V] on the host ─▶ host sampling
    decode:  rows ─▶ tokens [C, 1], start_pos [C], page_table [C, W] at the fixed capacity C
             ─▶ generator.decode_forward(enable_trace, read_from_device=False)  (device tensors)
             ─▶ read_decode_output(async_read=True) ─▶ event_synchronize each event
             ─▶ process_decode_output_host ─▶ logits [C, 1, V] ─▶ host sampling of the live rows

Decode runs at one fixed capacity (the generator's max batch: its traces are captured for it),
not at power-of-two buckets; rows beyond the live ones are padding, at position -1 (tt-metal's
mark of an inactive row) over a page table of sink blocks. Tokens are chosen on the host (the
generator's device sampling is not wired yet).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import torch

from tt_backend.contract.modes import StepMode
from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.runtime.config import SamplingConfig
from tt_backend.runtime.resources import CleanupError, CleanupLog
from tt_backend.runtime.tt_kv_cache import TTPagedKVCache

logger = logging.getLogger(__name__)


class GeneratorRunner:
    def __init__(self, ttnn: Any, generator: Any, kv: TTPagedKVCache, sink_block: int, table_width: int,
                 decode_capacity: int, enable_trace: bool, takes_start_pos: bool,
                 close_device: Any) -> None:
        self.ttnn = ttnn
        self.generator = generator
        self.kv = kv
        self.sink_block = sink_block
        """The padding sink: the block no request is given (padding rows and table slots)."""
        self.table_width = table_width
        self.decode_capacity = decode_capacity
        self.enable_trace = enable_trace
        self.takes_start_pos = takes_start_pos
        self.sampling = SamplingConfig.resolve("none", always_compat=True)  # host sampling only
        self.eager_steps = 0
        self.traced_steps = 0
        self.cleanup_log = CleanupLog()
        self._close_device = close_device
        self._closed = False

    @property
    def cache_dtype(self) -> str:
        return self.kv.geometry.dtype

    # ---- host prep ---------------------------------------------------------------------------
    def page_table(self, rows: list[PlannedRow], batch: int) -> torch.Tensor:
        # [batch, W] int32: a row's blocks in logical order, the sink after them and in padding rows
        table = torch.full((batch, self.table_width), self.sink_block, dtype=torch.int32)
        for i, row in enumerate(rows):
            table[i, :len(row.block_ids)] = torch.tensor(row.block_ids, dtype=torch.int32)
        return table

    # ---- steps -------------------------------------------------------------------------------
    def run_and_sample(self, plan: StepPlan, sampling: SamplingPlan) -> SampledTokens:
        if self._closed:
            raise RuntimeError("the generator runner is closed")
        assert sampling.host is not None, "the generator runner samples on the host"
        rows = list(plan.rows)
        if plan.mode is StepMode.PREFILL:
            logits = self.prefill(rows)
        else:
            logits = self.decode(rows)
        sampled = [i for i, row in enumerate(rows) if row.sample]
        return sampling.host.sample(logits[sampled].float())

    def prefill(self, rows: list[PlannedRow]) -> torch.Tensor:
        """Logits [rows, V] of each row's last token."""
        longest = max(len(row.token_ids) for row in rows)
        tokens = torch.zeros((len(rows), longest), dtype=torch.int64)
        for i, row in enumerate(rows):
            tokens[i, :len(row.token_ids)] = torch.tensor(row.token_ids)
        kwargs: dict[str, Any] = {}
        if self.takes_start_pos:
            kwargs["start_pos"] = [row.start_position for row in rows]
        elif any(row.start_position for row in rows):
            raise AssertionError("a prefix-cached row reached a generator that takes no start_pos")
        out = self.generator.prefill_forward(tokens, page_table=self.page_table(rows, len(rows)),
                                             kv_cache=self.kv.lane(0),
                                             prompt_lens=[len(row.token_ids) for row in rows], **kwargs)
        self.eager_steps += 1
        return torch.as_tensor(out).reshape(len(rows), -1)

    def decode(self, rows: list[PlannedRow]) -> torch.Tensor:
        """Logits [rows, V] of one decode step at the fixed capacity."""
        capacity = self.decode_capacity
        assert len(rows) <= capacity, (len(rows), capacity)
        tokens = torch.zeros((capacity, 1), dtype=torch.int64)
        start_pos = torch.full((capacity,), -1, dtype=torch.int64)  # -1: a padding row (skipped)
        for i, row in enumerate(rows):
            tokens[i, 0] = row.token_ids[0]
            start_pos[i] = row.start_position
        g = self.generator
        device_out = g.decode_forward(tokens, start_pos, page_table=self.page_table(rows, capacity),
                                      kv_cache=self.kv.lane(0), enable_trace=self.enable_trace,
                                      read_from_device=False)
        host_out, events = g.read_decode_output(device_out, async_read=True)
        for event in events:
            self.ttnn.event_synchronize(event)
        logits = torch.as_tensor(g.process_decode_output_host(host_out, is_tokens=False))
        if self.enable_trace:
            self.traced_steps += 1
        else:
            self.eager_steps += 1
        return logits.reshape(capacity, -1)[:len(rows)]

    def launch(self, plan: StepPlan, sampling: SamplingPlan, after: int | None = None) -> int:
        raise AssertionError("async decode is off for generators (the engine refuses async_scheduling)")

    def complete(self, handle: int) -> SampledTokens:
        raise AssertionError("async decode is off for generators")

    def drain(self) -> int:
        return 0  # every step's outputs are read before run_and_sample returns

    # ---- cleanup -----------------------------------------------------------------------------
    def _drop_generator(self) -> None:
        """Free the generator's device objects (its model, submesh handles) while the mesh is still
        open: ttnn objects left to the interpreter's exit outlive the device (the Python backend's
        stub crashed in its final garbage collection with them)."""
        self.generator = None
        gc.collect()

    def close(self) -> None:
        """Terminal first, then the KV cache, then the device (submeshes, mesh, fabric)."""
        self._closed = True
        log = self.cleanup_log
        log.retry_orphans()
        if not log.events:
            log.release("kv_cache", self.kv.release)
            log.release("generator", self._drop_generator)
            log.release("device", self._close_device)
        if log.orphans:
            raise CleanupError(list(log.orphans))
