"""What we call on a tt-metal generator, as Protocols: `TTGenerator`, the step calls the generator
runner makes (runtime/generator_runner.py), and `LoadableTTGenerator`, a TTGenerator with the
class method and the cache allocation the TT load path calls.

The signatures are tt-metal's, as far as we use them (tenstorrent/tt-metal,
models/tt_transformers/tt/generator.py: `Generator.prefill_forward_text`, `decode_forward_text`,
`read_decode_output`, `process_decode_output_host`; models/tt_transformers/tt/generator_vllm.py:
`LlamaForCausalLM.initialize_vllm_model`, `allocate_kv_cache` → `allocate_vllm_kv_cache`, and
`prefill_forward` / `decode_forward`, which forward `*args, **kwargs` to the `*_text` methods).
Where generator versions differ, the protocol takes what the runner passes and no more:
- `start_pos` and `empty_slots` of `prefill_forward` are keyword-only with defaults: older
  generators lack them, and the runner passes each only where the class's signature names it
  (`models/tt_capabilities.py`: `takes_start_pos`, `takes_empty_slots`);
- `tt_data_parallel` of `initialize_vllm_model` is passed only for more than one lane;
- `process_decode_output_host` returns logits, or (logits, log-probs) in newer versions.

The warmup hooks are not members: `warmup_model_prefill` and `warmup_model_decode` exist in some
versions only, with different parameters, and the runner calls each where the generator has it,
with the arguments its signature names. Nothing here imports ttnn or tt-metal: device tensors,
events and the mesh are `Any`.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch


class TTGenerator(Protocol):
    """A tt-metal generator as the runner drives it: a lane per data-parallel submesh, `kv_cache`
    the list of per-submesh regions `allocate_kv_cache` returned, batch rows lane by lane."""

    def prefill_forward(self, tokens: torch.Tensor, /, *, page_table: torch.Tensor, kv_cache: list[Any],
                        prompt_lens: list[int], start_pos: list[int] | None = None,
                        empty_slots: list[int] | None = None) -> torch.Tensor:
        """Prefill every row of `tokens` [B, S] (padded) and return the logits of each row's last
        prompt token, [B, 1, vocab], on the host. Row i starts at start_pos[i] (a cached prefix of
        whole blocks) and goes to the submesh of batch slot empty_slots[i]."""

    def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor, /, *, page_table: torch.Tensor,
                       kv_cache: list[Any], enable_trace: bool, read_from_device: bool) -> Any:
        """One decode step of tokens [B, 1] at start_pos [B] (-1: a padding row), the batch split
        into one equal chunk per submesh; with `enable_trace` a captured ttnn trace replays. With
        read_from_device=False: the per-submesh device outputs, for `read_decode_output`."""

    def read_decode_output(self, tt_out: Any, /, *, async_read: bool) -> Any:
        """Copy decode's device outputs to the host; with async_read: (host outputs, one event per
        submesh to wait on with ttnn.event_synchronize before reading them)."""

    def process_decode_output_host(self, tt_out: Any, /, *, is_tokens: bool) -> Any:
        """The host outputs as torch: logits [B, 1, vocab] (is_tokens=False), or (logits, log-probs)."""


class LoadableTTGenerator(TTGenerator, Protocol):
    """A generator class the TT load path builds on an open mesh, and whose cache it allocates."""

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              /, *, tt_data_parallel: int = 1) -> LoadableTTGenerator:
        """Load the model onto `mesh_device` (transformers' config, `_name_or_path` the checkpoint
        folder), split into `tt_data_parallel` submeshes of max_batch_size / tt_data_parallel rows
        each."""

    def allocate_kv_cache(self, kv_cache_shape: tuple[int, int, int, int], dtype: torch.dtype,
                          num_layers: int, /) -> list[Any]:
        """The paged KV cache, one region per submesh, each a [K, V] pair per layer of
        `kv_cache_shape` (blocks, kv_heads, block_size, head_dim); the caller owns it from here."""
