"""EngineConfig: every engine option, its default, and config-time validation.

`config.pbtxt` parameters map one-to-one to these fields (`from_parameters`). Options that depend on
the model (`max_model_len`, the KV cache size) are resolved once it is known (`resolve_for_model`).
A few default to an environment variable (named in their docstring); an explicit value wins.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tt_backend.config.values import (
    REJECTED_OPTIONS,
    TT_BLOCK_MULTIPLE,
    batched_prefill_disabled_by_env,
    builtin_models_from_env,
    check_choice,
    check_tt_block_size,
    check_unchunked_budget,
    extra_models_dir_from_env,
    parse_value,
)
from tt_backend.contract.limits import RequestLimits
from tt_backend.contract.modes import Named, SampleOnDeviceMode, TraceMode
from tt_backend.mesh_options import DispatchCoreAxisName, FabricName, MeshOptions, parse_mesh_device

Dtype = Literal["auto", "bfloat16", "float32", "float16"]
DeviceName = Literal["auto", "cpu", "cuda", "tt"]
CpuKernelsName = Literal["auto", "native", "torch"]
CpuIsaName = Literal["auto", "portable", "avx2", "avx512", "avx512_bf16", "amx", "neon"]
WeightDtypeName = Literal["auto", "quantized", "bfloat16", "float32", "q8_0", "q4_0"]
QuantActivationsName = Literal["float32", "int8"]

# Option names accepted besides the field's own (after the `tt.` prefix is removed).
_ALIASES = {"MESH_DEVICE": "mesh_device"}
# The Tenstorrent mesh options: they apply to device=tt (and auto when it picks a Tenstorrent mesh).
TT_OPTIONS = ("mesh_device", "fabric_config", "trace_region_size", "l1_small_size", "worker_l1_size",
              "dispatch_core_axis", "num_command_queues")
@dataclass(frozen=True)
class EngineConfig:
    """Every option of the engine. Construct directly or with `from_parameters`."""

    model: str = ""
    """HF-format directory, GGUF file or an HF id in the local HF cache; empty: SmolLM2-135M-Instruct."""
    served_model_name: str = ""
    """The name clients send and metrics carry; empty: the model's (models/checkpoint.py)."""
    dtype: Dtype = "auto"
    """auto: bfloat16 on CUDA and on CPUs with AVX-512; below AVX-512, float32 activations with
    bfloat16 linear weights (see devices/cpu/compute_plan.py)."""
    weight_dtype: WeightDtypeName = "auto"
    """CPU linears: quantized (auto: unless bf16 runs on oneDNN) keep a GGUF's blocks; q8_0/q4_0 quantize."""
    quant_activations: QuantActivationsName = "float32"
    """Inputs of linears on blocks: float32 (exact fp32 sums) or int8 (llama.cpp's, per 32: integer dots)."""
    device: DeviceName = "auto"
    """cpu, cuda, tt (a Tenstorrent mesh through ttnn), or auto: tt when ttnn imports and reports
    a device, else cuda when torch sees one, else cpu."""
    mesh_device: str = ""
    """Tenstorrent mesh: a name (mesh_options.MESH_SHAPES), ROWSxCOLS (1x8) or (ROWS,COLS) ((4,8));
    empty: the env MESH_DEVICE, else every chip as one row. Also accepted as MESH_DEVICE."""
    fabric_config: FabricName = "auto"
    """Set before the mesh opens, reset to DISABLED after it closes; auto: mesh_options.auto_fabric
    (the plugin's choice by cluster: 1D, a Galaxy's ring or 2D torus, DISABLED on one chip)."""
    trace_region_size: int = 50_000_000
    """Bytes of DRAM reserved for captured traces (per chip)."""
    l1_small_size: int | None = None
    """Bytes of the small L1 region (None: ttnn's default)."""
    worker_l1_size: int | None = None
    """Bytes of worker L1 (None: ttnn's default)."""
    dispatch_core_axis: DispatchCoreAxisName = "auto"
    """row or col; auto: ttnn's default for the architecture."""
    num_command_queues: int = 1
    max_model_len: int | None = None
    """Defaults to the model's maximum positions."""
    max_num_seqs: int = 32
    """Running requests per lane (the engine runs data_parallel_size x max_num_seqs)."""
    max_num_batched_tokens: int = 2048
    max_prefill_tokens: int | None = None
    """SGLang's option: a waiting prompt joins a prefill step that has rows only while the step stays
    within this many tokens (at most max_num_batched_tokens). Unset (`auto`): the device's
    (`TorchDevice.max_prefill_tokens`: 256 on the CPU, max_num_batched_tokens elsewhere)."""
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    """These two, unset: on when the model declares support; true on a model without it fails."""
    decode_steps_between_prefills: int = 1
    """Decode steps after a prefill step that leaves a prompt partly prefilled (between the chunks
    of a long prompt), while requests decode (0: prefill until done)."""
    block_size: int = 0
    """Tokens per KV block; 0 (the default): 32 on a Tenstorrent device (tt-metal lays the cache out
    in 32x32 tiles), 16 elsewhere."""
    auto_block_size: bool = field(default=False, repr=False, metadata={"internal": True})
    """block_size was left to its default (device=auto resolves it once the device is known)."""
    num_kv_blocks: int | None = None
    """Physical KV blocks per lane; when unset, derived from `kv_cache_memory_bytes`."""
    kv_cache_memory_bytes: int | None = None
    """The KV cache's memory, shared by all lanes (on a Tenstorrent device: each chip's); unset (or
    `auto`): sized after the model loads, `kv_cache_memory_fraction` of the memory left free by the
    weights and the step's measured peak, at most what max_num_seqs sequences of max_model_len per
    lane can use (assembly/kv_sizing.py; on tt, what the generator says a lane holds)."""
    kv_cache_memory_fraction: float = 0.5
    """With kv_cache_memory_bytes=auto: the share of the free memory the KV cache takes (on the CPU
    the rest stays for the tokenizer models, the front and the system; vLLM's CPU backend reserves
    a fixed 4 GiB instead)."""
    data_parallel_size: int = 1
    """Lanes: independent schedulers and KV caches whose steps run as one batch."""
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_waiting_requests: int = 4096
    """Requests beyond max_num_seqs wait; past this many waiting, new requests are refused."""
    seed: int = 0
    """Seed of the engine's generator for requests that bring none."""
    max_logit_bias: int = RequestLimits.max_logit_bias
    """The most entries one request's logit_bias may hold (the request limits below each cost
    engine-thread time every step of the request, so each is bounded)."""
    max_allowed_token_ids: int = RequestLimits.max_allowed_token_ids
    max_stop: int = RequestLimits.max_stop
    max_stop_token_ids: int = RequestLimits.max_stop_token_ids
    max_bad_words: int = RequestLimits.max_bad_words
    max_logits_processors: int = RequestLimits.max_logits_processors
    max_word_chars: int = RequestLimits.max_word_chars
    """The longest stop string or bad word, in characters."""
    step_timeout_s: int = 600
    """The step watchdog: a model step running longer than this (a hung device) fails the engine,
    every request in flight ends with an error naming the step, and the model instance exits for
    a fresh one (0: no watchdog)."""
    grammar_compile_timeout_s: int = 10
    """A request with structured outputs whose grammar has not compiled this many seconds after its
    admission ends with an error naming this option; a compile running longer is abandoned to its
    thread (llguidance cannot stop one) and a fresh worker compiles the rest."""
    grammar_cache_bytes: int = 64 << 20
    """The compiled-grammar cache's bound, by each entry's estimated size (least recently used
    evicted first; 0: no cache)."""
    max_parked_requests: int = 64
    """Requests with structured outputs waiting for their grammar to compile; past this many, new
    ones are refused with "retry later"."""
    fault_injection: str = ""
    """For reliability tests only (refused unless the env TT_BACKEND_ALLOW_FAULT_INJECTION=1):
    `<raise|hang>:<prefill|decode>:<token id>` makes the steps of that mode holding a prompt that
    starts with that token raise or hang (tt_backend/engine/faults.py)."""
    trace_mode: TraceMode = TraceMode.AUTO
    """Captured, replayed steps: none (all eager), decode_only, all (prefill shapes too), or auto:
    all on the CPU (one TorchScript graph serves every shape of a step), decode_only elsewhere (a
    CUDA graph or ttnn trace per shape)."""
    async_scheduling: bool = False
    """Overlap host work with the device: schedule decode step N+1 before step N's tokens are read."""
    sample_on_device_mode: SampleOnDeviceMode = SampleOnDeviceMode.ALL
    """Operations whose step chooses tokens itself when the batch allows (all, decode_only, none);
    a batch that needs logits on the host (logprobs, penalties, masks...) takes the host path."""
    always_compat_sampling: bool = False
    """Force the host path for every batch (debugging, A/B checks)."""
    cpu_kernels: CpuKernelsName = "auto"
    """On the CPU: native (C++ kernels built with the system compiler on first use: paged decode
    attention, fused RMSNorm/residual, SiLU x up, RoPE + KV write), torch (torch ops only: the
    blocks gathered for SDPA), or auto (native when they build, else torch)."""
    cpu_isa: CpuIsaName = "auto"
    """The highest instruction-set level the CPU path uses (x86-64: portable < avx2 < avx512 <
    avx512_bf16 < amx; aarch64: portable < neon); auto: the best this CPU has. A level above the
    CPU's fails the load."""
    logits_processor_modules: str = ""
    """Comma-separated Python modules imported at start; they register custom logits processors."""
    disable_batched_prefill: bool = field(default_factory=batched_prefill_disabled_by_env)
    """Prefill every prompt in its own wave, never batched with others. Default from the env
    DISABLE_BATCHED_PREFILL: set and neither empty nor "0" disables."""
    builtin_models: bool = field(default_factory=builtin_models_from_env)
    """Register the builtin implementations (false: only the bundles of extra_models_dir). Default
    from the env TT_VLLM_BUILTIN_MODELS: "0" turns them off, any other value or unset keeps them."""
    extra_models_dir: str = field(default_factory=extra_models_dir_from_env)
    """A folder of model bundles (one folder each, with vllm_metadata.json) registered next to the
    builtins; empty: none. Default from the env EXTRA_MODELS_DIR."""
    enable_lora: bool = False
    speculative_config: str = ""
    num_speculative_tokens: int = 0

    def __post_init__(self) -> None:
        if self.block_size == 0:
            object.__setattr__(self, "block_size", TT_BLOCK_MULTIPLE if self.device == "tt" else 16)
            object.__setattr__(self, "auto_block_size", True)
        for name in ("tensor_parallel_size", "pipeline_parallel_size"):
            if getattr(self, name) != 1:
                raise ValueError(f"{name}={getattr(self, name)} is not supported: "
                                 f"{REJECTED_OPTIONS[name]}")
        hints = typing.get_type_hints(type(self))
        for option in dataclasses.fields(self):  # a plain string names its member; a Literal lists its values
            kind = hints[option.name]
            if isinstance(kind, type) and issubclass(kind, Named):
                object.__setattr__(self, option.name, kind.parse(option.name, getattr(self, option.name)))
            elif typing.get_origin(kind) is Literal:
                check_choice(option.name, getattr(self, option.name), typing.get_args(kind))
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "max_waiting_requests",
                     "data_parallel_size", "max_model_len", "num_kv_blocks", "grammar_compile_timeout_s",
                     "max_parked_requests", "max_prefill_tokens"):  # (None: auto)
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 1:
            raise ValueError(f"kv_cache_memory_bytes must be >= 1 (or auto), got "
                             f"{self.kv_cache_memory_bytes}")
        if not 0 < self.kv_cache_memory_fraction <= 1:
            raise ValueError(f"kv_cache_memory_fraction must be in (0, 1], got "
                             f"{self.kv_cache_memory_fraction}")
        self._check_tt_options()
        self.request_limits  # noqa: B018 (validates the limits, naming the option)
        if self.step_timeout_s < 0:
            raise ValueError(f"step_timeout_s must be >= 0 (0: no watchdog), got {self.step_timeout_s}")
        if self.decode_steps_between_prefills < 0:
            raise ValueError("decode_steps_between_prefills must be >= 0, got "
                             f"{self.decode_steps_between_prefills}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(f"max_num_batched_tokens={self.max_num_batched_tokens} is smaller than "
                             f"max_num_seqs={self.max_num_seqs}: a full decode step would not fit")
        if self.extra_models_dir and not Path(self.extra_models_dir).is_dir():
            raise ValueError(f"extra_models_dir={self.extra_models_dir!r} is not a directory "
                             "(the option, or the env EXTRA_MODELS_DIR)")
        if self.enable_lora:
            raise ValueError("enable_lora=true: LoRA adapters are not supported yet")
        if self.speculative_config or self.num_speculative_tokens:
            raise ValueError("speculative decoding (speculative_config / num_speculative_tokens) "
                             "is not supported yet")
        if self.enable_chunked_prefill is False and self.max_model_len is not None:
            check_unchunked_budget(self.max_num_batched_tokens, self.max_model_len)
        if self.grammar_cache_bytes < 0:
            raise ValueError(f"grammar_cache_bytes must be >= 0 (0: no cache), got "
                             f"{self.grammar_cache_bytes}")

    @property
    def request_limits(self) -> RequestLimits:
        return RequestLimits(**{f.name: getattr(self, f.name) for f in dataclasses.fields(RequestLimits)})

    def _check_tt_options(self) -> None:
        check_choice("fabric_config", self.fabric_config, typing.get_args(FabricName))
        check_choice("dispatch_core_axis", self.dispatch_core_axis, typing.get_args(DispatchCoreAxisName))
        self.mesh_options(shape=parse_mesh_device(self.mesh_device) if self.mesh_device else None)
        if self.device in ("cpu", "cuda"):
            defaults = EngineConfig.__dataclass_fields__
            for name in TT_OPTIONS:
                if getattr(self, name) != defaults[name].default:
                    raise ValueError(f"{name}={getattr(self, name)!r} is a Tenstorrent mesh option, but "
                                     f"device={self.device!r}; set device=tt (or auto) or drop it")
        if self.device == "tt":
            check_tt_block_size(self.block_size)

    def mesh_options(self, shape: tuple[int, int] | None) -> MeshOptions:
        """The mesh to open for this config, over `shape` (None: every chip as one row)."""
        return MeshOptions(shape, self.fabric_config, self.trace_region_size, self.l1_small_size,
                           self.worker_l1_size, self.dispatch_core_axis, self.num_command_queues,
                           self.data_parallel_size)

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> EngineConfig:
        """Build from string parameters (Triton `config.pbtxt`, `serve.sh --set`).

        Bare names are canonical; a `tt.` prefix is accepted as an alias. Unknown names fail
        with the list of known ones.
        """
        known = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for raw_name, raw_value in params.items():
            name = raw_name.removeprefix("tt.")
            name = _ALIASES.get(name, name)
            if name not in known:
                raise ValueError(f"unknown engine option {raw_name!r}; known options: "
                                 f"{', '.join(sorted(known))}")
            if name in values:
                raise ValueError(f"engine option {name!r} given twice (as {raw_name!r})")
            values[name] = parse_value(name, raw_value, hints[name])
        return cls(**values)

    @property
    def total_num_seqs(self) -> int:
        """Running requests of the whole engine: data_parallel_size lanes of max_num_seqs each."""
        return self.data_parallel_size * self.max_num_seqs

    def resolve_for_model(self, model_max_positions: int, kv_bytes_per_token: int,
                          supports_prefix_caching: bool = True,
                          supports_chunked_prefill: bool = True) -> EngineConfig:
        """Fill the model-dependent defaults and check the options against the model."""
        if self.enable_prefix_caching and not supports_prefix_caching:
            raise ValueError("enable_prefix_caching=true, but the model does not support prefix caching")
        if self.enable_chunked_prefill and not supports_chunked_prefill:
            raise ValueError("enable_chunked_prefill=true, but the model does not support chunked "
                             "prefill; set enable_chunked_prefill=false")
        prefix_caching = supports_prefix_caching if self.enable_prefix_caching is None \
            else self.enable_prefix_caching
        chunked = supports_chunked_prefill if self.enable_chunked_prefill is None \
            else self.enable_chunked_prefill
        max_len = self.max_model_len or model_max_positions
        if max_len > model_max_positions:
            raise ValueError(f"max_model_len={max_len} exceeds the model's maximum positions "
                             f"({model_max_positions})")
        blocks_per_request = -(-max_len // self.block_size)
        num_blocks = self.num_kv_blocks
        if num_blocks is None and self.kv_cache_memory_bytes is None:
            # auto: the most a lane can use (every seat at max_model_len); the late sizing shrinks it
            num_blocks = self.max_num_seqs * blocks_per_request
        elif num_blocks is None:  # the memory budget is shared by the lanes
            assert self.kv_cache_memory_bytes is not None
            total = self.kv_cache_memory_bytes // (kv_bytes_per_token * self.block_size)
            num_blocks = max(1, total // self.data_parallel_size)
        if num_blocks < blocks_per_request:
            raise ValueError(
                f"the KV cache ({num_blocks} blocks of {self.block_size} tokens per lane) cannot hold "
                f"one request of max_model_len={max_len} ({blocks_per_request} blocks); raise "
                "num_kv_blocks or kv_cache_memory_bytes, or lower max_model_len or data_parallel_size")
        if not chunked:
            check_unchunked_budget(self.max_num_batched_tokens, max_len)
        return dataclasses.replace(self, max_model_len=max_len, num_kv_blocks=num_blocks,
                                   enable_prefix_caching=prefix_caching, enable_chunked_prefill=chunked)
