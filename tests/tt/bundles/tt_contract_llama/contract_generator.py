"""A contract generator for the Tenstorrent test tier: a stand-in for tt-metal's vLLM generator
`models.tt_transformers.tt.generator_vllm.LlamaForCausalLM` and its base
`models.tt_transformers.tt.generator.Generator`, written from their source (read, not copied):

    G   tt-metal models/tt_transformers/tt/generator.py @ 290fd31c03680911ee060c1adf33804555055cbb
    GV  tt-metal models/tt_transformers/tt/generator_vllm.py @ 290fd31c
    W   tt-metal models/common/warmup/warmup_utils.py @ 9f66942977ee00fda5b43291527cf5d8ee6d7a1d
    AT  tt-metal's host-only test of Generator._align_resume_offsets (the newer generator that
        floors resume offsets); MC models/common/model_capabilities.py (ModelCapabilitiesMixin doc)
    OLD tt-metal generator.py @ d9d95fa357fd2eb79e72ee3fa7daf1214bd9f233
    P   vllm-tt-plugin e3fc849 (model_runner.py, async_decode.py, platform.py): the caller
    SG  tt-metal models/common/sampling/generator.py @ 00b0fa3f (SamplingParams, format_sampling_params,
        SeedManager); OP ttnn.sampling (its doc and kernels); FV models/common/sampling/full_vocab_contract.py
        @ 2befd795; LP models/common/sampling/tt_log_probs.py: the device sampler (device_sampler.py)

It has tt-metal's method signatures and return forms, runs real ttnn objects (submeshes, the KV
cache on the device, the paged ops at each step's shapes, decode outputs on the device, the async
read with its events), raises `ContractViolation` ("tt-metal contract: ...") on every precondition
tt-metal relies on (contract_rules.py; the list is RULES.md), and computes its numbers with HF
transformers on the host (host_compute.py), so a wrong page table, position or lane gives wrong
tokens or a violation. The classes (each a bundle, see RULES.md "Variants"):

    TTLlamaForCausalLM         current tt-metal LlamaForCausalLM (GV model_capabilities)
    TTLlamaChunkedForCausalLM  also declares supports_chunked_prefill
    TTLlamaAlignedForCausalLM  also declares resumed_prefill_token_alignment (128)
    TTLlamaOlderForCausalLM    an older generator: OLD's signatures, no capabilities, no warmup hooks
    TTLlamaSamplingForCausalLM also declares supports_sample_on_device: G's sampling_params path, the
                               sampler computed on the host (sampling_generator.py, device_sampler.py)
    TTQwen2_5_VLForConditionalGeneration  tt-metal's Qwen2.5-VL generator (QV, see the class): images in
                               prefill, rope deltas out of it and into decode (host_vision.py)
    TTGemma3ForConditionalGeneration  tt-metal's Gemma 3 generator (GM, see the class): images through
                               G's prefill_forward_text, one row per prefill, untraced
    TTMllamaForConditionalGeneration  tt-metal's Llama 3.2 Vision generator (mllama_generator.py):
                               one image a row, cross_page_table, masks from prefill into decode
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
import ttnn

_core_name = "tt_contract_llama_core"
if _core_name not in sys.modules:  # the registry loads this file alone, by its path
    import importlib.util
    _path = Path(__file__).resolve().with_name("contract_core.py")
    _spec = importlib.util.spec_from_file_location(_core_name, _path)
    assert _spec is not None and _spec.loader is not None
    sys.modules[_core_name] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_core_name])
core = sys.modules[_core_name]
ContractViolation = core.rules.ContractViolation
require = core.rules.require
Output = list[Any]  # per submesh: (logits, log_probs) tuples on the device, or their host copies


class Generator(core.ContractCore):
    """G `Generator`: the vLLM-facing text methods."""

    # G Generator: class-level capabilities, to be overridden by subclasses
    model_capabilities: dict[str, Any] = {"supports_prefix_caching": True}

    def _no_device_sampling(self, sampling_params: Any, can_sample_on_device: bool, where: str) -> None:
        # P platform.py check_and_update_config: sampling on the device only if the class declares
        # supports_sample_on_device; this stand-in samples on the host and declares none.
        declared = bool(self.model_capabilities.get("supports_sample_on_device"))
        require(declared or (sampling_params is None and not can_sample_on_device),
                f"{where}: device sampling requested (sampling_params={sampling_params!r:.80}, "
                f"can_sample_on_device={can_sample_on_device}) of a generator that declares no "
                "supports_sample_on_device")

    # G prefill_forward_text ("Note: This function is called by vLLM")
    def prefill_forward_text(self, tokens: torch.Tensor, page_table: torch.Tensor | None = None,
                             kv_cache: Any = None, prompt_lens: Any = None, empty_slots: Any = None,
                             enable_trace: bool = True, model_id_warmup: int | None = None,
                             sampling_params: Any = None, start_pos: Any = None,
                             return_hidden_states: bool = False, warmup_prefill: bool = True,
                             **kwargs: Any) -> torch.Tensor:
        """tokens: ALL tokens, cached ones included; prompt_lens: full lengths, cached ones included;
        start_pos: cached prefix lengths (floored as AT does). Logits [B, 1, vocab] on the host."""
        require(model_id_warmup is None, "model_id_warmup is tt-metal's own warmup argument, not a caller's")
        require(not return_hidden_states, "return_hidden_states=True is not the vLLM text path")
        require(not kwargs, f"prefill_forward_text got {sorted(kwargs)}: G hands extra keywords to the text "
                "model's prepare_inputs_prefill, which takes none of them")
        self._no_device_sampling(sampling_params, False, "prefill_forward_text")
        if warmup_prefill and not self.already_warmed_up_prefill:
            # G: "we need this here because of tt-metal tests": the warmup runs inside this call
            self._warmup_prefill(kv_cache, enable_trace, False, False, serving=True)
        out: torch.Tensor = self.prefill(tokens, page_table, kv_cache, prompt_lens, start_pos, empty_slots,
                                         enable_trace and page_table is not None)
        return out

    # G decode_forward ("Note: This function is called by vLLM")
    def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor,
                       page_table: torch.Tensor | None = None, kv_cache: Any = None,
                       enable_trace: bool = True, read_from_device: bool = True, sampling_params: Any = None,
                       reset_batch: bool = False, prompt_tokens: Any = None, output_tokens: Any = None,
                       slot_remap: Any = None, **kwargs: Any) -> Any:
        """One step at the fixed batch (start_pos -1: an inactive row). read_from_device: the
        processed host output; else per submesh a (logits, log_probs=None) tuple on the device."""
        self._no_device_sampling(sampling_params, False, "decode_forward")
        tt_out: Output = []
        for device_out, logits in self.decode(tokens, start_pos, page_table, kv_cache, enable_trace):
            self.remember(device_out, logits)
            tt_out.append((device_out, None))
        if read_from_device:
            return self.process_decode_output_host(self.read_decode_output(tt_out),
                                                   is_tokens=sampling_params is not None)
        return tt_out

    # G read_decode_output ("Note: This function is called by vLLM")
    def read_decode_output(self, tt_out: Output, async_read: bool = False) -> Any:
        """Per submesh the host copy; async_read: (host copies, one ttnn.record_event per submesh)
        after non-blocking reads, which the caller waits on (P: ttnn.event_synchronize)."""
        require(isinstance(tt_out, list) and len(tt_out) == self.data_parallel,
                f"read_decode_output takes decode_forward's per-submesh list ({self.data_parallel}), got "
                f"{type(tt_out).__name__}")
        hosts: Output = []
        for entry in tt_out:
            device_out = entry[0] if isinstance(entry, tuple) else entry
            logits = self.recall(device_out, "read_decode_output")
            host_out = device_out.cpu(blocking=not async_read)
            self.remember(host_out, logits)
            hosts.append((host_out, None) if isinstance(entry, tuple) else host_out)
        if not async_read:
            return hosts
        return hosts, [ttnn.record_event(submesh, 0) for submesh in self.submeshes]

    # G process_decode_output_host ("Note: This function is called by vLLM")
    def process_decode_output_host(self, tt_out: Output,
                                   is_tokens: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, 1, vocab], log_probs): the submeshes' rows in order; log_probs are ones when
        none were computed (G). Takes host copies or, as P's synchronous path does, the device outputs."""
        require(not is_tokens, "process_decode_output_host(is_tokens=True): no tokens were sampled on the "
                "device")
        require(isinstance(tt_out, list) and len(tt_out) == self.data_parallel,
                f"process_decode_output_host takes a per-submesh list ({self.data_parallel}), got "
                f"{type(tt_out).__name__}")
        rows = [self.recall(entry[0] if isinstance(entry, tuple) else entry, "process_decode_output_host")
                for entry in tt_out]
        logits = torch.cat(rows)[:, None, :]
        return logits, torch.ones(logits.shape)

    # G warmup_model_prefill (P calls it by keyword without non_greedy_decoding_on_device)
    def warmup_model_prefill(self, kv_cache: Any, enable_trace: bool, can_sample_on_device: bool,
                             non_greedy_decoding_on_device: bool = False) -> None:
        self._warmup_prefill(kv_cache, enable_trace, can_sample_on_device, non_greedy_decoding_on_device,
                             serving=False)

    def _warmup_prefill(self, kv_cache: Any, enable_trace: bool, can_sample_on_device: bool,
                        non_greedy_decoding_on_device: bool, serving: bool) -> None:
        self.warmups.append(["warmup_model_prefill", {
            "enable_trace": enable_trace, "can_sample_on_device": can_sample_on_device,
            "non_greedy_decoding_on_device": non_greedy_decoding_on_device}])
        self._no_device_sampling(None, can_sample_on_device, "warmup_model_prefill")
        if self.already_warmed_up_prefill:  # G: returns at once; P resets it between its two phases
            return
        self.warm_prefill(kv_cache, enable_trace, serving)
        self.already_warmed_up_prefill = True

    # W WarmupForwardMixin.warmup_model_decode: decode_forward at the full batch, zeros inputs
    def warmup_model_decode(self, kv_cache: Any, enable_trace: bool, max_batch_size: int, num_blocks: int,
                            can_sample_on_device: bool, non_greedy_decoding_on_device: bool = False) -> None:
        """max_batch_size: the whole decode batch (all submeshes); num_blocks: the page-table width
        serving decodes use (a traced decode replays at exactly that shape)."""
        self.warmups.append(["warmup_model_decode", {
            "enable_trace": enable_trace, "max_batch_size": max_batch_size, "num_blocks": num_blocks,
            "can_sample_on_device": can_sample_on_device,
            "non_greedy_decoding_on_device": non_greedy_decoding_on_device}])
        self._no_device_sampling(None, can_sample_on_device, "warmup_model_decode")
        self._in_warmup = True
        try:
            self.decode_forward(tokens=torch.zeros(max_batch_size, 1, dtype=torch.int32),
                                start_pos=torch.zeros(max_batch_size, dtype=torch.int32),
                                page_table=torch.zeros(max_batch_size, num_blocks, dtype=torch.int32),
                                kv_cache=kv_cache, enable_trace=enable_trace, read_from_device=True,
                                sampling_params=None)
        finally:
            self._in_warmup = False


