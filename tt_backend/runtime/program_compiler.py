"""ProgramCompiler: the registry of eager programs, keyed by the canonical step shape.

Compiling a shape is idempotent. Compilation needs the bound KV cache. Once traces are active the
compile gate is closed: an already-compiled shape still runs eagerly, an unseen one is refused.
On torch there is no separate program to build (kernels are chosen per call), so compiling
records the shape; a device that builds programs (ttnn) would run the step once here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tt_backend.runtime.config import StepShape
from tt_backend.runtime.kv_cache import PagedKVCacheManager


class CompileGateClosedError(RuntimeError):
    """A program was compiled after traces became active."""


@dataclass(frozen=True)
class CompiledProgram:
    shape: StepShape


class ProgramCompiler:
    def __init__(self, kv: PagedKVCacheManager) -> None:
        self._kv = kv
        self._programs: dict[str, CompiledProgram] = {}
        self._gate_open = True

    @property
    def gate_open(self) -> bool:
        return self._gate_open

    def compiled(self, shape: StepShape) -> bool:
        return shape.key in self._programs

    def compile(self, shape: StepShape) -> CompiledProgram:
        program = self._programs.get(shape.key)
        if program is not None:
            return program
        if not self._gate_open:
            raise CompileGateClosedError(
                f"program {shape.key} was not compiled during warmup and traces are active; "
                "no new program may compile now")
        if not self._kv.bound:
            raise RuntimeError(f"cannot compile {shape.key}: the KV cache is not allocated and bound")
        program = CompiledProgram(shape)
        self._programs[shape.key] = program
        return program

    def close_gate(self) -> None:
        self._gate_open = False

    @property
    def programs(self) -> tuple[CompiledProgram, ...]:
        return tuple(self._programs.values())

    def release(self) -> None:
        self._programs.clear()
