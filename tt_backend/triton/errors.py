"""Errors as Triton sends them: the error kind decided where the error arose, as a TritonError code,
so HTTP answers 400/503/500 and gRPC clients get the matching status without reading the text.

The Python backend of Triton 2.51 has no RESOURCE_EXHAUSTED code (its TritonError knows UNKNOWN,
INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS and CANCELLED), so a
full server answers UNAVAILABLE (HTTP 503): retryable, as "full" is.

A gRPC stream sends a model's error as text only, unless the client opens it with the header
`triton_grpc_error: true`; in that mode Triton 2.51 crashed (SIGSEGV, SIGABRT) within about 130
concurrent errors, so the OpenAI front does not use it. A request with the parameter
`error_code_in_message: true` gets its error's code at the head of the text instead, as
`[INVALID_ARG] top_p must be ...`; other clients get the text alone.
"""

from __future__ import annotations

import json
from typing import Any

import triton_python_backend_utils as pb_utils

from tt_backend.contract.errors import CODE_IN_MESSAGE, ErrorKind, kind_of

_CODES = {ErrorKind.INVALID_ARGUMENT: "INVALID_ARG", ErrorKind.RESOURCE_EXHAUSTED: "UNAVAILABLE",
          ErrorKind.UNAVAILABLE: "UNAVAILABLE", ErrorKind.INTERNAL: "INTERNAL"}


def wants_code_in_message(request: Any) -> bool:
    """Whether `request` (a pb_utils.InferenceRequest) set the parameter CODE_IN_MESSAGE to true."""
    try:
        parameters = json.loads(request.parameters() or "{}")
    except (AttributeError, TypeError, ValueError):
        return False
    return isinstance(parameters, dict) and parameters.get(CODE_IN_MESSAGE) is True


def code_of(kind: ErrorKind | None) -> str:
    """The TritonError code of `kind` (INTERNAL when unknown)."""
    return _CODES[kind or ErrorKind.INTERNAL]


def coded_error(message: str, code: str, code_in_message: bool = False) -> Any:
    """A pb_utils.TritonError with `code` (a TritonError code name), and that name at the head of
    its text as `[CODE] ` when `code_in_message`."""
    text = f"[{code}] {message}" if code_in_message else message
    return pb_utils.TritonError(text, getattr(pb_utils.TritonError, code))


def triton_error(message: str, kind: ErrorKind | None) -> Any:
    """A pb_utils.TritonError with the code of `kind` (INTERNAL when unknown)."""
    return coded_error(message, code_of(kind))


def error_response(message: str, kind: ErrorKind | None) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[], error=triton_error(message, kind))


def exception_response(exc: BaseException) -> Any:
    """The response for an exception raised while taking in a request (its kind by its class)."""
    return error_response(str(exc), kind_of(exc))
