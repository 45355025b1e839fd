"""A tt-metal generator's warmup in two phases, as the Tenstorrent vLLM plugin runs it
(`model_runner.py`, `warmup_model`):

    phase 1, compile:  warmup_model_prefill(enable_trace=False), warmup_model_decode(enable_trace=False)
    phase 2, capture:  warmup_model_prefill(enable_trace=True)   when prefill is traced (trace_mode=all)
                       warmup_model_decode(enable_trace=True)    when decode is traced

Every program is compiled before any trace is captured: a compile during a capture allocates
buffers the trace may overwrite (tt-metal 5043de3). tt-metal's warmup_model_prefill runs once
(`already_warmed_up_prefill`), so the flag is cleared before phase 2 captures prefill. Each hook
is called where its call forms say the runner calls it (`hooks`: TTCallForms.warms_up_prefill /
warms_up_decode, set where the generator has it and can run it: Mllama's cannot), with the
arguments its signature names (tt-metal's:
kv_cache, enable_trace, max_batch_size, num_blocks, can_sample_on_device,
non_greedy_decoding_on_device); a hook taking only **kwargs gets what the plugin passes.

The trace region (trace_region_size, set when the mesh opens) is where captures go; ttnn offers
no query of what they need, so a capture that does not fit fails phase 2, and that failure is
reported naming the option.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from tt_backend.contract.modes import StepMode
from tt_backend.runtime.config import SamplingConfig, TraceConfig

logger = logging.getLogger(__name__)

PLUGIN_ARGUMENTS = {"warmup_model_prefill": ("kv_cache", "enable_trace", "can_sample_on_device"),
                    "warmup_model_decode": ("kv_cache", "enable_trace", "max_batch_size", "num_blocks",
                                            "can_sample_on_device")}
"""What the plugin passes each hook (a hook that takes only **kwargs gets these)."""


def _call(generator: Any, name: str, known: dict[str, Any], on_device: bool) -> bool:
    hook = getattr(generator, name, None)
    if hook is None:
        return False
    known = {**known, "can_sample_on_device": on_device, "non_greedy_decoding_on_device": on_device}
    parameters = inspect.signature(hook).parameters
    named = [key for key in known if key in parameters]
    if not named and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        named = list(PLUGIN_ARGUMENTS[name])
    hook(**{key: known[key] for key in named})
    return True


def _is_trace_region_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "trace" in text and ("region" in text or "exceed" in text)


def warm_up(generator: Any, kv_cache: list[Any], trace: TraceConfig, max_batch_size: int,
            num_blocks: int, sampling: SamplingConfig, hooks: tuple[str, ...]) -> list[str]:
    """Run both phases over `hooks` (of warmup_model_prefill, warmup_model_decode); return the
    hooks called, each as `name(enable_trace)`. Each hook warms device sampling (greedy and not)
    where its operation may sample on the device."""
    known: dict[str, Any] = {"kv_cache": kv_cache, "max_batch_size": max_batch_size, "num_blocks": num_blocks}
    device = {"warmup_model_prefill": sampling.on_device(StepMode.PREFILL),
              "warmup_model_decode": sampling.on_device(StepMode.DECODE)}
    called: list[str] = []
    for name in hooks:
        if _call(generator, name, {**known, "enable_trace": False}, device[name]):
            called.append(f"{name}(False)")
    captures = [name for name, traced in (("warmup_model_prefill", trace.prefill),
                                          ("warmup_model_decode", trace.decode)) if traced and name in hooks]
    if "warmup_model_prefill" in captures and hasattr(generator, "already_warmed_up_prefill"):
        generator.already_warmed_up_prefill = False  # tt-metal warms prefill once; capture it now
    for name in captures:
        try:
            if _call(generator, name, {**known, "enable_trace": True}, device[name]):
                called.append(f"{name}(True)")
        except RuntimeError as exc:
            if not _is_trace_region_error(exc):
                raise
            raise ValueError(f"capturing the traces in {name} failed: they do not fit the trace region; "
                             f"raise trace_region_size (bytes) or set trace_mode=none. ttnn: {exc}") from None
    logger.info("tt: generator warmup: %s", ", ".join(called) or "no warmup hook the runner calls")
    return called