def _check_init(hf_config: Any, n_layers: int | None, optimizations: str | None) -> None:
    if n_layers is not None and n_layers != hf_config.num_hidden_layers:
        raise ValueError(f"n_layers={n_layers}: the contract generator computes the whole HF model "
                         f"({hf_config.num_hidden_layers} layers)")
    # GV: DecodersPrecision.from_string(optimizations) knows these
    require(optimizations in (None, "performance", "accuracy"), f"optimizations={optimizations!r} is not "
            "'performance' or 'accuracy'")


class TTLlamaForCausalLM(Generator):
    """GV `LlamaForCausalLM(Generator)`."""

    model_capabilities = {"supports_prefix_caching": True, "supports_async_decode": True}

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              n_layers: int | None = None, tt_data_parallel: int = 1,
                              optimizations: str = "performance") -> TTLlamaForCausalLM:
        """max_batch_size: all submeshes together (GV gives each max_batch_size // tt_data_parallel)."""
        _check_init(hf_config, n_layers, optimizations)
        return cls(hf_config, mesh_device, max_batch_size, max_seq_len, tt_data_parallel)

    @property
    def cache_path(self) -> Path:
        return Path(self.hf_config._name_or_path)

    def prefill_forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return super().prefill_forward_text(*args, **kwargs)

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        return super().decode_forward(*args, **kwargs)

    def allocate_kv_cache(self, *args: Any, **kwargs: Any) -> list[list[list[Any]]]:
        return self._allocate_vllm_kv_cache(*args, **kwargs)

    def _allocate_vllm_kv_cache(self, kv_cache_shape: tuple[int, int, int, int], dtype: torch.dtype,
                                num_layers: int) -> list[list[list[Any]]]:
        """GV allocate_vllm_kv_cache: per submesh, per layer, [K, V] of the per-chip kv_cache_shape,
        replicated to every chip, TILE, bfloat8_b, in DRAM."""
        regions: list[list[list[Any]]] = self.allocate(kv_cache_shape, dtype, num_layers)
        return regions


