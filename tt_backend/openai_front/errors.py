"""The front's request errors: an HTTP status in OpenAI's error shape, `param` naming the field."""

from __future__ import annotations


class RequestError(ValueError):
    """A request the front refuses: `status` is the HTTP status, `param` the field (None: the
    request as a whole, e.g. its body or its headers)."""

    def __init__(self, message: str, status: int, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


class BadRequest(RequestError):
    """An invalid request: HTTP 400, `param` naming the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message, 400, param)
