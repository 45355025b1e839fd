"""Fault injection for the reliability tests (`fault_injection`), refused unless the server's
environment sets TT_BACKEND_ALLOW_FAULT_INJECTION=1.

The option is a comma-separated list of `<raise|hang>:<prefill|decode>:<token id>`, each meaning: a
step of that mode whose batch holds a request whose prompt starts with that token raises (as a
failing device step would), or hangs until the engine shuts down (as a hung device would, for the
step watchdog to find). Requests whose prompts start otherwise never meet it, so one server can run
faulty and good requests side by side. The faults live in a runner wrapper (FaultInjectingRunner),
so the step loop carries no fault code.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tt_backend.contract.modes import StepMode
from tt_backend.contract.sampling import SampledTokens, SamplingPlan
from tt_backend.contract.step import StepPlan
from tt_backend.runtime.config import SamplingConfig
from tt_backend.runtime.step_runner import AsyncStepRunner, StepRunner

ALLOW_ENV = "TT_BACKEND_ALLOW_FAULT_INJECTION"
FaultKind = Literal["raise", "hang"]
FirstTokens = Callable[[], frozenset[int]]
"""The first prompt tokens of the requests of the step being handed to the runner."""


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


class FaultInjectingRunner:
    """A StepRunner over another: a step an injected fault hits raises before its runner sees it (no
    device work half done), or hangs first (released at shutdown, the step then runs). The engine
    wraps its runner once, at construction, only when fault_injection is set: nothing checks for
    faults on a step otherwise."""

    def __init__(self, runner: StepRunner, specs: tuple[FaultSpec, ...], first_tokens: FirstTokens,
                 released: threading.Event) -> None:
        assert specs, "wrap a runner only when a fault is injected"
        self.runner = runner
        self.specs = specs
        self._first_tokens = first_tokens
        self._released = released
        self.injected = 0
        """Faults injected so far (each hit step counts once)."""

    @property
    def sampling(self) -> SamplingConfig:
        return self.runner.sampling

    @property
    def eager_steps(self) -> int:
        return self.runner.eager_steps

    @property
    def traced_steps(self) -> int:
        return self.runner.traced_steps

    @property
    def mm_cache_counts(self) -> tuple[int, int]:
        return self.runner.mm_cache_counts

    @property
    def cache_dtype(self) -> str:
        return self.runner.cache_dtype

    def run_and_sample(self, plan: StepPlan, sampling: SamplingPlan) -> SampledTokens:
        self._inject(plan.mode)
        return self.runner.run_and_sample(plan, sampling)

    def drain(self) -> int:
        return self.runner.drain()

    def close(self) -> None:
        self.runner.close()

    def _inject(self, mode: StepMode) -> None:
        """Raise or hang as the first spec that hits a step of this mode over the batch being handed
        over says; return at once if none does. A hang ends when `released` is set (shutdown)."""
        firsts = self._first_tokens()
        spec = next((s for s in self.specs if s.mode is mode and s.trigger_token in firsts), None)
        if spec is None:
            return
        self.injected += 1
        if spec.kind == "raise":
            raise InjectedFault(f"injected fault in the {mode} step (fault_injection)")
        self._released.wait()


class AsyncFaultInjectingRunner(FaultInjectingRunner):
    """The wrapper of an AsyncStepRunner: a launch meets the faults too, raising or hanging before
    anything is in flight, so a hit step fails (or hangs for the watchdog) as a synchronous one would.
    A continuation launched behind a step in flight holds that step's requests, which no fault hit
    (else it would not be in flight), so no fault ever hits one."""

    def __init__(self, runner: AsyncStepRunner, specs: tuple[FaultSpec, ...], first_tokens: FirstTokens,
                 released: threading.Event) -> None:
        super().__init__(runner, specs, first_tokens, released)
        self.async_runner = runner

    def launch(self, plan: StepPlan, sampling: SamplingPlan, after: int | None = None) -> int:
        self._inject(plan.mode)
        return self.async_runner.launch(plan, sampling, after)

    def complete(self, handle: int) -> SampledTokens:
        return self.async_runner.complete(handle)


def inject_faults(runner: StepRunner, specs: tuple[FaultSpec, ...], first_tokens: FirstTokens,
                  released: threading.Event) -> FaultInjectingRunner:
    """`runner` wrapped to meet `specs` (keeping whether it can launch steps ahead)."""
    if isinstance(runner, AsyncStepRunner):
        return AsyncFaultInjectingRunner(runner, specs, first_tokens, released)
    return FaultInjectingRunner(runner, specs, first_tokens, released)
