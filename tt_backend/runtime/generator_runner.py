"""GeneratorRunner: our runner contract over a tt-metal generator (a lane per data-parallel
submesh, one generator call per step for all of them).

The generator owns its TTNN model, traces and device sampling; this runner owns the step shapes,
the KV cache's handle (TTPagedKVCache) and the output reads (L lanes, capacity C per lane):

    prefill: rows ─▶ tokens [B, S] (padded), page_table [B, W], prompt_lens, start_pos, empty_slots
             ─▶ generator.prefill_forward ─▶ logits [B, 1, V] on the host ─▶ host sampling
    decode:  rows ─▶ tokens [L×C, 1], start_pos [L×C], page_table [L×C, W] at the fixed capacity
             ─▶ generator.decode_forward(enable_trace, read_from_device=False)  (device tensors)
             ─▶ read_decode_output(async_read=True) ─▶ event_synchronize each event
             ─▶ process_decode_output_host ─▶ logits [L×C, 1, V] ─▶ host sampling of the live rows

Decode runs at one fixed capacity per lane (the generator's max batch per submesh: its traces
are captured for it), not at power-of-two buckets; rows beyond the live ones are padding, at
position -1 (tt-metal's mark of an inactive row) over a page table of sink blocks. Tokens are
chosen on the host (the generator's device sampling is not wired yet).

Lanes are the generator's data-parallel submeshes (tt_data_parallel): each submesh has its own
cache with its own block ids, and a planned row carries its lane, its slot in the lane and its
lane-local block ids, so its page table holds the ids as they are. The generator takes the batch
lane by lane: lane l's decode row of slot s sits at l × C + s of the lanes × C batch (tt-metal
splits it with torch.chunk), and a prefill row's `empty_slots` entry is that same l × C + s
(tt-metal: model_id = slot // max_batch_size_per_model, with C that max batch). The KV cache goes
to the generator as its list of per-submesh regions, as `allocate_kv_cache` returned it.
"""

from __future__ import annotations

import gc
import inspect
import logging
from typing import Any

import torch

from tt_backend.contract.modes import StepMode
from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.cleanup import CleanupError, CleanupLog
from tt_backend.devices.tt.generator import TTGenerator
from tt_backend.devices.tt.kv_cache import TTPagedKVCache
from tt_backend.runtime.config import SamplingConfig

logger = logging.getLogger(__name__)


