"""What a model implementation declares it supports; the engine enables features accordingly.

A feature a model does not declare is switched off with a log line, or rejected at load when
the user asked for it explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelCapabilities:
    prefix_caching: bool = False
    chunked_prefill: bool = False
    batched_prefill: bool = False
    max_prefill_batch: int = 1
    """Largest physical prefill batch the implementation runs in one wave."""
    async_decode: bool = False
    device_sampling: bool = False
    single_execute: bool = False
    """One program executes every data-parallel lane each step (in-process lanes)."""


# Our torch Llama family: paged attention over any context makes caching, chunking and batched
# prefill exact; async decode and device sampling come with the traced runtime and sampler.
TORCH_LLAMA = ModelCapabilities(prefix_caching=True, chunked_prefill=True, batched_prefill=True,
                                max_prefill_batch=32, single_execute=True)