class TTLlamaChunkedForCausalLM(TTLlamaForCausalLM):
    """Declares chunked prefill too (MC supports_chunked_prefill: one prompt over several steps)."""

    model_capabilities = {"supports_prefix_caching": True, "supports_async_decode": True,
                          "supports_chunked_prefill": True}


class TTLlamaAlignedForCausalLM(TTLlamaForCausalLM):
    """Declares resumed_prefill_token_alignment (MC): with block 32, resumes floor to 128."""

    model_capabilities = {"supports_prefix_caching": True, "supports_async_decode": True,
                          "resumed_prefill_token_alignment": 128}


class TTLlamaOlderForCausalLM(core.ContractCore):
    """An older generator (OLD generator.py and the generator_vllm.py of its time): no start_pos
    (no prefix caching), no empty_slots (rows go to submesh row // max_batch_size), no
    model_capabilities, no warmup hooks (a traced decode captures on its first call), and
    read_decode_output(tt_out, unpadded_batch) returning host logits."""

    floors_resume_offsets = False

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int,
                              max_seq_len: int = 131072, n_layers: int | None = None,
                              tt_data_parallel: int = 1) -> TTLlamaOlderForCausalLM:
        _check_init(hf_config, n_layers, None)
        return cls(hf_config, mesh_device, max_batch_size, max_seq_len, tt_data_parallel)

    def allocate_kv_cache(self, kv_cache_shape: tuple[int, int, int, int], dtype: torch.dtype,
                          num_layers: int) -> list[list[list[Any]]]:
        regions: list[list[list[Any]]] = self.allocate(kv_cache_shape, dtype, num_layers)
        return regions

    def prefill_forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.prefill_forward_text(*args, **kwargs)

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.decode_forward_text(*args, **kwargs)

    # OLD prefill_forward_text
    def prefill_forward_text(self, tokens: torch.Tensor, page_table: torch.Tensor, kv_cache: Any,
                             prompt_lens: Any) -> torch.Tensor:
        out: torch.Tensor = self.prefill(tokens, page_table, kv_cache, prompt_lens, None, None, False)
        return out

    # OLD decode_forward_text
    def decode_forward_text(self, tokens: torch.Tensor, start_pos: torch.Tensor,
                            page_table: torch.Tensor | None = None, kv_cache: Any = None,
                            enable_trace: bool = True, read_from_device: bool = True) -> Any:
        tt_out = []
        for device_out, logits in self.decode(tokens, start_pos, page_table, kv_cache, enable_trace):
            self.remember(device_out, logits)
            tt_out.append(device_out)
        if read_from_device:
            return self.read_decode_output(tt_out, tokens.shape[0])
        return tt_out

    # OLD read_decode_output: device logits -> host logits [unpadded_batch, 1, vocab]
    def read_decode_output(self, tt_out: list[Any], unpadded_batch: int,
                           is_tokens: bool = False) -> torch.Tensor:
        require(not is_tokens, "read_decode_output(is_tokens=True): no tokens were sampled on the device")
        require(isinstance(tt_out, list) and len(tt_out) == self.data_parallel,
                f"read_decode_output takes decode_forward's per-submesh list ({self.data_parallel})")
        logits = torch.cat([self.recall(out, "read_decode_output") for out in tt_out])[:, None, :]
        return logits[:unpadded_batch]


