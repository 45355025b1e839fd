"""A tt-metal generator's declarations mapped onto our `ModelCapabilities`.

A generator class declares a `model_capabilities` dict (tt-metal: `{"supports_prefix_caching":
True}`); what it takes is read from its method signatures: `initialize_vllm_model(...,
tt_data_parallel)` runs every data-parallel submesh in one program (single-execute), and a
`decode_forward(..., sampling_params)` samples on the device. Keys we do not know are logged, not
guessed at.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from tt_backend.models.capabilities import ModelCapabilities

logger = logging.getLogger(__name__)

# model_capabilities key -> our field
_KEYS = {
    "supports_prefix_caching": "prefix_caching",
    "supports_chunked_prefill": "chunked_prefill",
    "supports_async_decode": "async_decode",
    "supports_device_sampling": "device_sampling",
    "supports_single_execute": "single_execute",
}


def _takes(cls: type, method: str, parameter: str) -> bool:
    """Whether `method` takes `parameter`, directly or through the `*_text` method it forwards
    to (tt-metal's `decode_forward(*args, **kwargs)` calls `decode_forward_text`)."""
    for name in (method, f"{method}_text"):
        function = getattr(cls, name, None)
        if function is not None and parameter in inspect.signature(function).parameters:
            return True
    return False


def takes_start_pos(cls: type) -> bool:
    """A prefill that starts past a cached prefix (prefix caching) needs `start_pos`."""
    return _takes(cls, "prefill_forward", "start_pos")


def takes_empty_slots(cls: type) -> bool:
    """A prefill told each row's batch slot (`empty_slots`): how tt-metal's data-parallel prefill
    finds a row's submesh."""
    return _takes(cls, "prefill_forward", "empty_slots")


def generator_capabilities(cls: type, max_prefill_batch: int) -> ModelCapabilities:
    """What `cls` (a tt-metal generator class) supports, from its dict and its signatures."""
    declared: dict[str, Any] = dict(getattr(cls, "model_capabilities", None) or {})
    fields: dict[str, bool] = {
        "single_execute": _takes(cls, "initialize_vllm_model", "tt_data_parallel"),
        "device_sampling": _takes(cls, "decode_forward", "sampling_params"),
    }
    for key, value in declared.items():
        if key in _KEYS:
            fields[_KEYS[key]] = bool(value)
        else:
            logger.warning("%s.model_capabilities: unknown key %r=%r ignored (known: %s)", cls.__qualname__,
                           key, value, ", ".join(sorted(_KEYS)))
    if fields.get("prefix_caching") and not takes_start_pos(cls):
        logger.info("%s declares prefix caching, but its prefill_forward takes no start_pos: off",
                    cls.__qualname__)
        fields["prefix_caching"] = False
    # The generator's prefill takes a padded batch of prompts with their page tables.
    return ModelCapabilities(batched_prefill=True, max_prefill_batch=max_prefill_batch, **fields)
