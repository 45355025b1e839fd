"""Every mode, status and reason of the engine, defined once as an enum.

Members are strings (`StepMode.DECODE == "decode"`) and print as their values, so they read the
same in logs, metric labels, shape keys and JSON as the strings they replace.
"""

from __future__ import annotations

import enum
from typing import TypeVar

N = TypeVar("N", bound="Named")


class Named(str, enum.Enum):
    """A string enum whose text is its value."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def parse(cls: type[N], field: str, value: object) -> N:
        """The member named by `value`, or a ValueError naming the field and the choices."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{field}={value!r} is not one of "
                             f"{', '.join(m.value for m in cls)}") from None


class StepMode(Named):
    """What one step computes, for every lane at once."""

    PREFILL = "prefill"
    DECODE = "decode"
    EMPTY = "empty"


OPERATIONS: tuple[StepMode, ...] = (StepMode.PREFILL, StepMode.DECODE)
"""The modes that run the model (an empty step runs nothing)."""


class StepVariant(Named):
    """What a step returns: its sampling rows' logits (for the host path), or the tokens a
    device variant chose inside the step (its "sampling material", part of its trace identity)."""

    LOGITS = "logits"
    GREEDY = "greedy"
    """Argmax only."""
    SAMPLE = "sample"
    """Temperature and min-p."""
    SAMPLE_FILTERED = "sample_filtered"
    """Also top-k and top-p."""


DEVICE_VARIANTS: tuple[StepVariant, ...] = (
    StepVariant.GREEDY, StepVariant.SAMPLE, StepVariant.SAMPLE_FILTERED)


class TraceMode(Named):
    """Which operations run as captured, replayed steps (`trace_mode`)."""

    AUTO = "auto"
    """Resolved per device: ALL on the CPU, DECODE_ONLY elsewhere."""
    NONE = "none"
    DECODE_ONLY = "decode_only"
    ALL = "all"


class SampleOnDeviceMode(Named):
    """Which operations may choose tokens inside the step (`sample_on_device_mode`)."""

    ALL = "all"
    DECODE_ONLY = "decode_only"
    NONE = "none"


class FinishReason(Named):
    """Why a request ended, as vLLM and OpenAI spell it."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


class RequestStatus(enum.Enum):
    """A request's lifecycle: waiting → (skipped_waiting ↔ waiting) → running → (preempted →
    waiting) → finished."""

    WAITING = "waiting"
    SKIPPED_WAITING = "skipped_waiting"
    """Parked until its precondition (e.g. a grammar compile) is ready."""
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = FinishReason.STOP.value
    FINISHED_LENGTH = FinishReason.LENGTH.value
    FINISHED_ABORTED = FinishReason.ABORT.value
    FINISHED_ERROR = FinishReason.ERROR.value

    @property
    def finished(self) -> bool:
        return self.value in _FINISH_VALUES

    @property
    def finish_reason(self) -> FinishReason:
        """The reason a finished status reports."""
        assert self.finished, f"{self} is not a finished status"
        return FinishReason(self.value)


_FINISH_VALUES = frozenset(reason.value for reason in FinishReason)
