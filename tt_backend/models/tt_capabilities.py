"""What a tt-metal generator class declares and takes, read the way the Tenstorrent vLLM plugin
reads it, mapped onto our `ModelCapabilities` plus the call forms the generator runner needs.

Declarations come first: the class-level `model_capabilities` dict (tt-metal
models/common/model_capabilities.py, `ModelCapabilitiesMixin`; the plugin reads it in
`platform.py` before any generator exists). Its keys, as tt-metal documents them:

    supports_prefix_caching   a prefill may start at a cached prefix (start_pos > 0)
    supports_chunked_prefill  a prompt may be prefilled across several steps (start_pos > 0)
    supports_async_decode     decode_forward(read_from_device=False) + read_decode_output(async_read=True)
    supports_sample_on_device the generator's own sampling pipeline
    supports_device_grammar   grammar masks applied on the device
    resumed_prefill_token_alignment  the q_chunk_size a resumed start_pos is floored to
    output_tokens_per_step    tokens committed per step (more than 1: a block-output model)
    accepts_trace_mode        used by tt-metal's own runtime, not by the plugin

An absent key means "not supported". A class with vLLM's SupportsMultiModal marker
(`supports_multimodal = True`) takes images; with M-RoPE (an `mrope_section` in its config, vLLM's
`uses_mrope`) its prefill returns rope deltas that its decode takes back; one whose prefill_forward
names `cross_page_table` (Mllama) reads its image by cross-attention, and its warmup hooks are not
called (tt-metal's warmup_model_decode calls decode_forward in the text form, which Mllama's decode,
decode_forward_llama_vision, does not take: its steps run untraced). A model with a sliding
window gets no prefix caching (the plugin's rule, platform.py). Signatures are the fallback, for
generators that declare nothing: current tt-metal's `prefill_forward(*args, **kwargs)` says
nothing, so a declaring generator is taken to have the plugin's contract (start_pos always,
empty_slots with data parallelism, enable_trace on prefill); a parameter is taken to be missing only
where a signature is explicit (no **kwargs) and does not name it. `tt_data_parallel` in
`initialize_vllm_model` is what makes a generator run every data-parallel submesh in one program
(single-execute).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tt_backend.devices.tt.generator import TTCallForms
from tt_backend.models.capabilities import ModelCapabilities

logger = logging.getLogger(__name__)

KNOWN_KEYS = ("supports_prefix_caching", "supports_chunked_prefill", "supports_async_decode",
              "supports_sample_on_device", "supports_device_grammar", "resumed_prefill_token_alignment",
              "output_tokens_per_step", "accepts_trace_mode")


@dataclass(frozen=True)
class TTGeneratorTraits:
    """A generator class's capabilities and the call forms it takes."""

    capabilities: ModelCapabilities
    declared: bool
    """Whether the class declares `model_capabilities` (else every trait is from signatures)."""
    calls: TTCallForms


def _parameters(function: Callable[..., Any] | None) -> tuple[set[str], bool] | None:
    """(named parameters, whether it takes **kwargs); None when there is no such method."""
    if function is None:
        return None
    parameters = inspect.signature(function).parameters.values()
    return ({p.name for p in parameters}, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters))


def takes(cls: type, method: str, parameter: str, declared: bool) -> bool:
    """Whether `method` (or the `<method>_text` it forwards to) takes `parameter`: named by one of
    them; missing where one is explicit (no **kwargs) without it; else (only **kwargs) what the
    declaration implies."""
    opaque = False
    for name in (method, f"{method}_text"):
        found = _parameters(getattr(cls, name, None))
        if found is None:
            continue
        names, var_keyword = found
        if parameter in names:
            return True
        if not var_keyword:
            return False
        opaque = True
    return opaque and declared


def read_form(cls: type) -> bool:
    """True for read_decode_output(tt_out, async_read=...), False for the older (tt_out,
    unpadded_batch, is_tokens); a ValueError for any other."""
    read = getattr(cls, "read_decode_output", None)
    found = _parameters(read)
    if read is None or found is None or "async_read" in found[0] or found[1]:
        return True
    if "unpadded_batch" in found[0]:
        return False
    raise ValueError(
        f"{cls.__qualname__}.read_decode_output{inspect.signature(read)} is neither "
        "tt-metal's read_decode_output(tt_out, async_read=False) nor the older (tt_out, unpadded_batch, "
        "is_tokens=False); use a tt-metal whose Generator has one of them (see the README's Tenstorrent "
        "section for the versions)")


