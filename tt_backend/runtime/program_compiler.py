"""ProgramCompiler: the registry of eager programs, keyed by the canonical step shape.

Compiling a shape is idempotent. Compilation needs the bound KV cache. Once traces are active the
compile gate is closed: an already-compiled shape still runs eagerly, an unseen one is refused.
On torch there is no separate program to build (kernels are chosen per call), so compiling
records the shape and, when the device asks for it, runs the step once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tt_backend.runtime.config import StepShape
from tt_backend.runtime.kv_cache import PagedKVCacheManager


class CompileGateClosedError(RuntimeError):
    """A program was compiled after traces became active."""


@dataclass(frozen=True)
class CompiledProgram:
    shape: StepShape


class ProgramCompiler:
    def __init__(self, kv: PagedKVCacheManager, run_on_compile: bool = False) -> None:
        self._kv = kv
        self._run_on_compile = run_on_compile
        self._programs: dict[str, CompiledProgram] = {}
        self._gate_open = True

    @property
    def gate_open(self) -> bool:
        return self._gate_open

    def key_for(self, shape: StepShape) -> str:
        return shape.key

    def compiled(self, shape: StepShape) -> bool:
        return shape.key in self._programs

    def compile(self, shape: StepShape, invoke: Callable[[], object] | None = None) -> CompiledProgram:
        program = self._programs.get(shape.key)
        if program is not None:
            return program
        if not self._gate_open:
            raise CompileGateClosedError(
                f"program {shape.key} was not compiled during warmup and traces are active; "
                "no new program may compile now")
        if not self._kv.bound:
            raise RuntimeError(f"cannot compile {shape.key}: the KV cache is not allocated and bound")
        if self._run_on_compile and invoke is not None:
            invoke()
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
