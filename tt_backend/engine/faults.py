"""Fault injection for the reliability tests (`fault_injection`), refused unless the server's
environment sets TT_BACKEND_ALLOW_FAULT_INJECTION=1.

The option is a comma-separated list of `<raise|hang>:<prefill|decode>:<token id>`, each meaning: a
step of that mode whose batch holds
a request whose prompt starts with that token raises (as a failing device step would), or hangs
until the engine shuts down (as a hung device would, for the step watchdog to find). Requests
whose prompts start otherwise never meet it, so one server can run faulty and good requests side
by side.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from tt_backend.contract.modes import StepMode

ALLOW_ENV = "TT_BACKEND_ALLOW_FAULT_INJECTION"
FaultKind = Literal["raise", "hang"]


class InjectedFault(RuntimeError):
    """What a `raise` fault raises inside the step."""


@dataclass(frozen=True)
class FaultSpec:
    kind: FaultKind
    mode: StepMode
    trigger_token: int

    @classmethod
    def parse(cls, text: str) -> tuple[FaultSpec, ...]:
        """The specs of the `fault_injection` option; () for "" (off). ValueError names the option."""
        if not text:
            return ()
        if os.environ.get(ALLOW_ENV) != "1":
            raise ValueError(f"fault_injection={text!r} is for reliability tests only: the server's "
                             f"environment must set {ALLOW_ENV}=1 to use it")
        specs = []
        for item in text.split(","):
            parts = item.strip().split(":")
            if len(parts) != 3 or parts[0] not in ("raise", "hang") \
                    or parts[1] not in ("prefill", "decode") or not parts[2].isdigit():
                raise ValueError(f"fault_injection={text!r}: {item!r} is not "
                                 "<raise|hang>:<prefill|decode>:<token id>")
            kind: FaultKind = "raise" if parts[0] == "raise" else "hang"
            specs.append(cls(kind, StepMode(parts[1]), int(parts[2])))
        return tuple(specs)


class FaultInjector:
    """Applies the FaultSpecs to the steps the pipeline runs."""

    def __init__(self, specs: tuple[FaultSpec, ...] = ()) -> None:
        self.specs = specs
        self._release = threading.Event()
        self.injected = 0

    def hit(self, mode: StepMode, prompts: Iterable[tuple[int, ...]]) -> FaultSpec | None:
        """The first spec that hits a step of this mode over these prompts."""
        firsts = {p[0] for p in prompts if p}
        return next((s for s in self.specs if s.mode is mode and s.trigger_token in firsts), None)

    def apply(self, spec: FaultSpec | None, mode: StepMode) -> None:
        """Inside the step: raise or hang as `spec` (the one that hit it, if any) says."""
        if spec is None:
            return
        self.injected += 1
        if spec.kind == "raise":
            raise InjectedFault(f"injected fault in the {mode} step (fault_injection)")
        self._release.wait()

    def release(self) -> None:
        """Let a hung step return (shutdown)."""
        self._release.set()
