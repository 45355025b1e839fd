"""The composition room: builds the torch or the Tenstorrent engine from an EngineConfig, with one
shared finishing step. Only `triton/` and tests import it; it is the one place that knows every
room (models, devices, runtime, scheduler, engine)."""

from tt_backend.assembly.build import build_engine, uses_tt
from tt_backend.assembly.instances import place_instance

__all__ = ["build_engine", "place_instance", "uses_tt"]
