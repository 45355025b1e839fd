"""What we call on a tt-metal generator, as Protocols: `TTGenerator`, the step calls the generator
runner makes (runtime/generator_runner.py), and `LoadableTTGenerator`, a TTGenerator with the
class method and the cache allocation the TT load path calls.

The signatures are tt-metal's, as far as we use them (tenstorrent/tt-metal,
models/tt_transformers/tt/generator.py: `Generator.prefill_forward_text`, `decode_forward_text`,
`read_decode_output`, `process_decode_output_host`; models/tt_transformers/tt/generator_vllm.py:
`LlamaForCausalLM.initialize_vllm_model`, `allocate_kv_cache` → `allocate_vllm_kv_cache`, and
`prefill_forward` / `decode_forward`, which forward `*args, **kwargs` to the `*_text` methods).
Where generator versions differ, the protocol takes what the runner passes and no more:
- `start_pos`, `empty_slots` and `enable_trace` of `prefill_forward` are keyword-only with
  defaults: older generators lack them, and the runner passes each only where the class takes it
  (`models/tt_capabilities.py`: declared capabilities first, signatures as the fallback);
- `tt_data_parallel` of `initialize_vllm_model` is passed only for more than one lane;
- `process_decode_output_host` returns (logits, log-probs); older versions logits alone, and
  their `read_decode_output(tt_out, unpadded_batch, is_tokens)` runs inside
  `decode_forward(read_from_device=True)`.

The warmup hooks are not members: `warmup_model_prefill` and `warmup_model_decode` exist in some
versions only, with different parameters, and the runner calls each where the generator has it,
with the arguments its signature names (runtime/generator_warmup.py). Nothing here imports ttnn
or tt-metal: device tensors, events and the mesh are `Any`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: the doctor reads call forms without loading torch
    import torch


@dataclass(frozen=True)
class TTSamplingParams:
    """Device sampling's inputs in tt-metal's form (models/common/sampling/generator.py
    `SamplingParams`, which the generator reads by attribute: "vLLM has its own duck-type-compatible
    TTSamplingParams"): one entry per batch row. tt-metal's sampler treats temperature 0 as greedy
    (top-1), caps top_k at 32, and seeds each slot's generator at prefill; penalties and log-probs
    stay on the host here (their defaults: off)."""

    temperature: list[float]
    top_k: list[int]
    top_p: list[float]
    seed: list[int] | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    enable_log_probs: bool = False


@dataclass(frozen=True)
class TTCallForms:
    """How a generator class is called (models/tt_capabilities.py reads them from the class)."""

    takes_start_pos: bool
    takes_empty_slots: bool
    takes_prefill_trace: bool
    """prefill_forward takes `enable_trace` (tt-metal's defaults to True: it must be passed)."""
    resume_alignment: int
    """A resumed prefill's start_pos is floored to a multiple of this (the block size, or its lcm
    with the declared resumed_prefill_token_alignment) before it is sent."""
    async_read: bool
    """read_decode_output(tt_out, async_read=...) (current); else the older form, where
    decode_forward(read_from_device=True) returns host outputs itself."""
    warms_up_prefill: bool
    warms_up_decode: bool
    """The generator has warmup_model_prefill / warmup_model_decode, where its traces are captured
    before serving (without the hook a traced step would capture while serving: it runs eager)."""
    takes_images: bool = False
    """A multimodal generator (vLLM's SupportsMultiModal marker, `supports_multimodal`): a prefill row's
    images go to prefill_forward as the Tenstorrent plugin sends them, per-row lists of per-image
    `pixel_values` (and `image_grid_thw`, each of shape (3,)), None for a row without images."""
    rope_deltas: bool = False
    """An M-RoPE model (Qwen2.5-VL): prefill_forward returns (logits, rope_deltas) and decode_forward
    takes each batch row's delta as `rope_deltas_all_users` (the plugin's mrope_position_delta)."""
    cross_attention: bool = False
    """Llama 3.2 Vision (tt-metal's MllamaForConditionalGeneration, runtime/generator_cross.py):
    prefill_forward(tokens, images, page_table, kv_cache, prompt_lens, cross_page_table) with one
    image itself (PIL) or None a row, returning logits and four per-row mask lists, which
    decode_forward takes back by keyword with the cross_page_table; no warmup hooks it can run."""


class TTGenerator(Protocol):
    """A tt-metal generator as the runner drives it: a lane per data-parallel submesh, `kv_cache`
    the list of per-submesh regions `allocate_kv_cache` returned, batch rows lane by lane."""

    def prefill_forward(self, tokens: torch.Tensor, /, *, page_table: torch.Tensor, kv_cache: list[Any],
                        prompt_lens: list[int], start_pos: list[int] | None = None,
                        empty_slots: list[int] | None = None, enable_trace: bool = True,
                        sampling_params: TTSamplingParams | None = None) -> Any:
        """Prefill every row of `tokens` [B, S] (each row's whole sequence, cached prefix included,
        padded) and return the logits of each row's last token, [B, 1, vocab], on the host (with
        `sampling_params`: each row's sampled token instead). Row i computes
        tokens[i, start_pos[i]:prompt_lens[i]] over the cached K/V before start_pos[i] and goes to
        the submesh of batch slot empty_slots[i]; with enable_trace its padded length's captured
        trace replays."""

    def decode_forward(self, *, tokens: torch.Tensor, start_pos: torch.Tensor, page_table: torch.Tensor,
                       kv_cache: list[Any], enable_trace: bool, read_from_device: bool,
                       sampling_params: TTSamplingParams | None = None) -> Any:
        """One decode step of tokens [B, 1] at start_pos [B] (-1: a padding row), the batch split
        into one equal chunk per submesh; with `enable_trace` a captured ttnn trace replays; with
        `sampling_params` the step samples on the device and outputs tokens. With
        read_from_device=False: the per-submesh device outputs, for `read_decode_output`. Every
        argument by keyword, as the plugin passes them (Mllama's decode_forward_llama_vision takes
        start_pos before tokens)."""

    def read_decode_output(self, tt_out: Any, /, *, async_read: bool) -> Any:
        """Copy decode's device outputs to the host; with async_read: (host outputs, one event per
        submesh to wait on with ttnn.event_synchronize before reading them)."""

    def process_decode_output_host(self, tt_out: Any, /, *, is_tokens: bool) -> Any:
        """The host outputs as torch: (logits [B, 1, vocab], log-probs) with is_tokens=False; the
        sampled tokens (one per row; with log-probs, a tuple) with is_tokens=True."""


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
        `kv_cache_shape` (blocks, kv_heads per chip, block_size, head_dim), replicated to every chip
        of the submesh; the caller owns it from here."""
