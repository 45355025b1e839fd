"""Device sampling for the contract generator (G @ 290fd31c decode_forward / prefill_forward_text with
`sampling_params`, SG's sampler, W's warmup configs): a mixin over TTLlamaForCausalLM, mixed in by
contract_generator.py as TTLlamaSamplingForCausalLM (RULES.md "Device sampling").

With sampling_params a prefill returns `(tokens [B, 1] int64, log_probs [B] ones)` and a decode's outputs
are tokens: process_decode_output_host(..., is_tokens=True) gives `(tokens [B] int32, log_probs [B] ones)`.
A traced sampled decode reads the previous traced step's tokens ON THE DEVICE (G writes the sampled tokens
into the trace's input buffer) unless G re-copies the host inputs (after a prefill, a change of sampling
mode, or a changed page table).

Observables (plain attributes): `reads` ([kind, bytes] per read to the host: "decode_logits" rows x vocab
x 2 (bfloat16), "decode_tokens" rows x 4 (uint32), "prefill_logits" / "prefill_tokens" likewise) and
`decode_token_sources` ("host" or "device" per serving decode: where its input tokens came from).
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import ttnn

core = sys.modules["tt_contract_llama_core"]
ds = core.load_by_path(core.HERE / "device_sampler.py", "tt_contract_llama_device_sampler")
require = core.rules.require


class DeviceSampling:
    """Overrides GV's entry points (prefill_forward, decode_forward) and G's read path of the class it
    is mixed into; sampling_params=None keeps the logits path of that class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slot_rngs = [ds.SlotRngs(self.max_batch_size) for _ in self.submeshes]
        self.reads: list[list[Any]] = []
        """[kind, bytes] per copy to the host (see the module doc)."""
        self.decode_token_sources: list[str] = []
        self.sampling_trace_captured = False
        """G keys decode traces by sampling_on_device: warmup_model_decode(can_sample_on_device=True,
        enable_trace=True) captures the sampling one."""
        self._mode = "none"  # G self.mode: "prefill" / "decode"
        self._prev_table: torch.Tensor | None = None  # G prev_page_table (traced decodes)
        self._prev_sampling: bool | None = None  # G _prev_sampling_on_device
        self._device_tokens: torch.Tensor | None = None  # the trace's input token buffer, [B, 1]

    # ---- prefill (GV prefill_forward -> G prefill_forward_text) ----------------------------------
    def prefill_forward(self, tokens: torch.Tensor, page_table: torch.Tensor | None = None,
                        kv_cache: Any = None, prompt_lens: Any = None, empty_slots: Any = None,
                        enable_trace: bool = True, model_id_warmup: int | None = None,
                        sampling_params: Any = None, start_pos: Any = None,
                        return_hidden_states: bool = False, warmup_prefill: bool = True,
                        **kwargs: Any) -> Any:
        self._mode = "prefill"
        logits = super().prefill_forward(  # type: ignore[misc]
            tokens, page_table, kv_cache, prompt_lens, empty_slots, enable_trace, model_id_warmup, None,
            start_pos, return_hidden_states, warmup_prefill, **kwargs)
        rows = logits.shape[0]
        if sampling_params is None:
            self.reads.append(["prefill_logits", rows * self.hf.vocab_size * 2])
            return logits
        params = ds.prefill_rows(sampling_params, rows, self.hf.vocab_size)
        slots = list(range(rows)) if empty_slots is None else [int(s) for s in empty_slots]
        out = torch.zeros(rows, 1, dtype=torch.int64)
        for i, (slot, row) in enumerate(zip(slots, params, strict=True)):
            rngs = self.slot_rngs[slot // self.max_batch_size]
            rngs.reset(slot % self.max_batch_size, row.seed)  # SG apply_prefill_state: reset_seed, one draw
            out[i, 0] = ds.sample(logits[i, 0], row, rngs.draw(slot % self.max_batch_size))
        self.reads.append(["prefill_tokens", rows * 4])
        return out, torch.ones(rows)  # G: (output_tokens, reformat_logprobs(...)): ones without log-probs

    # ---- decode (GV decode_forward -> G decode_forward) ------------------------------------------
    def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor,
                       page_table: torch.Tensor | None = None, kv_cache: Any = None,
                       enable_trace: bool = True, read_from_device: bool = True,
                       sampling_params: Any = None, reset_batch: bool = False, prompt_tokens: Any = None,
                       output_tokens: Any = None, slot_remap: Any = None, **kwargs: Any) -> Any:
        sampling = sampling_params is not None
        from_device = self._trace_inputs_kept(page_table, sampling, enable_trace)
        if not sampling:
            return super().decode_forward(  # type: ignore[misc]
                tokens, start_pos, page_table, kv_cache, enable_trace, read_from_device, None, reset_batch,
                prompt_tokens, output_tokens, slot_remap, **kwargs)
        full = self.data_parallel * self.max_batch_size
        params = ds.decode_rows(sampling_params, full, self.hf.vocab_size)
        if self._in_warmup and enable_trace:
            self.sampling_trace_captured = True
        elif enable_trace:  # G _decode_forward_trace_text captures the sampling trace on its first call
            require(self.sampling_trace_captured, "decode_forward(sampling_params=..., enable_trace=True) "
                    "with no sampling decode trace captured by warmup_model_decode(can_sample_on_device="
                    "True, enable_trace=True): tt-metal would capture it while serving")
        if slot_remap is not None:
            remap = [int(v) for v in (slot_remap.tolist() if hasattr(slot_remap, "tolist") else slot_remap)]
            require(len(remap) == full, f"slot_remap has {len(remap)} entries for the batch of {full}")
            for m, rngs in enumerate(self.slot_rngs):  # G hands each submesh its slice of slot_remap
                rngs.remap(remap[m * self.max_batch_size:(m + 1) * self.max_batch_size])
        feed = self._device_tokens if from_device and self._device_tokens is not None else tokens
        if not self._in_warmup:
            self.decode_token_sources.append("device" if feed is not tokens else "host")
        tt_out: list[Any] = []
        sampled = torch.zeros(full, 1, dtype=torch.int64)
        for m, (device_logits, logits) in enumerate(self.decode(feed, start_pos, page_table, kv_cache,
                                                                 enable_trace)):
            ttnn.deallocate(device_logits)
            draws = self.slot_rngs[m].step()  # SG get_new_values(): every slot advances once
            rows = torch.zeros(logits.shape[0], dtype=torch.int64)
            for r in range(logits.shape[0]):
                if not torch.isnan(logits[r]).any():  # inactive rows (and warmup rows): token 0
                    rows[r] = ds.sample(logits[r], params[m * self.max_batch_size + r], draws[r])
            sampled[m * self.max_batch_size:(m + 1) * self.max_batch_size, 0] = rows
            host_tokens = rows.to(torch.int32)[None, None, None]  # [1, 1, 1, rows]
            device_tokens = core.ops.to_device(ttnn, self.submeshes[m], host_tokens, ttnn.int32,
                                               ttnn.ROW_MAJOR_LAYOUT)
            self.remember(device_tokens, rows)
            tt_out.append((device_tokens, None))
        if enable_trace:  # G: SamplingGenerator.sample(tt_out_tok=trace input tokens)
            self._device_tokens = sampled
        if read_from_device:
            return self.process_decode_output_host(self.read_decode_output(tt_out), is_tokens=True)
        return tt_out

    def _trace_inputs_kept(self, page_table: Any, sampling: bool, enable_trace: bool) -> bool:
        """G _decode_forward_trace_text: whether the trace keeps its device inputs (the last sampled tokens)
        instead of copying the host's: traced, sampling, no switch from prefill, same sampling mode as the
        last traced decode, same page table."""
        switched, self._mode = self._mode != "decode", "decode"
        if not enable_trace:
            return False
        changed = self._prev_table is None or not isinstance(page_table, torch.Tensor) \
            or self._prev_table.shape != page_table.shape or not torch.equal(self._prev_table, page_table)
        if changed and isinstance(page_table, torch.Tensor):
            self._prev_table = page_table.clone()
        mode_changed = self._prev_sampling is not None and self._prev_sampling != sampling
        self._prev_sampling = sampling
        return sampling and not (switched or mode_changed or changed)

    # ---- the read path -----------------------------------------------------------------------
    def _kind(self, tt_out: Any) -> str:
        entries = tt_out if isinstance(tt_out, list) else []
        payloads = [self._pending.get(id(e[0] if isinstance(e, tuple) else e)) for e in entries]
        kinds = {"decode_tokens" if p[1].dtype == torch.int64 else "decode_logits" for p in payloads if p}
        return kinds.pop() if len(kinds) == 1 else "unknown"

    def _record_read(self, kind: str) -> None:
        width = 4 if kind == "decode_tokens" else self.hf.vocab_size * 2
        self.reads.append([kind, self.data_parallel * self.max_batch_size * width])

    def read_decode_output(self, tt_out: Any, async_read: bool = False) -> Any:
        kind = self._kind(tt_out)
        out = super().read_decode_output(tt_out, async_read)  # type: ignore[misc]
        self._record_read(kind)
        return out

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = False) -> Any:
        """(tokens [B] int32, ones) for sampled outputs, (logits [B, 1, vocab], ones) otherwise (G)."""
        kind = self._kind(tt_out)
        if kind != "unknown":
            require(is_tokens == (kind == "decode_tokens"),
                    f"process_decode_output_host(is_tokens={is_tokens}) of decode outputs holding "
                    f"{kind.removeprefix('decode_')} (is_tokens must be `sampling_params is not None` of the "
                    "decode_forward that returned them)")
            first = tt_out[0][0] if isinstance(tt_out[0], tuple) else tt_out[0]
            if ttnn.is_tensor_storage_on_device(first):  # P's sync path reads the device outputs here
                self._record_read(kind)
        if kind != "decode_tokens":
            return super().process_decode_output_host(tt_out, is_tokens)  # type: ignore[misc]
        rows = [self.recall(e[0] if isinstance(e, tuple) else e, "process_decode_output_host")
                for e in tt_out]
        tokens = torch.cat(rows).to(torch.int32)
        return tokens, torch.ones(tokens.shape)

    # ---- warmup (W warmup_model_decode: its sampling configs, then None) -----------------------
    def warmup_model_decode(self, kv_cache: Any, enable_trace: bool, max_batch_size: int, num_blocks: int,
                            can_sample_on_device: bool, non_greedy_decoding_on_device: bool = False) -> None:
        """W: with can_sample_on_device, decode_forward runs with a greedy config (and with
        non_greedy_decoding_on_device a random one: top_k 10, top_p 0.9, temperature 1; W's penalty and
        log-prob configs compile paths the stand-in has no programs for), then with None."""
        self.warmups.append(["warmup_model_decode", {
            "enable_trace": enable_trace, "max_batch_size": max_batch_size, "num_blocks": num_blocks,
            "can_sample_on_device": can_sample_on_device,
            "non_greedy_decoding_on_device": non_greedy_decoding_on_device}])
        configs: list[Any] = [None]
        if can_sample_on_device:
            greedy = ds.SamplingParams(temperature=[0.0] * max_batch_size, top_k=[1] * max_batch_size,
                               top_p=[1.0] * max_batch_size)
            random_ = ds.SamplingParams(temperature=[1.0] * max_batch_size, top_k=[10] * max_batch_size,
                                top_p=[0.9] * max_batch_size)
            configs = [random_, greedy, None] if non_greedy_decoding_on_device else [greedy, None]
        self._in_warmup = True
        try:
            for params in configs:
                self.decode_forward(tokens=torch.zeros(max_batch_size, 1, dtype=torch.int32),
                                    start_pos=torch.zeros(max_batch_size, dtype=torch.int32),
                                    page_table=torch.zeros(max_batch_size, num_blocks, dtype=torch.int32),
                                    kv_cache=kv_cache, enable_trace=enable_trace, read_from_device=True,
                                    sampling_params=params)
        finally:
            self._in_warmup = False
