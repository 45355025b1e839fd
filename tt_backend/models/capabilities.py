"""What a model implementation declares it supports; the engine enables features accordingly."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelCapabilities:
    prefix_caching: bool = False
    chunked_prefill: bool = False
    batched_prefill: bool = False
    max_prefill_batch: int = 1
    """Largest physical prefill batch the implementation runs in one wave."""


# Our torch Llama family: paged attention over any context makes all of these exact.
TORCH_LLAMA = ModelCapabilities(prefix_caching=True, chunked_prefill=True, batched_prefill=True,
                                max_prefill_batch=32)
