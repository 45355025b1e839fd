"""The OpenAI front without a server: routes, 400s naming the field, 404 for a model it does not
serve, and 503 while Triton cannot be reached (the integration tests run it over tritonserver)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.integration.test_openai import BAD
from tt_backend.openai_front.app import FrontConfig, create_app

MODEL = "SmolLM2-135M-Instruct"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def front() -> Iterator[TestClient]:
    config = FrontConfig(f"127.0.0.1:{closed_port()}", MODEL, 8192, max_body_bytes=1 << 16)

    def render(messages: list[dict[str, Any]]) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    with TestClient(create_app(config, render, len)) as client:
        yield client


def test_models_and_health(front: TestClient) -> None:
    assert front.get("/v1/models").json()["data"] == [
        {"id": MODEL, "object": "model", "created": 0, "owned_by": "tt_backend", "max_model_len": 8192}]
    assert front.get("/health").status_code == 503  # no Triton behind it


@pytest.mark.parametrize(("change", "field"), BAD)
def test_a_bad_chat_field_is_a_400_naming_it(front: TestClient, change: dict[str, Any], field: str) -> None:
    reply = front.post("/v1/chat/completions",
                       json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **change})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["param"], error["type"], error["code"]) == (field, "invalid_request_error", 400)
    assert field.split("[")[0] in error["message"]


@pytest.mark.parametrize(("body", "field"), [
    ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": [1, 2, 3]}, "prompt"), ({"prompt": None}, "prompt"),
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
