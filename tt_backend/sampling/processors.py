"""Custom logits processors, registered by name and asked for per request
(`"logits_processors": ["name"]` in sampling_parameters).

A processor takes the request's generated token ids so far and the fp32 logits row of the next
token ([vocab], on the device of the step) and returns the row to sample from. Processors run on
the host path, after the built-in masks and biases and before the penalties. Register them from a
module named in the engine option `logits_processor_modules`, which the engine imports at start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

LogitsProcessor = Callable[[Sequence[int], torch.Tensor], torch.Tensor]

_REGISTRY: dict[str, LogitsProcessor] = {}


def register(name: str, processor: LogitsProcessor) -> None:
    if not name or name in _REGISTRY and _REGISTRY[name] is not processor:
        raise ValueError(f"a logits processor named {name!r} is already registered (or the name is empty)")
    _REGISTRY[name] = processor


def lookup(name: str) -> LogitsProcessor:
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ValueError(f"logits_processors names {name!r}, which is not registered (registered: {known})")
    return _REGISTRY[name]
