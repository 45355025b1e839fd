"""How the OpenAI front ends a tt_llm gRPC call: after the final response it closes the request side
and drains the call (a cancel after the final response left tritonserver 2.51 holding tt_llm, so
that every stop waited out its 30 s exit timeout); a call left early is cancelled. A fake of
tritonclient's asyncio stream: an async iterator of (result, error) that ends once the request side
has ended, with `cancel()`. An error comes as text (the stream opens without `triton_grpc_error`,
which crashed Triton 2.51), its code at its head because the front asks tt_llm for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest

from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.triton_stream import Delta, TritonError, stream


class _Param:
    def __init__(self, final: bool) -> None:
        self.bool_param = final


class _Response:
    def __init__(self, final: bool) -> None:
        self.parameters = {"triton_final_response": _Param(final)}


class _Result:
    """A response with `text`, or the empty final response (`text` None)."""

    def __init__(self, text: str | None, final: bool, reason: str | None = None) -> None:
        self.final = final
        self.arrays: dict[str, np.ndarray] = {}
        if text is not None:
            self.arrays = {"text_output": np.array([text.encode()], dtype=np.object_),
                           "num_output_tokens": np.array([1], dtype=np.int32)}
            if reason is not None:
                self.arrays["finish_reason"] = np.array([reason.encode()], dtype=np.object_)

    def as_numpy(self, name: str) -> np.ndarray | None:
        return self.arrays.get(name)

    def get_response(self) -> _Response:
        return _Response(self.final)


class _Error:
    """An error response as tritonclient gives it over a stream without `triton_grpc_error`."""

    def __init__(self, text: str) -> None:
        self.text = text

    def message(self) -> str:
        return self.text


class _Call:
    """Yields `results`, then ends only once the request side has ended (as Triton ends a call)."""

    def __init__(self, requests: AsyncIterator[dict[str, Any]], results: list[_Result | _Error]) -> None:
        self.requests = requests
        self.results = results
        self.sent: list[dict[str, Any]] = []
        self.cancelled = False
        self.request_side_ended = False

    def __aiter__(self) -> _Call:
        return self

    async def __anext__(self) -> tuple[_Result | None, _Error | None]:
        if self.results:
            if len(self.results) == 1:
                asyncio.get_running_loop().create_task(self._read_requests())
            item = self.results.pop(0)
            return (None, item) if isinstance(item, _Error) else (item, None)
        for _ in range(100):  # the request side must end, or the call never would
            if self.request_side_ended:
                raise StopAsyncIteration
            await asyncio.sleep(0.001)
        raise AssertionError("the request side stayed open after the final response")

    async def _read_requests(self) -> None:
        async for request in self.requests:
            self.sent.append(request)
        self.request_side_ended = True

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class _Client:
    def __init__(self, results: list[_Result | _Error]) -> None:
        self.results = results
        self.call: _Call | None = None

    def stream_infer(self, requests: AsyncIterator[dict[str, Any]],
                     headers: dict[str, str] | None = None) -> _Call:
        assert headers is None, headers  # no triton_grpc_error
        self.call = _Call(requests, self.results)
        return self.call


CALL = GenerateCall(prompt="Hi", sampling={"max_tokens": 2}, stream=True, include_usage=False, logprobs=None)


async def _all(client: _Client) -> list[Delta]:
    return [delta async for delta in stream(client, "tt_llm", CALL)]  # type: ignore[arg-type]


def test_a_finished_call_is_drained_not_cancelled() -> None:
    client = _Client([_Result("Hel", False), _Result("lo", False, "length"), _Result(None, True)])
    deltas = asyncio.run(_all(client))
    assert [(d.text, d.finish_reason) for d in deltas] == [("Hel", None), ("lo", "length")]
    assert client.call is not None and client.call.request_side_ended and not client.call.cancelled


def test_a_final_response_with_text_is_the_last_delta_after_the_drain() -> None:
    client = _Client([_Result("Hel", False), _Result("lo", True, "stop")])
    deltas = asyncio.run(_all(client))
    assert [(d.text, d.finish_reason) for d in deltas] == [("Hel", None), ("lo", "stop")]
    assert client.call is not None and not client.call.cancelled


def test_a_call_left_early_is_cancelled() -> None:
    client = _Client([_Result("Hel", False), _Result("lo", False), _Result(None, True)])

    async def first_only() -> list[Delta]:
        got = []
        generator = stream(client, "tt_llm", CALL)  # type: ignore[arg-type]
        async for delta in generator:
            got.append(delta)
            break
        await generator.aclose()  # what the front's response does when the HTTP client goes away
        return got

    assert [d.text for d in asyncio.run(first_only())] == ["Hel"]
    assert client.call is not None and client.call.cancelled


def test_a_coded_error_maps_by_its_code_and_its_call_is_drained() -> None:
    """tt_llm's `[INVALID_ARG] ...` is a 400 with the words after the code; the request asked for
    the code (parameter error_code_in_message), and the call ends as a finished one does."""
    client = _Client([_Error("[INVALID_ARG] top_p must be in (0, 1], got 5")])
    with pytest.raises(TritonError) as raised:
        asyncio.run(_all(client))
    assert (str(raised.value), raised.value.code, raised.value.status) == (
        "top_p must be in (0, 1], got 5", grpc.StatusCode.INVALID_ARGUMENT, 400)
    assert client.call is not None and client.call.request_side_ended and not client.call.cancelled
    assert client.call.sent[0]["parameters"] == {"error_code_in_message": True}


@pytest.mark.parametrize(("text", "message", "code", "status"), [
    ("[UNAVAILABLE] the server is full", "the server is full", grpc.StatusCode.UNAVAILABLE, 503),
    ("[CANCELLED] Request was cancelled", "Request was cancelled", grpc.StatusCode.CANCELLED, 499),
    ("[INTERNAL] step failed", "step failed", grpc.StatusCode.INTERNAL, 500),
    ("[UNSUPPORTED] no", "no", grpc.StatusCode.UNIMPLEMENTED, 501),
    ("[INVALID_ARG] two\nlines", "two\nlines", grpc.StatusCode.INVALID_ARGUMENT, 400),
    # Triton's own refusals carry no code; neither does an unknown name or a tag not at the head
    ("unknown model: 'x'", "unknown model: 'x'", None, 500),
    ("[BOGUS] text", "[BOGUS] text", None, 500),
    ("bad value '[INVALID_ARG] x'", "bad value '[INVALID_ARG] x'", None, 500),
])
def test_an_error_text_maps_by_the_code_at_its_head_only(text: str, message: str,
                                                         code: grpc.StatusCode | None, status: int) -> None:
    error = TritonError.of_text(text)
    assert (str(error), error.code, error.status) == (message, code, status)


def test_deltas_before_an_error_come_out_then_the_error() -> None:
    client = _Client([_Result("Hel", False), _Error("[UNAVAILABLE] engine failed: boom")])
    got: list[str] = []

    async def run() -> None:
        async for delta in stream(client, "tt_llm", CALL):  # type: ignore[arg-type]
            got.append(delta.text)

    with pytest.raises(TritonError, match="^engine failed: boom$"):
        asyncio.run(run())
    assert got == ["Hel"]
    assert client.call is not None and not client.call.cancelled