sampling = core.load_by_path(core.HERE / "sampling_generator.py", "tt_contract_llama_sampling")


class TTLlamaSamplingForCausalLM(sampling.DeviceSampling, TTLlamaForCausalLM):
    """TTLlamaForCausalLM that samples on the device (tt-metal's LlamaForCausalLM @ 290fd31c does not
    declare supports_sample_on_device; the declaration is this stand-in's, RULES.md 56)."""

    model_capabilities = {"supports_prefix_caching": True, "supports_async_decode": True,
                          "supports_sample_on_device": True}


vision = core.load_by_path(core.HERE / "host_vision.py", "tt_contract_llama_vision")


class TTQwen2_5_VLForConditionalGeneration(TTLlamaForCausalLM):
    """QV tt-metal models/demos/qwen25_vl/tt/generator_vllm.py @ 00493af6
    `Qwen2_5_VLForConditionalGeneration(QwenVLGenerator, SupportsMultiModal)`: vLLM's multimodal
    marker; prefill_forward(tokens, page_table, kv_cache, prompt_lens, enable_trace, **kwargs) with
    the plugin's per-user `pixel_values` / `image_grid_thw` lists, start_pos all 0, returning
    (logits, rope_deltas); decode_forward taking `rope_deltas_all_users` (persistent per-slot state,
    kept while the caller sends None). The numbers: HF's Qwen2.5-VL on the host (host_vision.py).
    Left out of QV: its device sampling (supports_sample_on_device, max_device_top_k) and slot_remap
    (the caller here never compacts its batch: refused)."""

    supports_multimodal = True  # vLLM interfaces.SupportsMultiModal
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True}
    reference = vision.VisionReference

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int,
                              max_seq_len: int, tt_data_parallel: int = 1,
                              optimizations: str | None = None) -> TTQwen2_5_VLForConditionalGeneration:
        require(optimizations is None, f"optimizations={optimizations!r}: QV asserts \"Custom optimizations "
                "are not supported for this model\"")
        return cls(hf_config, mesh_device, max_batch_size, max_seq_len, tt_data_parallel)

    def prefill_forward(self, tokens: torch.Tensor, page_table: torch.Tensor, kv_cache: Any,
                        prompt_lens: Any, enable_trace: bool,
                        **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        empty_slots = kwargs.pop("empty_slots", None)
        start_pos = kwargs.pop("start_pos", None)
        require(start_pos is None or all(int(x) == 0 for x in start_pos), "QV: Prefix caching is not "
                f"supported for Qwen2_5_VL, got start_pos: {start_pos}")
        pixel_values, grids = kwargs.pop("pixel_values", None), kwargs.pop("image_grid_thw", None)
        require(not kwargs, f"prefill_forward got {sorted(kwargs)}: QV takes pixel_values and image_grid_thw")
        rows = tokens.shape[0]
        self._images: list[dict[str, Any]] = [{} for _ in range(rows)]
        for i, user in enumerate(pixel_values or []):
            if user is None:
                continue
            require(isinstance(user, list) and all(torch.is_tensor(p) for p in user),
                    f"pixel_values[{i}]: QV takes a list of per-image tensors per user (None for a user "
                    "without images)")
            grid = None if grids is None or i >= len(grids) else grids[i]
            require(isinstance(grid, list) and len(grid) == len(user), f"image_grid_thw[{i}]: QV expects one "
                    "grid per image when pixel_values are provided")
            assert isinstance(grid, list)
            require(all(torch.is_tensor(g) and g.ndim == 1 and g.numel() == 3 for g in grid), "QV: Expected "
                    f"per-image image_grid_thw shape (3,), got {[tuple(g.shape) for g in grid]}")
            self._images[i] = {"pixel_values": torch.cat(user), "image_grid_thw": torch.stack(grid).long()}
        require(pixel_values is None or len(pixel_values) == rows,
                f"pixel_values has {len(pixel_values or [])} users for {rows} prompts")
        logits = self.prefill_forward_text(tokens, page_table=page_table, kv_cache=kv_cache,
                                           prompt_lens=prompt_lens, empty_slots=empty_slots,
                                           enable_trace=enable_trace)
        lens = prompt_lens if prompt_lens is not None else [tokens.shape[1]] * rows
        deltas = [self.hf.rope_delta(tokens[i, :int(lens[i])].tolist(), self._images[i].get("image_grid_thw"))
                  for i in range(rows)]
        return logits, torch.tensor(deltas)[:, None]

    def prefill_extras(self, row: int) -> dict[str, Any]:
        return self._images[row]

    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        deltas = kwargs.pop("rope_deltas_all_users", None)
        require(kwargs.pop("slot_remap", None) is None, "slot_remap: this stand-in leaves QV's remap out")
        if deltas is not None:  # QV update_rope_deltas: the authoritative list, padded to the batch
            batch = self.data_parallel * self.max_batch_size
            require(len(deltas) <= batch, f"rope_deltas_all_users has {len(deltas)} entries for a batch of "
                    f"{batch}")
            self._deltas = [int(d) for d in deltas] + [0] * (batch - len(deltas))
        return super().decode_forward(*args, **kwargs)

    def decode_extras(self, row: int) -> dict[str, Any]:
        deltas = getattr(self, "_deltas", None)
        return {"rope_delta": 0 if deltas is None else deltas[row]}


class TTGemma3ForConditionalGeneration(TTLlamaForCausalLM):
    """GM tt-metal models/tt_transformers/tt/generator_vllm.py `Gemma3ForConditionalGeneration`, the
    newest found (index id 54494048887: `HybridAttentionForCausalLM(Generator), SupportsMultiModal`,
    hybrid KV groups off, so prefill_forward(*args, page_tables_per_layer=None, **kwargs) is
    `prefill_forward_text(*args, **kwargs)`; @ 0015d62b the same through prefill_forward_text /
    decode_forward_text), with G's image path in prefill_forward_text (index id 66647718705: each
    row's `pixel_values[idx]` goes to the model's prepare_inputs_prefill) and GE
    models/demos/multimodal/gemma3/tt/gemma_e2e_model.py @ 40f0594d (compute_vision_token: each
    image [n, 3, H, W]; the features replace the `image_token_index` tokens in order, masked_scatter).
    Rules 80-84. The numbers: HF's Gemma 3 on the host (host_vision.py Gemma3Reference). Left out:
    GM's device sampling (supports_sample_on_device) and per-layer page tables."""

    supports_multimodal = True  # vLLM interfaces.SupportsMultiModal
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True}
    reference = vision.Gemma3Reference

    def prefill_forward(self, *args: Any, page_tables_per_layer: Any = None, **kwargs: Any) -> torch.Tensor:
        return self.prefill_forward_text(*args, **kwargs)

    def prefill_forward_text(self, tokens: torch.Tensor, *args: Any, pixel_values: Any = None,
                             image_grid_thw: Any = None, **kwargs: Any) -> torch.Tensor:
        rows = tokens.shape[0]
        self._images: list[dict[str, Any]] = [{} for _ in range(rows)]
        require(pixel_values is None or (isinstance(pixel_values, list) and len(pixel_values) == rows),
                f"pixel_values: G takes one entry per row of tokens ({rows}), got "
                f"{type(pixel_values).__name__} of {len(pixel_values or [])}")
        starts = kwargs.get("start_pos")
        lens = kwargs.get("prompt_lens")
        for i, user in enumerate(pixel_values or []):
            if user is None:
                continue
            shaped = isinstance(user, list) and all(torch.is_tensor(p) and p.ndim == 4 and p.shape[1] == 3
                                                    for p in user)
            require(shaped,
                    f"pixel_values[{i}]: GE compute_vision_token takes a list of [n, 3, H, W] tensors a row")
            require(rows == 1, f"a prefill of {rows} rows with images: G's batched prefill hands every "
                    "row pixel_values[0]")
            require(not kwargs.get("enable_trace", True), "a traced prefill with images: G "
                    "_easy_trace_prefill drops them (it reads only global_user_id)")
            start = 0 if starts is None else int(starts[i])
            require(start == 0, f"row {i}: start_pos {start} with images: GE scatters the features from "
                    "the first image token of the chunk it is given")
            pixels = torch.cat(user)
            length = int(lens[i]) if lens is not None else tokens.shape[1]
            marked = int((tokens[i, :length] == self.hf.image_token_id).sum())
            require(marked == pixels.shape[0] * self.hf.mm_tokens_per_image,
                    f"row {i}: {marked} image tokens for {pixels.shape[0]} images of "
                    f"{self.hf.mm_tokens_per_image} (GE masked_scatter fills them in order)")
            self._images[i] = {"pixel_values": pixels}
        return super().prefill_forward_text(tokens, *args, **kwargs)

    def prefill_extras(self, row: int) -> dict[str, Any]:
        return self._images[row]


