"""A reference tt-metal generator for the tests: the methods and return contracts of tt-metal's
`models.tt_transformers.tt.generator_vllm.LlamaForCausalLM` (initialize_vllm_model,
allocate_kv_cache, prefill_forward, decode_forward, read_decode_output,
process_decode_output_host), over real ttnn objects: the mesh and its submeshes, the paged KV
cache in tt-metal's layout, page tables as ttnn tensors, and on every step the paged ops at the
step's shapes (paged_fill_cache, paged_update_cache, paged decode SDPA) with the async output read
and its event.

The numbers come from our torch Llama on the host, over a host copy of the paged cache addressed
by the same page tables: a mock device's read-backs are all zeros, so every token a test compares
is this host compute's, not the device's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import ttnn

from tt_backend.contract.forward_batch import ForwardBatch
from tt_backend.devices.compute_plan import ComputePlan
from tt_backend.devices.tt_kv_layout import TTKVGeometry, allocate_layer_caches
from tt_backend.devices.tt_paged_ops import decode_step, fill_row, to_device
from tt_backend.mesh_options import submesh_shape
from tt_backend.models.loader import load_model


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
        self.host_cache: torch.Tensor | None = None
        self._pending: dict[int, torch.Tensor] = {}  # id(device output) -> its host-computed logits

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
        # the host copy the numbers come from: [layers, 2, blocks, block_size, kv_heads, head_dim]
        self.host_cache = torch.zeros((num_layers, 2, blocks, block_size, heads, head_dim))
        return caches

    # ---- host compute ------------------------------------------------------------------------
    def _host_logits(self, tokens: torch.Tensor, starts: list[int], lengths: list[int],
                     page_table: torch.Tensor, decode: bool) -> torch.Tensor:
        """Logits [rows, vocab] of each row's last token, one row at a time (so which rows share a
        step never changes a row's arithmetic)."""
        return torch.cat([self._row_logits(tokens[i, :lengths[i]], starts[i], page_table[i], decode)
                          for i in range(len(lengths))])

    def _row_logits(self, tokens: torch.Tensor, start: int, table: torch.Tensor,
                    decode: bool) -> torch.Tensor:
        assert self.host_cache is not None, "allocate_kv_cache first"
        block, length = self.host_cache.shape[3], tokens.shape[0]
        positions = start + torch.arange(length)
        slots = table.long()[positions // block] * block + positions % block
        batch = ForwardBatch(tokens.long()[None], positions[None], slots[None], table.long()[None],
                             torch.tensor([start + length]), torch.tensor([length - 1]), decode)
        with torch.inference_mode():
            logits: torch.Tensor = self.host_model(batch, self.host_cache)
        return logits

    # ---- the generator API -------------------------------------------------------------------
    def prefill_forward(self, tokens: torch.Tensor, page_table: torch.Tensor, kv_cache: list[list[Any]],
                        prompt_lens: list[int], start_pos: list[int] | None = None) -> torch.Tensor:
        """Logits [B, 1, vocab] of each row's last prompt token, on the host. Row i's tokens start
        at start_pos[i] (a cached prefix before it, a whole number of blocks)."""
        starts = list(start_pos or [0] * len(prompt_lens))
        device = self.submeshes[0]
        block = self.host_cache.shape[3] if self.host_cache is not None else 1
        for i, (start, length) in enumerate(zip(starts, prompt_lens, strict=True)):
            assert start % block == 0, "a cached prefix covers whole blocks"
            fill_row(ttnn, device, kv_cache, page_table[i:i + 1, start // block:], length,
                     self.spec.num_kv_heads, self.spec.head_dim)
        return self._host_logits(tokens, starts, list(prompt_lens), page_table, False)[:, None, :]

    def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor, page_table: torch.Tensor,
                       kv_cache: list[list[Any]], enable_trace: bool = True, read_from_device: bool = True,
                       sampling_params: Any = None) -> Any:
        """One decode step for every row (start_pos -1: a padding row). enable_trace is accepted
        and not used: the device work here is not captured (on a mock device, a trace with ops
        crashes). With read_from_device=False, the device output to read with read_decode_output."""
        assert sampling_params is None, "this reference samples on the host"
        device = self.submeshes[0]
        decode_step(ttnn, device, kv_cache, page_table, start_pos, self.num_heads, self.spec.num_kv_heads,
                    self.spec.head_dim)
        live = [i for i in range(tokens.shape[0]) if int(start_pos[i]) >= 0]
        logits = torch.zeros(tokens.shape[0], self.spec.vocab_size)
        if live:
            index = torch.tensor(live)
            logits[index] = self._host_logits(tokens[index], start_pos[index].tolist(), [1] * len(live),
                                              page_table[index], True)
        # logits as tt-metal's decode returns them: [1, 1, B, vocab] on the device
        out = to_device(ttnn, device, logits[None, None], ttnn.bfloat16, ttnn.TILE_LAYOUT)
        self._pending[id(out)] = logits
        if read_from_device:
            return self.process_decode_output_host(self.read_decode_output(out, async_read=False))
        return out

    def read_decode_output(self, tt_out: Any, async_read: bool = False) -> Any:
        """The device output copied to the host; async: (host tensors, events to wait on)."""
        host = tt_out.cpu(blocking=not async_read)
        self._pending[id(host)] = self._pending.pop(id(tt_out))
        if not async_read:
            return host
        return [host], [ttnn.record_event(self.submeshes[0], 0)]

    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = False) -> torch.Tensor:
        """Logits [B, 1, vocab] on the host (the host compute's: the mock device reads zeros)."""
        assert not is_tokens
        host = tt_out[0] if isinstance(tt_out, list) else tt_out
        return self._pending.pop(id(host))[:, None, :]
