"""tt_llm's response thread: every request's stream ends with exactly one final response, with the
error code of its error kind, even when building a response fails.

`triton_python_backend_utils` exists only inside tritonserver's stub, so a small stand-in holds the
few names the response thread uses: `TritonError(message, code)` with the code constants of the
2.51 Python backend (read from its stub's symbols: no RESOURCE_EXHAUSTED), `InferenceResponse`,
`Tensor` and the final flag. The integration tests (test_containment.py) check the same codes
through the real tritonserver."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tt_backend.contract.errors import ErrorKind
from tt_backend.contract.modes import FinishReason
from tt_backend.engine.outputs import RequestOutput

FINAL = 1


class _TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1) -> None:
        self.message, self.code = message, code


class _Response:
    def __init__(self, output_tensors: list[Any], error: _TritonError | None = None) -> None:
        self.output_tensors, self.error = output_tensors, error


class _Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, int]] = []

    def send(self, response: Any = None, flags: int = 0) -> None:
        self.sent.append((response, flags))


@pytest.fixture
def llm_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    fake = types.ModuleType("triton_python_backend_utils")
    fake.TritonError = _TritonError  # type: ignore[attr-defined]
    fake.InferenceResponse = _Response  # type: ignore[attr-defined]
    fake.Tensor = lambda name, value: (name, value)  # type: ignore[attr-defined]
    fake.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    for name in ("tt_backend.triton.llm_model", "tt_backend.triton.errors"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import tt_backend.triton.llm_model as module
    yield module
    for name in ("tt_backend.triton.llm_model", "tt_backend.triton.errors"):
        sys.modules.pop(name, None)


class _Engine:
    def __init__(self) -> None:
        self.aborted: list[str] = []

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


class _Builder:
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def on_output(self, out: RequestOutput) -> dict[str, Any] | None:
        if self.fail:
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return {"text_output": out.text}


def model_with(module: Any, *requests: tuple[str, bool], code_in_message: bool = False
               ) -> tuple[Any, dict[str, _Sender]]:
    model = module.TritonPythonModel()
    model.engine = _Engine()
    model._live = {}
    senders = {}
    for request_id, fail in requests:
        senders[request_id] = _Sender()
        model._live[request_id] = module._Live(senders[request_id], _Builder(fail), code_in_message)
    return model, senders


def output(request_id: str, finish: FinishReason | None = None, error: str | None = None,
           kind: ErrorKind | None = None) -> RequestOutput:
    return RequestOutput(request_id, (1,), (), "x", 3, finish, error, error_kind=kind)


def test_a_response_that_fails_to_build_still_ends_its_stream(llm_model: Any) -> None:
    model, senders = model_with(llm_model, ("bad", True), ("good", False))
    model._handle(llm_model._Output(output("bad")))  # not finished: the engine must drop it
    model._handle(llm_model._Output(output("good")))
    [(response, flags)] = senders["bad"].sent
    assert flags == FINAL and response.output_tensors == []
    assert response.error.code == _TritonError.INTERNAL
    assert response.error.message.startswith("building the response failed: 'utf-8' codec can't encode")
    assert model.engine.aborted == ["bad"] and "bad" not in model._live
    model._handle(llm_model._Output(output("bad", FinishReason.ABORT)))  # the abort's output: dropped
    assert len(senders["bad"].sent) == 1
    assert senders["good"].sent == [(senders["good"].sent[0][0], 0)]
    assert "good" in model._live


@pytest.mark.parametrize("kind, code", [
    (ErrorKind.INVALID_ARGUMENT, _TritonError.INVALID_ARG), (ErrorKind.UNAVAILABLE, _TritonError.UNAVAILABLE),
    (ErrorKind.RESOURCE_EXHAUSTED, _TritonError.UNAVAILABLE), (ErrorKind.INTERNAL, _TritonError.INTERNAL),
    (None, _TritonError.INTERNAL)])
def test_errors_carry_the_code_of_their_kind(llm_model: Any, kind: ErrorKind | None, code: int) -> None:
    model, senders = model_with(llm_model, ("r", False))
    model._handle(llm_model._Output(output("r", FinishReason.ERROR, "structured_outputs: bad", kind)))
    [(response, flags)] = senders["r"].sent
    assert (response.error.message, response.error.code, flags) == ("structured_outputs: bad", code, FINAL)


def test_refusals_at_intake_carry_the_code_of_their_exception(llm_model: Any) -> None:
    from tt_backend.contract.errors import CapacityError, UnavailableError

    model, _ = model_with(llm_model)
    codes = []
    for exc in (ValueError("top_p must be in (0, 1], got 5.0"), CapacityError("full"),
                UnavailableError("shutting down"), OverflowError("too big"), KeyError("ours")):
        sender = _Sender()
        model._handle(llm_model._Reject(sender, str(exc), "x", llm_model.kind_of(exc), False))
        [(response, flags)] = sender.sent
        assert flags == FINAL
        codes.append(response.error.code)
    assert codes == [_TritonError.INVALID_ARG, _TritonError.UNAVAILABLE, _TritonError.UNAVAILABLE,
                     _TritonError.INVALID_ARG, _TritonError.INTERNAL]


class _Request:
    def __init__(self, parameters: str) -> None:
        self._parameters = parameters

    def parameters(self) -> str:
        return self._parameters


def test_a_request_asks_for_the_code_in_the_message_only_with_the_parameter_true(llm_model: Any) -> None:
    from tt_backend.triton.errors import wants_code_in_message

    asked = [wants_code_in_message(_Request(p)) for p in (
        '{"error_code_in_message": true}', '{}', "", '{"error_code_in_message": "true"}',
        '{"error_code_in_message": 1}', "not json", "[1]")]
    assert asked == [True, False, False, False, False, False, False]


def test_errors_asked_with_their_code_carry_it_at_the_head_of_the_text(llm_model: Any) -> None:
    """The OpenAI front's requests (errors.CODE_IN_MESSAGE): every way a request ends in error."""
    model, senders = model_with(llm_model, ("bad", False), ("cancelled", False), ("aborted", False),
                                code_in_message=True)
    model._live["cancelled"].cancel_requested = True
    model._handle(llm_model._Output(output("bad", FinishReason.ERROR, "bad_words: bad",
                                           ErrorKind.INVALID_ARGUMENT)))
    model._handle(llm_model._Output(output("cancelled", FinishReason.ABORT)))
    model._handle(llm_model._Output(output("aborted", FinishReason.ABORT)))
    refused = _Sender()
    model._handle(llm_model._Reject(refused, "top_p must be in (0, 1], got 5.0", "x",
                                    ErrorKind.INVALID_ARGUMENT, True))
    sent = {name: sender.sent for name, sender in {**senders, "refused": refused}.items()}
    assert {name: [(r.error.message, r.error.code, flags) for r, flags in s] for name, s in sent.items()} == {
        "bad": [("[INVALID_ARG] bad_words: bad", _TritonError.INVALID_ARG, FINAL)],
        "cancelled": [("[CANCELLED] Request was cancelled", _TritonError.CANCELLED, FINAL)],
        "aborted": [("[UNAVAILABLE] request aborted: the model is shutting down", _TritonError.UNAVAILABLE,
                     FINAL)],
        "refused": [("[INVALID_ARG] top_p must be in (0, 1], got 5.0", _TritonError.INVALID_ARG, FINAL)]}
