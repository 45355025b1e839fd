"""GeneratorRunner: our runner contract over a tt-metal generator (a lane per data-parallel
submesh, one generator call per step for all of them), in the calls the Tenstorrent vLLM plugin
makes (`model_runner.py`: `submit_prefill`, the decode path, `warmup_model`).

The generator owns its TTNN model, traces and device sampling; this runner owns the step shapes,
the KV cache's handle (TTPagedKVCache) and the output reads (L lanes, capacity C per lane):

    prefill: rows ─▶ tokens [B, S]: every row's WHOLE sequence (cached prefix included), prompt_lens
             = each row's end, start_pos = its cached length (floored to the resume alignment),
             page_table [B, W], empty_slots ─▶ prefill_forward ─▶ logits [B, 1, V] ─▶ host sampling
             (device sampling: + sampling_params ─▶ tokens)
    decode:  rows ─▶ tokens [L×C, 1], start_pos [L×C], page_table [L×C, W] at the fixed capacity
             ─▶ decode_forward(enable_trace, read_from_device=False[, sampling_params])
             ─▶ read_decode_output(async_read=True) ─▶ event_synchronize each event
             ─▶ process_decode_output_host(is_tokens) ─▶ logits ─▶ host sampling, or tokens

tt-metal computes row i's tokens[i, start_pos[i]:prompt_lens[i]] over the cached K/V before them,
flooring a resumed start_pos to its alignment and recomputing the rest (generator.py,
`prefill_forward_text`); its batched prefill ignores start_pos, so a row past a cached prefix goes
alone. Decode runs at one fixed capacity per lane (the generator's max batch per submesh: its
traces are captured for it); rows beyond the live ones are padding, at position -1 (tt-metal's
mark of an inactive row) over a page table of sink blocks. Older generators
(read_decode_output(tt_out, unpadded_batch, ...)) read inside decode_forward(read_from_device=True).

A step samples on the device (`sampling_params`, tokens back instead of logits) when the plan has
no host path: the engine decides per batch against `self.sampling`, which allows the device only
for a generator declaring supports_sample_on_device. With async decode (`launch` / `complete`,
a generator declaring supports_async_decode) step N+1 is launched once step N's tokens are read,
and the host's work on step N's tokens overlaps the device's step N+1 (runtime/generator_reads.py).

Lanes are the generator's data-parallel submeshes (tt_data_parallel): each submesh has its own
cache with its own block ids, and a planned row carries its lane, its slot in the lane and its
lane-local block ids, so its page table holds the ids as they are. Lane l's decode row of slot s
sits at l × C + s of the lanes × C batch (tt-metal splits it with torch.chunk), and a prefill
row's `empty_slots` entry is that same l × C + s (tt-metal: model_id = slot // max_batch_size).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import torch

from tt_backend.contract.modes import StepMode
from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.cleanup import CleanupError, CleanupLog
from tt_backend.devices.tt.generator import TTCallForms, TTGenerator, TTSamplingParams
from tt_backend.devices.tt.kv_cache import TTPagedKVCache
from tt_backend.runtime.config import SamplingConfig, TraceConfig
from tt_backend.runtime.generator_cross import CrossAttentionCalls
from tt_backend.runtime.generator_images import image_inputs
from tt_backend.runtime.generator_reads import DecodeRead, DecodeReads
from tt_backend.runtime.generator_sampling import tt_sampling_params
from tt_backend.runtime.generator_warmup import warm_up

logger = logging.getLogger(__name__)


class GeneratorRunner:
    def __init__(self, ttnn: Any, generator: TTGenerator, kv: TTPagedKVCache, blocks_per_lane: int,
                 table_width: int, decode_capacity: int, trace: TraceConfig, calls: TTCallForms,
                 batched_prefill: bool, close_device: Any, sampling: SamplingConfig | None = None) -> None:
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
        self.trace = trace
        self.calls = calls
        self.batched_prefill = batched_prefill
        """Rows from position 0 share one prefill call (false: disable_batched_prefill)."""
        assert self.lanes == 1 or calls.takes_empty_slots, "a data-parallel prefill needs empty_slots"
        self.sampling = sampling or SamplingConfig.resolve("none", always_compat=True)
        """Where steps may sample: on the device only for a generator that declares it."""
        self.reads = DecodeReads(ttnn, generator)
        self._inflight: dict[int, DecodeRead] = {}
        self._next_handle = 0
        self.eager_steps = 0
        self.traced_steps = 0
        self.mm_cache_counts = (0, 0)
        """A tt-metal generator runs its vision encoder inside prefill_forward: nothing cached here."""
        self.rope_deltas: dict[int, int] = {}
        """An M-RoPE generator's delta of each batch slot's request, from its prefill (calls.rope_deltas)."""
        self.cross = CrossAttentionCalls() if calls.cross_attention else None
        """Llama 3.2 Vision's masks of each batch slot's request, from its prefill (calls.cross_attention)."""
        self.cleanup_log = CleanupLog()
        self._close_device = close_device
        self._closed = False

    @property
    def cache_dtype(self) -> str:
        return self.kv.geometry.dtype

    @property
    def enable_trace(self) -> bool:
        """Whether decode steps replay the captured trace."""
        return self.trace.decode

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
        """The sampling rows' tokens: from the generator's device sampler when the plan has no host
        path, else from their logits on the host."""
        if self._closed:
            raise RuntimeError("the generator runner is closed")
        rows = list(plan.rows)
        device = sampling if sampling.host is None else None
        if plan.mode is StepMode.PREFILL:
            out = self.prefill(rows, device)
        else:
            out = self.reads.finish(self.start_decode(rows, device, None))
        sampled = [i for i, row in enumerate(rows) if row.sample]
        if sampling.host is None:
            return SampledTokens.read(out[sampled])
        return sampling.host.sample(out[sampled].float())

    def _device_params(self, sampling: SamplingPlan | None, rows: list[int], positions: list[int],
                       batch: int) -> TTSamplingParams | None:
        return None if sampling is None else tt_sampling_params(sampling.tensors, rows, positions, batch)

    def prefill_calls(self, rows: list[PlannedRow], device_sampled: bool = False) -> list[list[int]]:
        """The rows (indices) of each prefill_forward call: the rows from position 0 together (each
        alone with batched prefill off); a row past a cached prefix or an earlier chunk alone
        (tt-metal's batched prefill does not read start_pos), and a row with images alone (it hands
        every row the first row's images). Device-sampled rows go together only at slots 0 .. B-1:
        tt-metal's batched prefill writes row i's token at its slot's index."""
        fresh = [i for i, row in enumerate(rows) if row.start_position == 0 and not row.images]
        alone = [[i] for i, row in enumerate(rows) if row.start_position > 0 or row.images]
        batched = self.batched_prefill and bool(fresh) and (
            not device_sampled or self.slots([rows[i] for i in fresh]) == list(range(len(fresh))))
        together = [fresh] if batched else [[i] for i in fresh]
        return together + alone

    def prefill(self, rows: list[PlannedRow], sampling: SamplingPlan | None = None) -> torch.Tensor:
        """Logits [rows, V] of each row's last token; with device `sampling`, its token [rows]."""
        outs: list[torch.Tensor | None] = [None] * len(rows)
        for call in self.prefill_calls(rows, device_sampled=sampling is not None):
            params = self._device_params(sampling, call, list(range(len(call))), len(call))
            out = self._prefill_call([rows[i] for i in call], params)
            for k, i in enumerate(call):
                outs[i] = out[k, 0] if params is not None else out[k]
        self.eager_steps += 1
        return torch.stack([row_out for row_out in outs if row_out is not None])

    def _prefill_call(self, rows: list[PlannedRow], params: TTSamplingParams | None) -> torch.Tensor:
        calls = self.calls
        longest = max(row.context_len for row in rows)
        tokens = torch.zeros((len(rows), longest), dtype=torch.int64)
        starts: list[int] = []
        for i, row in enumerate(rows):
            assert len(row.prefix_token_ids) == row.start_position, \
                f"a row at position {row.start_position} came without its prefix tokens"
            tokens[i, :row.context_len] = torch.tensor(row.prefix_token_ids + row.token_ids)
            starts.append(row.start_position // calls.resume_alignment * calls.resume_alignment)
        kwargs: dict[str, Any] = {}
        if calls.takes_start_pos:
            kwargs["start_pos"] = starts
        elif any(starts):
            raise AssertionError("a row past position 0 reached a generator that takes no start_pos")
        if calls.takes_empty_slots:
            kwargs["empty_slots"] = self.slots(rows)
        if calls.takes_prefill_trace:  # images untraced: tt-metal's traced prefill drops them
            kwargs["enable_trace"] = self.trace.prefill and not any(row.images for row in rows)
        if params is not None:
            kwargs["sampling_params"] = params
        table = self.page_table(list(enumerate(rows)), len(rows))
        if self.cross is not None:  # the rows' own blocks hold their cross-attention KV too
            kwargs.update(self.cross.prefill_kwargs(rows, table))
        elif calls.takes_images:
            kwargs.update(image_inputs(rows))
        out = self.generator.prefill_forward(tokens, page_table=table, kv_cache=self.kv.caches,
                                             prompt_lens=[row.context_len for row in rows], **kwargs)
        if self.cross is not None:
            out = self.cross.keep(self.slots(rows), out)
        if calls.rope_deltas:  # (logits, rope_deltas [B, 1]): kept for the rows' decode steps
            out, deltas = out
            values = torch.as_tensor(deltas).reshape(-1).tolist()
            for slot, delta in zip(self.slots(rows), values, strict=True):
                self.rope_deltas[slot] = int(delta)
        return torch.as_tensor(out[0] if isinstance(out, tuple) else out).reshape(len(rows), -1)

    def decode(self, rows: list[PlannedRow]) -> torch.Tensor:
        """Logits [rows, V] of one decode step at the fixed capacity of every lane."""
        return self.reads.finish(self.start_decode(rows, None, None))

    def start_decode(self, rows: list[PlannedRow], sampling: SamplingPlan | None,
                      fed: torch.Tensor | None) -> DecodeRead:
        """Launch one decode step at the fixed capacity of every lane and start its read. `fed`:
        the rows' input tokens from the step before (async decode), instead of the plan's."""
        batch = self.lanes * self.decode_capacity
        slots = self.slots(rows)
        tokens = torch.zeros((batch, 1), dtype=torch.int64)
        start_pos = torch.full((batch,), -1, dtype=torch.int64)  # -1: a padding row (skipped)
        for i, (slot, row) in enumerate(zip(slots, rows, strict=True)):
            tokens[slot, 0] = row.token_ids[0] if fed is None else int(fed[i])
            start_pos[slot] = row.start_position
        g = self.generator
        table = self.page_table(list(zip(slots, rows, strict=True)), batch)
        params = self._device_params(sampling, list(range(len(rows))), slots, batch)
        kwargs: dict[str, Any] = {} if params is None else {"sampling_params": params}
        if self.calls.rope_deltas:  # the plugin's authoritative list, one per batch row
            kwargs["rope_deltas_all_users"] = [self.rope_deltas.get(slot, 0) for slot in range(batch)]
        if self.cross is not None:
            kwargs.update(self.cross.decode_kwargs(slots, table, batch))
        if self.enable_trace:
            self.traced_steps += 1
        else:
            self.eager_steps += 1
        if self.calls.async_read:
            device_out = g.decode_forward(tokens=tokens, start_pos=start_pos, page_table=table,
                                          kv_cache=self.kv.caches, enable_trace=self.enable_trace,
                                          read_from_device=False, **kwargs)
            return self.reads.start(device_out, slots, is_tokens=params is not None)
        # the older generators read inside decode_forward (and sample on the host)
        processed = g.decode_forward(tokens=tokens, start_pos=start_pos, page_table=table,
                                     kv_cache=self.kv.caches, enable_trace=self.enable_trace,
                                     read_from_device=True)
        return DecodeRead(None, [], slots, False, self.reads.rows(processed, slots, False))

    # ---- async decode: launched steps, read later ---------------------------------------------
    def launch(self, plan: StepPlan, sampling: SamplingPlan, after: int | None = None) -> int:
        """Launch a device-sampled decode step and start its read without waiting; return its
        handle. With `after` (the step launched just before), that step's tokens, waited for here,
        are this step's input tokens: the host's work on step `after` then overlaps this one."""
        assert plan.mode is StepMode.DECODE and sampling.host is None, "only device-sampled decode runs ahead"
        assert self.calls.async_read, "async decode needs read_decode_output(async_read=True)"
        fed = None if after is None else self.reads.finish(self._inflight[after])
        read = self.start_decode(list(plan.rows), sampling, fed)
        handle, self._next_handle = self._next_handle, self._next_handle + 1
        self._inflight[handle] = read
        return handle

    def complete(self, handle: int) -> SampledTokens:
        return SampledTokens.read(self.reads.finish(self._inflight.pop(handle)))

    # ---- warmup ------------------------------------------------------------------------------
    def warmup(self) -> list[str]:
        """The generator's two-phase warmup before the model reports ready
        (runtime/generator_warmup.py), over the hooks its call forms name (none of Mllama's: they run
        its decode in the text form, which it does not take); returns the hooks called, in order."""
        hooks = tuple(name for name, calls in (("warmup_model_prefill", self.calls.warms_up_prefill),
                                               ("warmup_model_decode", self.calls.warms_up_decode)) if calls)
        return warm_up(self.generator, self.kv.caches, self.trace, self.lanes * self.decode_capacity,
                       self.table_width, self.sampling, hooks)

    def drain(self) -> int:
        """Wait for every launched step's read and drop it; return how many there were."""
        pending = list(self._inflight.values())
        self._inflight.clear()
        for read in pending:
            self.reads.finish(read)
        return len(pending)

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
            log.release("decode_reads", lambda: logger.debug("retired %d reads", self.drain()))
            log.release("kv_cache", self.kv.release)
            log.release("generator", self._drop_generator)
            log.release("device", self._close_device)
        if log.orphans:
            raise CleanupError(list(log.orphans))
