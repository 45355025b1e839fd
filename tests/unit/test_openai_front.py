"""The OpenAI front without a server: routes, 400s naming the field, 404 for a model it does not
serve, and 503 while Triton cannot be reached (the integration tests run it over tritonserver)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.test_openai import BAD
from tt_backend.openai_front import app as app_module
from tt_backend.openai_front.app import FrontConfig, create_app
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.triton_stream import Delta, TritonError

MODEL = "SmolLM2-135M-Instruct"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def front() -> Iterator[TestClient]:
    config = FrontConfig(f"127.0.0.1:{closed_port()}", MODEL, 8192, max_body_bytes=1 << 16)

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        return [ord(c) for c in "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"]

    def decode(ids: tuple[int, ...]) -> str:
        return "".join(map(chr, ids))

    def encode(text: str) -> list[int]:
        return [ord(c) for c in text]

    with TestClient(create_app(config, render, decode, encode)) as client:
        yield client


def test_models_and_health(front: TestClient) -> None:
    assert front.get("/v1/models").json()["data"] == [
        {"id": MODEL, "object": "model", "created": 0, "owned_by": "tt_backend", "max_model_len": 8192}]
    assert front.get("/health").status_code == 503  # no Triton behind it


def test_tokenize_gives_the_ids_a_request_would_send(front: TestClient) -> None:
    chat = front.post("/tokenize", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                         "add_generation_prompt": True})
    ids = [ord(c) for c in "<user>hi<assistant>"]
    assert (chat.status_code, chat.json()) == (200, {"count": len(ids), "max_model_len": 8192, "tokens": ids,
                                                     "token_strs": None})
    prompt = front.post("/tokenize", json={"model": MODEL, "prompt": "ab"})
    assert prompt.json()["tokens"] == [97, 98]
    assert front.post("/tokenize", json={"model": "other", "prompt": "ab"}).status_code == 404
    bad = front.post("/tokenize", json={"model": MODEL})
    assert (bad.status_code, bad.json()["error"]["param"]) == (400, "messages")


@pytest.mark.parametrize(("change", "field"), BAD)
def test_a_bad_chat_field_is_a_400_naming_it(front: TestClient, change: dict[str, Any], field: str) -> None:
    reply = front.post("/v1/chat/completions",
                       json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **change})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["param"], error["type"], error["code"]) == (field, "invalid_request_error", 400)
    assert field.split("[")[0] in error["message"]


@pytest.mark.parametrize(("body", "field"), [
    ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": [[1], [2]]}, "prompt"), ({"prompt": None}, "prompt"),
    ({"prompt": []}, "prompt"), ({"prompt": [1, "a"]}, "prompt"), ({"prompt": [True]}, "prompt"),
    ({"prompt": [1.5]}, "prompt"),
    ({"prompt": "hi", "suffix": "!"}, "suffix"), ({"prompt": "hi", "echo": 1}, "echo"),
    ({"prompt": "hi", "logprobs": 21}, "logprobs"), ({"prompt": "hi", "best_of": 2}, "best_of"),
])
def test_a_bad_completion_field_is_a_400_naming_it(front: TestClient, body: dict[str, Any],
                                                   field: str) -> None:
    reply = front.post("/v1/completions", json={"model": MODEL, **body})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == field


def test_unknown_model_bad_json_big_bodies_and_no_triton(front: TestClient) -> None:
    reply = front.post("/v1/chat/completions", json={"model": "gpt-4", "messages": []})
    assert reply.status_code == 404 and reply.json()["error"]["param"] == "model"
    assert front.post("/v1/completions", content=b"{oops", headers={"Content-Type": "application/json"}
                      ).status_code == 400
    big = front.post("/v1/completions", json={"model": MODEL, "prompt": "x" * (1 << 17)})
    assert big.status_code == 400 and "exceeds 65536 bytes" in big.json()["error"]["message"]
    down = front.post("/v1/chat/completions",
                      json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert down.status_code == 503 and down.json()["error"]["type"] == "server_error"


@pytest.fixture
def triton_calls(monkeypatch: pytest.MonkeyPatch) -> list[GenerateCall]:
    """Triton replaced by a stream of two deltas that then fails: what a backend error mid-stream
    looks like to the front. Records the calls the front makes."""
    calls: list[GenerateCall] = []

    async def failing(client: Any, model: str, call: GenerateCall) -> AsyncIterator[Delta]:
        calls.append(call)
        yield Delta("Hel", 1, num_prompt_tokens=len(call.prompt))
        yield Delta("lo", 1)
        raise TritonError("engine failed: the step raised", 500)

    monkeypatch.setattr(app_module, "stream", failing)
    return calls


def test_a_backend_error_mid_stream_ends_it_with_an_error_event_then_done(
        front: TestClient, triton_calls: list[GenerateCall]) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    with front.stream("POST", "/v1/chat/completions", json=body) as reply:
        assert reply.status_code == 200
        lines = [line for line in reply.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert [e["choices"][0]["delta"].get("content") for e in events[:2]] == ["Hel", "lo"]
    assert events[2] == {"error": {"message": "engine failed: the step raised", "type": "server_error",
                                   "param": None, "code": 500}}
    assert len(events) == 3
    # The chat template renders to token ids; the front sends them as they are.
    assert triton_calls[0].prompt == tuple(ord(c) for c in "<user>hi<assistant>")
    whole = front.post("/v1/chat/completions", json={**body, "stream": False})
    assert whole.status_code == 500 and whole.json()["error"]["message"] == "engine failed: the step raised"


def test_a_prompt_of_token_ids_is_sent_as_ids_and_echoed_as_text(
        front: TestClient, triton_calls: list[GenerateCall]) -> None:
    for prompt in ([72, 105], [[72, 105]]):
        reply = front.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "echo": True,
                                                    "max_tokens": 2, "stream": True})
        first = json.loads(next(line for line in reply.iter_lines() if line)[6:])
        assert first["choices"][0]["text"] == "HiHel"  # the prompt decoded, then the first delta
    assert [c.prompt for c in triton_calls] == [(72, 105), (72, 105)]
    text = front.post("/v1/completions", json={"model": MODEL, "prompt": ["Hi"], "max_tokens": 2})
    assert text.status_code == 500 and triton_calls[-1].prompt == "Hi"


# What vllm-router (the cluster's router) adds to every request it forwards, at these values
# (captured from vllm-router 0.1.x in front of a recording server).
ROUTER_CHAT = {"logprobs": False, "no_stop_trim": False, "ignore_eos": False, "continue_final_message": False,
               "skip_special_tokens": True, "separate_reasoning": True, "stream_reasoning": True,
               "return_hidden_states": False, "include_reasoning": True}
ROUTER_COMPLETION = {"echo": False, "no_stop_trim": False, "ignore_eos": False, "skip_special_tokens": True,
                     "return_hidden_states": False}


def test_the_fields_the_router_adds_at_their_defaults_are_accepted(front: TestClient) -> None:
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    completion = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
    for route, body, extra in (("chat/completions", chat, ROUTER_CHAT),
                               ("completions", completion, ROUTER_COMPLETION)):
        plain = front.post(f"/v1/{route}", json=body)
        routed = front.post(f"/v1/{route}", json={**body, **extra})
        # past validation to the (absent) Triton: the same answer as without the router's fields
        assert (routed.status_code, routed.json()) == (plain.status_code, plain.json())
        assert routed.status_code != 400


@pytest.mark.parametrize(("field", "value", "message"), [
    ("include_reasoning", False, "include_reasoning=false is not supported (only its default, true)"),
    ("no_stop_trim", True, "no_stop_trim=true is not supported (only its default, false)"),
    ("return_hidden_states", 1, "return_hidden_states=1 is not supported (only its default, false)"),
])
def test_a_router_field_away_from_its_default_is_a_400_naming_it(front: TestClient, field: str, value: Any,
                                                                  message: str) -> None:
    reply = front.post("/v1/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], field: value})
    assert reply.status_code == 400
    assert (reply.json()["error"]["param"], reply.json()["error"]["message"]) == (field, message)
