"""build_engine: the torch or the Tenstorrent engine for a config (whichever the device option and
the machine choose)."""

from __future__ import annotations

import dataclasses
import importlib
import logging

from tt_backend.config import EngineConfig
from tt_backend.devices.tt.mesh import tt_device_count
from tt_backend.engine.engine import LLMEngine

logger = logging.getLogger(__name__)


def build_engine(config: EngineConfig) -> LLMEngine:
    import_processor_modules(config.logits_processor_modules)
    if uses_tt(config):
        from tt_backend.assembly.tt_engine import build_tt_engine
        if config.device == "auto":  # the device is known now: its block size default with it
            config = dataclasses.replace(config, device="tt", block_size=0 if config.auto_block_size
                                         else config.block_size)
        return build_tt_engine(config)
    from tt_backend.assembly.torch_engine import build_torch_engine
    return build_torch_engine(config)


def import_processor_modules(names: str) -> None:
    """Import the modules of `logits_processor_modules`; each registers its processors."""
    for name in filter(None, (n.strip() for n in names.split(","))):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"logits_processor_modules: cannot import {name!r} ({exc})") from None


def uses_tt(config: EngineConfig) -> bool:
    """Whether the engine runs on a Tenstorrent mesh: device=tt, or auto when ttnn imports and
    reports a device."""
    if config.device == "tt":
        return True
    if config.device != "auto":
        return False
    found = tt_device_count()
    logger.info("device=auto: %s", f"ttnn reports {found} Tenstorrent chip(s)" if found
                else "no Tenstorrent device (ttnn missing or sees none); torch")
    return found > 0
