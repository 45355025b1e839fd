"""Fault injection for the reliability tests (`fault_injection`), refused unless the server's
environment sets TT_BACKEND_ALLOW_FAULT_INJECTION=1.

The option reads `<raise|hang>:<prefill|decode>:<token id>`: a step of that mode whose batch holds
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
    def parse(cls, text: str) -> FaultSpec | None:
        """The spec of the `fault_injection` option; None for "" (off). ValueError names the option."""
        if not text:
            return None
        if os.environ.get(ALLOW_ENV) != "1":
            raise ValueError(f"fault_injection={text!r} is for reliability tests only: the server's "
                             f"environment must set {ALLOW_ENV}=1 to use it")
        parts = text.split(":")
        if len(parts) != 3 or parts[0] not in ("raise", "hang") or parts[1] not in ("prefill", "decode") \
                or not parts[2].isdigit():
            raise ValueError(f"fault_injection={text!r} is not <raise|hang>:<prefill|decode>:<token id>")
        kind: FaultKind = "raise" if parts[0] == "raise" else "hang"
        return cls(kind, StepMode(parts[1]), int(parts[2]))


class FaultInjector:
    """Applies a FaultSpec to the steps the pipeline runs."""

    def __init__(self, spec: FaultSpec | None) -> None:
        self.spec = spec
        self._release = threading.Event()
        self.injected = 0

    def hits(self, mode: StepMode, prompts: Iterable[tuple[int, ...]]) -> bool:
        spec = self.spec
        return spec is not None and mode is spec.mode and any(p[:1] == (spec.trigger_token,) for p in prompts)

    def apply(self, mode: StepMode, prompts: Iterable[tuple[int, ...]]) -> None:
        """Inside the step: raise or hang if the spec hits this step."""
        if not self.hits(mode, prompts):
            return
        assert self.spec is not None
        self.injected += 1
        if self.spec.kind == "raise":
            raise InjectedFault(f"injected fault in the {mode} step (fault_injection)")
        self._release.wait()

    def release(self) -> None:
        """Let a hung step return (shutdown)."""
        self._release.set()
