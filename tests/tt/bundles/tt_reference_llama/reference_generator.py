"""A reference tt-metal generator for the tests: the methods and return contracts of tt-metal's
`models.tt_transformers.tt.generator_vllm.LlamaForCausalLM` (initialize_vllm_model,
allocate_kv_cache, prefill_forward, decode_forward, read_decode_output,
process_decode_output_host), over real ttnn objects: the mesh and its submeshes, the paged KV
cache in tt-metal's layout, page tables as ttnn tensors, and on every step the paged ops at the
step's shapes (paged_fill_cache, paged_update_cache, paged decode SDPA) with the async output read
and its event.

The numbers come from our torch Llama on the host, over a host copy of each submesh's paged
cache addressed by the same page tables: a mock device's read-backs are all zeros, so every token
a test compares is this host compute's, not the device's.

Data parallel as tt-metal's Generator does it: `kv_cache` is the list of per-submesh regions;
decode splits its batch into `data_parallel` equal chunks (one per submesh, torch.chunk), and a
prefill row goes to submesh `empty_slots[i] // max_batch_size` (the per-submesh batch).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
import ttnn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.tt.kv_layout import TTKVGeometry, allocate_layer_caches
from tt_backend.mesh_options import submesh_shape
from tt_backend.models.loader import load_model


def _load_paged_ops() -> Any:
    """tests/tt/paged_ops.py, by its path: the registry loads this bundle from its file, with no
    package around it."""
    path = Path(__file__).resolve().parents[2] / "paged_ops.py"
    spec = importlib.util.spec_from_file_location("tt_reference_paged_ops", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ops = _load_paged_ops()
decode_step, fill_row, to_device = _ops.decode_step, _ops.fill_row, _ops.to_device


def create_submeshes(mesh_device: Any, data_parallel: int) -> list[Any]:
    """Split the mesh into `data_parallel` equal submeshes (the mesh itself for one)."""
    if data_parallel == 1:
        return [mesh_device]
    rows, cols = submesh_shape((mesh_device.shape[0], mesh_device.shape[1]), data_parallel)
    return list(mesh_device.create_submeshes(ttnn.MeshShape(rows, cols)))


class TTLlamaForCausalLM:
    model_capabilities = {"supports_prefix_caching": True}

    def __init__(self, host_model: torch.nn.Module, submeshes: list[Any], mesh_device: Any,
                 max_batch_size: int, max_seq_len: int) -> None:
        self.host_model = host_model
        self.spec = host_model.spec
        self.num_heads: int = host_model.config.num_heads
        self.submeshes = submeshes
        self.mesh_device = mesh_device
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len
        self.host_caches: list[torch.Tensor] = []
        """Per submesh, the host copy the numbers come from: [layers, 2, blocks, block_size,
        kv_heads, head_dim]."""
        self._pending: dict[int, torch.Tensor] = {}  # id(device output) -> its host-computed logits
        self.rows_per_submesh = [0] * len(submeshes)
        """Live rows each submesh computed, prefill and decode (what the tests read)."""
        self.warmups: list[list[Any]] = []
        """Each warmup hook called: [name, its arguments but the cache]."""

    @property
    def data_parallel(self) -> int:
        return len(self.submeshes)

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              n_layers: int | None = None, tt_data_parallel: int = 1,
                              optimizations: str = "performance") -> TTLlamaForCausalLM:
        submeshes = create_submeshes(mesh_device, tt_data_parallel)
        plan = ComputePlan.resolve(torch.device("cpu"), "float32", "auto", "torch")
        loaded = load_model(Path(hf_config._name_or_path), plan)
        return cls(loaded.module, submeshes, mesh_device, max_batch_size // tt_data_parallel, max_seq_len)

    def allocate_kv_cache(self, kv_cache_shape: tuple[int, int, int, int], dtype: torch.dtype,
                          num_layers: int) -> list[list[list[Any]]]:
        """Per submesh, per layer, [K, V] of `kv_cache_shape` in TILE layout, bfloat8_b, in DRAM."""
        blocks, heads, block_size, head_dim = kv_cache_shape
        geometry = TTKVGeometry(num_layers, blocks, heads, block_size, head_dim)
        caches = [allocate_layer_caches(ttnn, submesh, geometry) for submesh in self.submeshes]
        self.host_caches = [torch.zeros((num_layers, 2, blocks, block_size, heads, head_dim))
                            for _ in self.submeshes]
        return caches

    # ---- host compute ------------------------------------------------------------------------
    def _host_logits(self, model_id: int, tokens: torch.Tensor, starts: list[int], lengths: list[int],
                     page_table: torch.Tensor, decode: bool) -> torch.Tensor:
        """Logits [rows, vocab] of each row's last token, one row at a time (so which rows share a
        step never changes a row's arithmetic), over submesh `model_id`'s cache."""
        self.rows_per_submesh[model_id] += len(lengths)
        return torch.cat([self._row_logits(model_id, tokens[i, :lengths[i]], starts[i], page_table[i], decode)
                          for i in range(len(lengths))])

    def _row_logits(self, model_id: int, tokens: torch.Tensor, start: int, table: torch.Tensor,
                    decode: bool) -> torch.Tensor:
        assert self.host_caches, "allocate_kv_cache first"
        cache = self.host_caches[model_id]
        block, length = cache.shape[3], tokens.shape[0]
        positions = start + torch.arange(length)
        slots = table.long()[positions // block] * block + positions % block
        batch = ForwardBatch(tokens.long()[None], positions[None], slots[None], table.long()[None],
                             torch.tensor([start + length]), torch.tensor([length - 1]), decode)
        with torch.inference_mode():
            logits: torch.Tensor = self.host_model(batch, cache)
        return logits

    # ---- the generator API -------------------------------------------------------------------
    def prefill_forward(self, tokens: torch.Tensor, page_table: torch.Tensor, kv_cache: list[list[list[Any]]],
                        prompt_lens: list[int], start_pos: list[int] | None = None,
                        empty_slots: list[int] | None = None) -> torch.Tensor:
        """Logits [B, 1, vocab] of each row's last prompt token, on the host. Row i's tokens start
        at start_pos[i] (a cached prefix before it, a whole number of blocks) and go to the submesh
        of its slot, empty_slots[i] (default: row i's)."""
        starts = list(start_pos or [0] * len(prompt_lens))
        slots = list(empty_slots if empty_slots is not None else range(len(prompt_lens)))
        block = self.host_caches[0].shape[3]
        out = torch.zeros(len(prompt_lens), 1, self.spec.vocab_size)
        for i, (start, length, slot) in enumerate(zip(starts, prompt_lens, slots, strict=True)):
            assert start % block == 0, "a cached prefix covers whole blocks"
            model_id = slot // self.max_batch_size
            fill_row(ttnn, self.submeshes[model_id], kv_cache[model_id], page_table[i:i + 1, start // block:],
                     length, self.spec.num_kv_heads, self.spec.head_dim)
            out[i, 0] = self._host_logits(model_id, tokens[i:i + 1], [start], [length], page_table[i:i + 1],
                                          False)[0]
        return out

    def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor, page_table: torch.Tensor,
                       kv_cache: list[list[list[Any]]], enable_trace: bool = True,
                       read_from_device: bool = True, sampling_params: Any = None) -> Any:
        """One decode step for every row (start_pos -1: a padding row), the batch split into one
        equal chunk per submesh. enable_trace is accepted and not used: the device work here is not
        captured (on a mock device, a trace with ops crashes). With read_from_device=False, the
        per-submesh device outputs to read with read_decode_output."""
        assert sampling_params is None, "this reference samples on the host"
        assert tokens.shape[0] == self.data_parallel * self.max_batch_size, "decode runs at the full batch"
        outputs = []
        chunks = zip(torch.chunk(tokens, self.data_parallel), torch.chunk(start_pos, self.data_parallel),
                     torch.chunk(page_table, self.data_parallel), strict=True)
        for model_id, (tokens_i, pos_i, table_i) in enumerate(chunks):
            device = self.submeshes[model_id]
            decode_step(ttnn, device, kv_cache[model_id], table_i, pos_i, self.num_heads,
                        self.spec.num_kv_heads, self.spec.head_dim)
            live = [i for i in range(tokens_i.shape[0]) if int(pos_i[i]) >= 0]
            logits = torch.zeros(tokens_i.shape[0], self.spec.vocab_size)
            if live:
                index = torch.tensor(live)
                logits[index] = self._host_logits(model_id, tokens_i[index], pos_i[index].tolist(),
                                                  [1] * len(live), table_i[index], True)
            # logits as tt-metal's decode returns them: [1, 1, B, vocab] on the submesh
            out = to_device(ttnn, device, logits[None, None], ttnn.bfloat16, ttnn.TILE_LAYOUT)
            self._pending[id(out)] = logits
            outputs.append(out)
        if read_from_device:
            return self.process_decode_output_host(self.read_decode_output(outputs, async_read=False))
        return outputs

    # ---- warmup (tt-metal's hooks: compile, and with enable_trace capture, before serving) --------
    def warmup_model_prefill(self, kv_cache: list[list[list[Any]]], enable_trace: bool,
                             can_sample_on_device: bool, non_greedy_decoding_on_device: bool) -> None:
        """The prefill ops at one tile on every submesh (block 0: nothing is cached yet)."""
        self.warmups.append(["warmup_model_prefill", {
            "enable_trace": enable_trace, "can_sample_on_device": can_sample_on_device,
            "non_greedy_decoding_on_device": non_greedy_decoding_on_device}])
        for submesh, cache in zip(self.submeshes, kv_cache, strict=True):
            fill_row(ttnn, submesh, cache, torch.zeros((1, 1), dtype=torch.int32), 32, self.spec.num_kv_heads,
                     self.spec.head_dim)

    def warmup_model_decode(self, kv_cache: list[list[list[Any]]], enable_trace: bool, max_batch_size: int,
                            num_blocks: int, can_sample_on_device: bool,
                            non_greedy_decoding_on_device: bool) -> None:
        """The decode ops at the full batch and page-table width on every submesh (no trace is
        captured: on a mock device a capture with ops crashes)."""
        self.warmups.append(["warmup_model_decode", {
            "enable_trace": enable_trace, "max_batch_size": max_batch_size, "num_blocks": num_blocks,
            "can_sample_on_device": can_sample_on_device,
            "non_greedy_decoding_on_device": non_greedy_decoding_on_device}])
        rows = max_batch_size // self.data_parallel
        for submesh, cache in zip(self.submeshes, kv_cache, strict=True):
            decode_step(ttnn, submesh, cache, torch.zeros((rows, num_blocks), dtype=torch.int32),
                        torch.zeros(rows, dtype=torch.int64), self.num_heads, self.spec.num_kv_heads,
                        self.spec.head_dim)

    def read_decode_output(self, tt_out: list[Any], async_read: bool = False) -> Any:
        """Each submesh's device output copied to the host; async: (host tensors, one event per
        submesh to wait on)."""
        hosts = []
        for out in tt_out:
            host = out.cpu(blocking=not async_read)
            self._pending[id(host)] = self._pending.pop(id(out))
            hosts.append(host)
        if not async_read:
            return hosts
        return hosts, [ttnn.record_event(submesh, 0) for submesh in self.submeshes]

    def process_decode_output_host(self, tt_out: list[Any], is_tokens: bool = False) -> torch.Tensor:
        """Logits [B, 1, vocab] on the host, the submeshes' rows in order (the host compute's: the
        mock device reads zeros)."""
        assert not is_tokens
        return torch.cat([self._pending.pop(id(host)) for host in tt_out])[:, None, :]