class GeneratorRunner:
    def __init__(self, ttnn: Any, generator: TTGenerator, kv: TTPagedKVCache, blocks_per_lane: int,
                 table_width: int,
                 decode_capacity: int, enable_trace: bool, takes_start_pos: bool, takes_empty_slots: bool,
                 close_device: Any) -> None:
        self.ttnn = ttnn
        self.generator = generator
        self.kv = kv
        self.lanes = kv.lanes
        self.blocks_per_lane = blocks_per_lane
        self.sink_block = blocks_per_lane
        """The padding sink of each lane's cache: the block no request is given (padding rows and
        table slots), one past the lane's own."""
        self.table_width = table_width
        self.decode_capacity = decode_capacity
        """Decode rows per lane (per submesh)."""
        self.enable_trace = enable_trace
        self.takes_start_pos = takes_start_pos
        self.takes_empty_slots = takes_empty_slots
        assert self.lanes == 1 or takes_empty_slots, "a data-parallel prefill needs empty_slots"
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
    def page_table(self, rows: list[tuple[int, PlannedRow]], batch: int) -> torch.Tensor:
        """[batch, W] int32: each placed row's blocks in logical order, its lane's local ids as the
        plan holds them, the sink after them and in the padding rows."""
        table = torch.full((batch, self.table_width), self.sink_block, dtype=torch.int32)
        for position, row in rows:
            assert all(0 <= b < self.blocks_per_lane for b in row.block_ids), \
                f"block ids {row.block_ids} are not lane-local (each lane has {self.blocks_per_lane})"
            table[position, :len(row.block_ids)] = torch.tensor(row.block_ids, dtype=torch.int32)
        return table

    def slots(self, rows: list[PlannedRow]) -> list[int]:
        """Each row's place in the lanes × capacity batch, from its lane and slot:

            [ lane 0: slots 0 .. C-1 | lane 1: C .. 2C-1 | ... ]   row of lane l, slot s: l × C + s
        """
        for row in rows:
            assert row.lane < self.lanes, f"lane {row.lane} of a generator with {self.lanes} lanes"
            assert row.slot < self.decode_capacity, \
                f"lane {row.lane} slot {row.slot} is past its capacity {self.decode_capacity}"
        return [row.lane * self.decode_capacity + row.slot for row in rows]

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
        if self.takes_empty_slots:
            kwargs["empty_slots"] = self.slots(rows)
        table = self.page_table(list(enumerate(rows)), len(rows))
        out = self.generator.prefill_forward(tokens, page_table=table, kv_cache=self.kv.caches,
                                             prompt_lens=[len(row.token_ids) for row in rows], **kwargs)
        self.eager_steps += 1
        return torch.as_tensor(out).reshape(len(rows), -1)

    def decode(self, rows: list[PlannedRow]) -> torch.Tensor:
        """Logits [rows, V] of one decode step at the fixed capacity of every lane."""
        batch = self.lanes * self.decode_capacity
        slots = self.slots(rows)
        tokens = torch.zeros((batch, 1), dtype=torch.int64)
        start_pos = torch.full((batch,), -1, dtype=torch.int64)  # -1: a padding row (skipped)
        for slot, row in zip(slots, rows, strict=True):
            tokens[slot, 0] = row.token_ids[0]
            start_pos[slot] = row.start_position
        g = self.generator
        table = self.page_table(list(zip(slots, rows, strict=True)), batch)
        device_out = g.decode_forward(tokens, start_pos, page_table=table,
                                      kv_cache=self.kv.caches, enable_trace=self.enable_trace,
                                      read_from_device=False)
        host_out, events = g.read_decode_output(device_out, async_read=True)
        for event in events:
            self.ttnn.event_synchronize(event)
        processed = g.process_decode_output_host(host_out, is_tokens=False)
        # newer tt-metal generators return (logits, log-probs)
        logits = torch.as_tensor(processed[0] if isinstance(processed, tuple) else processed)
        if self.enable_trace:
            self.traced_steps += 1
        else:
            self.eager_steps += 1
        return logits.reshape(batch, -1)[torch.tensor(slots)]

    # ---- warmup ------------------------------------------------------------------------------
    def warmup(self) -> list[str]:
        """The generator's own warmup before the model reports ready: `warmup_model_prefill` and
        then `warmup_model_decode` (tt-metal compiles its programs and, with enable_trace, captures
        the decode trace there), each where the generator has it, with the arguments tt-metal's
        hooks take (kv_cache, enable_trace, max_batch_size, num_blocks, can_sample_on_device,
        non_greedy_decoding_on_device) that its signature names. Returns the hooks called."""
        known: dict[str, Any] = {
            "kv_cache": self.kv.caches, "enable_trace": self.enable_trace,
            "max_batch_size": self.lanes * self.decode_capacity, "num_blocks": self.table_width,
            "can_sample_on_device": False, "non_greedy_decoding_on_device": False}
        called = []
        for name, wanted in (("warmup_model_prefill", ("kv_cache", "enable_trace", "can_sample_on_device",
                                                        "non_greedy_decoding_on_device")),
                             ("warmup_model_decode", tuple(known))):
            hook = getattr(self.generator, name, None)
            if hook is None:
                continue
            parameters = inspect.signature(hook).parameters
            takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
            hook(**{key: known[key] for key in wanted if takes_any or key in parameters})
            called.append(name)
        logger.info("tt: generator warmup: %s", ", ".join(called) or "the generator has no warmup hooks")
        return called

    def drain(self) -> int:
        return 0  # every step's outputs are read before run_and_sample returns

    # ---- cleanup -----------------------------------------------------------------------------
    def _drop_generator(self) -> None:
        """Free the generator's device objects (its model, submesh handles) while the mesh is still
        open: ttnn objects left to the interpreter's exit outlive the device (the Python backend's
        stub crashed in its final garbage collection with them)."""
        del self.generator
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
