"""The front's request error: HTTP 400 in OpenAI's shape, `param` naming the field."""

from __future__ import annotations


class BadRequest(ValueError):
    """An invalid request: HTTP 400 with OpenAI's error shape, `param` naming the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
