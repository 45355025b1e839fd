"""What a model implementation declares it supports; the engine enables features accordingly.

A feature a model does not declare is switched off with a log line, or rejected at load when
the user asked for it explicitly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

logger = logging.getLogger(__name__)


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
    takes_images: bool = False
    """A vision-language model: requests may bring images (tt_llm's `image`, the front's image parts);
    without it the engine refuses a request that does, before it holds a slot or a KV block."""
    bidirectional_images: bool = False
    """An image's tokens attend to each other both ways in prefill (Gemma 3): each is prefilled whole."""

    def log_undeclared(self, architecture: str) -> None:
        """Say which of the features the config may turn on by default are off for this model."""
        for feature, declared in (("prefix caching", self.prefix_caching),
                                  ("chunked prefill", self.chunked_prefill)):
            if not declared:
                logger.info("%s off: %s does not declare support for it", feature, architecture)


def check_lanes(architecture: str, caps: ModelCapabilities, lanes: int) -> None:
    """In-process lanes share one program each step: refuse them for a model that is not single-execute."""
    if lanes > 1 and not caps.single_execute:
        raise ValueError(
            f"data_parallel_size={lanes}: {architecture} does not declare single-execute, so its lanes "
            f"cannot share one program; {instance_hint(lanes)}")


def instance_hint(lanes: int) -> str:
    """How to serve `lanes` data-parallel ranks as Triton model instances instead (assembly/instances.py)."""
    return (f"serve it as {lanes} Triton model instances of one lane each: in config.pbtxt set "
            f"`instance_group [ {{ count: {lanes}, kind: KIND_CPU }} ]` and data_parallel_size=1; each "
            f"instance then opens its 1/{lanes} of the chips (TT_VISIBLE_DEVICES) as a 1/{lanes} of "
            "MESH_DEVICE's mesh (README, Tenstorrent)")


# Our torch Llama family: paged attention over any context makes caching, chunking and batched
# prefill exact; its step takes input tokens from the previous step's output on the device, so
# decode can run ahead of the host (async decode).
TORCH_LLAMA = ModelCapabilities(prefix_caching=True, chunked_prefill=True, batched_prefill=True,
                                max_prefill_batch=32, async_decode=True, single_execute=True)

TORCH_LLAVA = replace(TORCH_LLAMA, takes_images=True)
"""A vision-language model over our Llama family: its encoder runs inside eager prefill steps."""
TORCH_GEMMA3_VISION = replace(TORCH_LLAVA, bidirectional_images=True)
"""Gemma 3 with its vision tower: as LLaVA's, an image's tokens also attending to each other."""
TORCH_MLLAMA = replace(TORCH_LLAVA, prefix_caching=False)
"""Llama 3.2 Vision: its images' keys and values lie in the request's own blocks, and every token after
an image depends on it through the cross-attention layers, so no block is shared between requests."""
