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
# prefill exact; its step takes input tokens from the previous step's output on the device, so
# decode can run ahead of the host (async decode).
TORCH_LLAMA = ModelCapabilities(prefix_caching=True, chunked_prefill=True, batched_prefill=True,
                                max_prefill_batch=32, async_decode=True, single_execute=True)