def without_images(traits: TTGeneratorTraits) -> TTGeneratorTraits:
    """`traits` of a multimodal generator served text only (requests with images refused)."""
    capabilities = dataclasses.replace(traits.capabilities, takes_images=False)
    calls = dataclasses.replace(traits.calls, takes_images=False, rope_deltas=False, cross_attention=False)
    return dataclasses.replace(traits, capabilities=capabilities, calls=calls)


def sliding_window(hf_config: Any) -> int | None:
    """The model's attention window as vLLM reads it (Qwen2's `use_sliding_window: false` turns
    its `sliding_window` off)."""
    if not getattr(hf_config, "use_sliding_window", True):
        return None
    window = getattr(hf_config, "sliding_window", None)
    return int(window) if window else None


def generator_traits(cls: type, hf_config: Any, max_prefill_batch: int, block_size: int) -> TTGeneratorTraits:
    """What `cls` (a tt-metal generator class) supports and takes, for the model of `hf_config`."""
    raw = getattr(cls, "model_capabilities", None)
    declared = isinstance(raw, dict)
    caps: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    for key in sorted(set(caps) - set(KNOWN_KEYS)):
        logger.warning("%s.model_capabilities: unknown key %r=%r ignored (tt-metal's keys: %s)",
                       cls.__qualname__, key, caps[key], ", ".join(KNOWN_KEYS))
    per_step = int(caps.get("output_tokens_per_step", 1))
    if per_step != 1:
        raise ValueError(f"{cls.__qualname__} declares output_tokens_per_step={per_step}: block-output "
                         "models (more than one token per step) are not supported")
    start_pos = takes(cls, "prefill_forward", "start_pos", declared)
    prefix = bool(caps.get("supports_prefix_caching", False))
    chunked = bool(caps.get("supports_chunked_prefill", False))
    window = sliding_window(text_config(hf_config))
    if prefix and window is not None:
        logger.info("%s declares prefix caching, but the model has a sliding window of %d: off (the plugin's "
                    "rule)", cls.__qualname__, window)
        prefix = False
    if (prefix or chunked) and not start_pos:
        logger.info("%s declares prefix caching or chunked prefill, but its prefill_forward takes no "
                    "start_pos: both off", cls.__qualname__)
        prefix = chunked = False
    alignment = caps.get("resumed_prefill_token_alignment")
    if alignment is not None and (not isinstance(alignment, int) or alignment < 1):
        raise ValueError(f"{cls.__qualname__}.model_capabilities "
                         f"resumed_prefill_token_alignment={alignment!r} is not a positive int")
    takes_images = bool(getattr(cls, "supports_multimodal", False))
    cross = takes_images and takes(cls, "prefill_forward", "cross_page_table", False)
    capabilities = ModelCapabilities(
        prefix_caching=prefix, chunked_prefill=chunked, batched_prefill=True, takes_images=takes_images,
        max_prefill_batch=max_prefill_batch,
        async_decode=bool(caps.get("supports_async_decode", False)),
        device_sampling=bool(caps.get("supports_sample_on_device", False)),
        single_execute=takes(cls, "initialize_vllm_model", "tt_data_parallel", False))
    calls = TTCallForms(start_pos, takes(cls, "prefill_forward", "empty_slots", declared),
                        takes(cls, "prefill_forward", "enable_trace", declared),
                        math.lcm(block_size, alignment) if alignment else block_size, read_form(cls),
                        hasattr(cls, "warmup_model_prefill") and not cross,
                        hasattr(cls, "warmup_model_decode") and not cross,
                        takes_images, takes_images and uses_mrope(hf_config), cross)
    return TTGeneratorTraits(capabilities, declared, calls)


def uses_mrope(hf_config: Any) -> bool:
    """Whether the model's rotary positions are M-RoPE's (vLLM's ModelConfig.uses_mrope: an
    `mrope_section` in its text config's rope parameters)."""
    text = text_config(hf_config)
    for name in ("rope_parameters", "rope_scaling"):
        rope = getattr(text, name, None) or getattr(hf_config, name, None)
        if isinstance(rope, dict) and "mrope_section" in rope:
            return True
    return False


def text_config(hf: Any) -> Any:
    """The text model's config: a vision-language model's `text_config` (as vLLM's hf_text_config)."""
    return hf.get_text_config() if hasattr(hf, "get_text_config") else hf
