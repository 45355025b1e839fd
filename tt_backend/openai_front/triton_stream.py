"""One `tt_llm` stream over tritonclient's asyncio gRPC client, as a stream of text deltas.

`tt_llm` takes the vllm_backend schema: `text_input` (or `input_ids` with `return_text_output`,
for a prompt of token ids), `image` (base64 files, a chat's images), `sampling_parameters` (JSON),
`stream`, and the `return_*` flags for the finish reason, the server's token counts and logprobs.
The request side of the gRPC stream stays open until the final response arrives, then closes, and
Triton ends the call. Leaving the iteration early (the HTTP client went away) cancels the call, and
Triton ends the request. A call is never cancelled after its final response: with tritonserver 2.51
that left tt_llm held after the request ended, so that a stop waited out Triton's 30 s exit timeout
(seen in about half the stops after 40 such calls).

Errors map to HTTP statuses by their code, never by their words. Over a stream Triton sends a
model's error as text only; the front asks `tt_llm` (the request parameter `error_code_in_message`)
to put the error's Triton code at the head of that text, `[INVALID_ARG] top_p must be ...`, and maps
the code (INVALID_ARG → 400, UNAVAILABLE → 503, CANCELLED → 499, ...); the client sees the text
after it. What Triton refuses before the model sees it (an unknown model, a bad tensor) comes
without a code, and is a 500: the front built that request. An error is always tt_llm's final
response, so the call is drained after it as after any final response.

The stream does not open with `triton_grpc_error: true` (which would end it with the error's gRPC
status): through the front, Triton 2.51 in that mode crashed (SIGSEGV, SIGABRT) within about 130
errors from 8 concurrent clients, and logged "[INTERNAL] HandleCancellation called even when the
context was not cancelled" for every error. Its stream handler finishes the call on the first
error while the request's state may still be in use; upstream fixed a use-after-free there in
triton-inference-server/server c1b7cb73c (2026).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from tt_backend.contract.errors import CODE_IN_MESSAGE
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.text.images import ImageInput

_IDS = itertools.count()
_CODED = re.compile(r"\[([A-Z_]+)\] (.*)", re.DOTALL)
"""A tt_llm error asked for with its code: `[CODE] message`."""
_TRITON_CODES = {
    "INVALID_ARG": grpc.StatusCode.INVALID_ARGUMENT,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "CANCELLED": grpc.StatusCode.CANCELLED,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "UNSUPPORTED": grpc.StatusCode.UNIMPLEMENTED,
    "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "INTERNAL": grpc.StatusCode.INTERNAL,
    "UNKNOWN": grpc.StatusCode.UNKNOWN,
}
"""A TritonError code → the gRPC status Triton gives it (as its error mode maps them)."""
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}
"""gRPC status → HTTP status (any other code: 500)."""


@dataclass(frozen=True)
class Delta:
    text: str
    num_tokens: int
    """Tokens this delta holds (the server's count)."""
    num_prompt_tokens: int | None = None
    finish_reason: str | None = None
    logprobs: tuple[dict[str, Any], ...] = ()
    """Per token: {token id: {logprob, rank, decoded_token}}, the sampled token first."""


class TritonError(RuntimeError):
    """Triton refused or failed the request; `status` is the HTTP status to answer with, from
    `code`, the gRPC status (None: an error Triton sent as text only)."""

    def __init__(self, message: str, status: int, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    @classmethod
    def of_code(cls, message: str, code: grpc.StatusCode | None) -> TritonError:
        return cls(message, _HTTP_STATUS.get(code, 500) if code is not None else 500, code)

    @classmethod
    def of_text(cls, text: str) -> TritonError:
        """An error a stream sent as text: its code from the `[CODE] ` tt_llm put at its head, if
        any (else no code: Triton refused the request itself)."""
        coded = _CODED.fullmatch(text)
        if coded is None or coded[1] not in _TRITON_CODES:
            return cls.of_code(text, None)
        return cls.of_code(coded[2], _TRITON_CODES[coded[1]])


def _input(name: str, value: np.ndarray, dtype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(value.shape), dtype)
    tensor.set_data_from_numpy(value)
    return tensor


def _text(value: str) -> np.ndarray:
    return np.array([value.encode("utf-8")], dtype=np.object_)


def image_tensor(images: tuple[ImageInput, ...]) -> np.ndarray:
    """vllm_backend's `image`: one base64-encoded file per element, in the prompt's order."""
    return np.array([image.base64().encode("ascii") for image in images], dtype=np.object_)


async def stream(client: grpcclient.InferenceServerClient, model: str, call: GenerateCall
                 ) -> AsyncGenerator[Delta, None]:
    """The deltas of one generation, the last with its finish reason."""
    prompt = (_input("text_input", _text(call.prompt), "BYTES") if isinstance(call.prompt, str)
              else _input("input_ids", np.array(call.prompt, dtype=np.int32), "INT32"))
    inputs = [
        prompt,
        _input("sampling_parameters", _text(json.dumps(call.sampling)), "BYTES"),
        _input("stream", np.array([True]), "BOOL"),
        _input("exclude_input_in_output", np.array([True]), "BOOL"),
        *(_input(flag, np.array([True]), "BOOL") for flag in
          ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")),
    ]
    if not isinstance(call.prompt, str):
        inputs.append(_input("return_text_output", np.array([True]), "BOOL"))
    if call.images:
        inputs.append(_input("image", image_tensor(call.images), "BYTES"))
    if call.logprobs is not None:
        inputs.append(_input("return_logprobs", np.array([True]), "BOOL"))
    finished = asyncio.Event()

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": model, "inputs": inputs, "request_id": f"openai-{next(_IDS)}",
               "enable_empty_final_response": True, "parameters": {CODE_IN_MESSAGE: True}}
        await finished.wait()  # keep the request side open until the last response

    # The final delta is yielded once the call has ended (see the module's docstring).
    responses = client.stream_infer(requests())
    last: Delta | None = None
    failed: TritonError | None = None
    drained = False
    try:
        async for result, error in responses:
            if error is not None:  # tt_llm's error (its final response), or Triton's refusal
                failed = TritonError.of_text(error.message() or str(error))
                finished.set()
                continue
            out = _delta(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                finished.set()
                last = out
            elif out is not None:
                yield out
        drained = True
    except grpc.aio.AioRpcError as exc:  # Triton unreachable, or the call broke
        raise TritonError.of_code(exc.details() or str(exc.code()), exc.code()) from None
    except InferenceServerException as exc:  # the stream could not start: its status is a code's name
        name = str(exc.status() or "").removeprefix("StatusCode.")
        raise TritonError.of_code(exc.message() or str(exc), grpc.StatusCode.__members__.get(name)) from None
    finally:
        finished.set()
        if not drained:
            responses.cancel()
    if failed is not None:
        raise failed
    if last is not None:
        yield last


def _delta(result: Any) -> Delta | None:
    text = result.as_numpy("text_output")
    if text is None:
        return None  # the empty final response
    reason = result.as_numpy("finish_reason")
    prompt = result.as_numpy("num_input_tokens")
    logprobs = result.as_numpy("logprobs")
    finish = None if reason is None else reason.reshape(-1)[0].decode()
    num_tokens = int(result.as_numpy("num_output_tokens").reshape(-1)[0])
    return Delta(text.reshape(-1)[0].decode("utf-8"), num_tokens,
                 None if prompt is None else int(prompt.reshape(-1)[0]),
                 None if finish in (None, "None") else finish,
                 () if logprobs is None else tuple(json.loads(logprobs.reshape(-1)[0].decode())))