mllama = core.load_by_path(core.HERE / "mllama_generator.py", "tt_contract_llama_mllama")


class TTMllamaForConditionalGeneration(mllama.MllamaCalls, TTLlamaForCausalLM):
    """GM tt-metal's `MllamaForConditionalGeneration(Generator, SupportsMultiModal)` (mllama_generator.py:
    GM, G1, LV, CF, V0): one image itself a row in prefill_forward(tokens, images, page_table, kv_cache,
    prompt_lens, cross_page_table), its cross-attention KV through cross_page_table, four per-row mask
    lists back that decode_forward_llama_vision takes, untraced, read with read_decode_output. Rules
    90-99. The numbers: HF's Mllama on the host (host_vision.py MllamaReference)."""

    reference = vision.MllamaReference


VARIANTS: dict[str, type] = {"current": TTLlamaForCausalLM, "chunked": TTLlamaChunkedForCausalLM,
                             "aligned": TTLlamaAlignedForCausalLM, "older": TTLlamaOlderForCausalLM,
                             "sampling": TTLlamaSamplingForCausalLM,
                             "qwen25_vl": TTQwen2_5_VLForConditionalGeneration,
                             "gemma3_vision": TTGemma3ForConditionalGeneration,
                             "mllama": TTMllamaForConditionalGeneration}
"""The bundles under variants/<name>/llama/ pick their class here by <name>."""
