"""Errors as Triton sends them: the error kind decided where the error arose, as a TritonError code,
so HTTP answers 400/503/500 and gRPC clients get the matching status without reading the text.

The Python backend of Triton 2.51 has no RESOURCE_EXHAUSTED code (its TritonError knows UNKNOWN,
INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS and CANCELLED), so a
full server answers UNAVAILABLE (HTTP 503): retryable, as "full" is.
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from tt_backend.contract.errors import ErrorKind, kind_of

_CODES = {ErrorKind.INVALID_ARGUMENT: "INVALID_ARG", ErrorKind.RESOURCE_EXHAUSTED: "UNAVAILABLE",
          ErrorKind.UNAVAILABLE: "UNAVAILABLE", ErrorKind.INTERNAL: "INTERNAL"}


def triton_error(message: str, kind: ErrorKind | None) -> Any:
    """A pb_utils.TritonError with the code of `kind` (INTERNAL when unknown)."""
    return pb_utils.TritonError(message, getattr(pb_utils.TritonError, _CODES[kind or ErrorKind.INTERNAL]))


def error_response(message: str, kind: ErrorKind | None) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[], error=triton_error(message, kind))


def exception_response(exc: BaseException) -> Any:
    """The response for an exception raised while taking in a request (its kind by its class)."""
    return error_response(str(exc), kind_of(exc))
