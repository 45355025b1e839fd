"""Who is at fault when a request fails: the kinds an error maps to at every front (Triton's
error codes, HTTP statuses), decided where the error is raised, never read back from its text."""

from __future__ import annotations

from tt_backend.contract.modes import Named


class ErrorKind(Named):
    INVALID_ARGUMENT = "invalid_argument"
    """The request's own values: the client's mistake (HTTP 400)."""
    RESOURCE_EXHAUSTED = "resource_exhausted"
    """The server is full for now; the same request may succeed later (HTTP 429)."""
    UNAVAILABLE = "unavailable"
    """The engine is failed, restarting or shutting down (HTTP 503)."""
    INTERNAL = "internal"
    """The server's fault: a step, the device, the model (HTTP 500)."""


CODE_IN_MESSAGE = "error_code_in_message"
"""The Triton request parameter by which a client (the OpenAI front) asks `tt_llm` to put its
error's Triton code at the head of the error's text, as `[INVALID_ARG] top_p must be ...`."""


class CapacityError(RuntimeError):
    """The server is full for now; retry later."""


class UnavailableError(RuntimeError):
    """The engine serves no requests now (failed, or shutting down)."""


def kind_of(exc: BaseException) -> ErrorKind:
    """The kind of an exception raised while taking in a request."""
    if isinstance(exc, CapacityError):
        return ErrorKind.RESOURCE_EXHAUSTED
    if isinstance(exc, UnavailableError):
        return ErrorKind.UNAVAILABLE
    if isinstance(exc, ValueError | TypeError | OverflowError | UnicodeError):
        return ErrorKind.INVALID_ARGUMENT
    return ErrorKind.INTERNAL
