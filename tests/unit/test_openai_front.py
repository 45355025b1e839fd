"""The OpenAI front without Triton: routes, 400s naming the field, 404 for a model it does not
serve, 503 while Triton cannot be reached (the integration tests run it over tritonserver); and its
hardening: body size, media type and values, templating off the event loop, the Host check, and,
under its real uvicorn server, connection limits and cancelling a request whose client hung up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
import requests
import uvicorn
from fastapi.testclient import TestClient

from tests.fuzz.front_strategies import CHAT_FIELDS, COMPLETION_FIELDS
from tests.fuzz.json_text import ODD_CONTAINERS, ODD_NUMBERS, ODD_STRINGS
from tests.integration.test_openai import BAD
from tt_backend.openai_front import app as app_module
from tt_backend.openai_front.app import FrontConfig, create_app
from tt_backend.openai_front.hosts import AllowedHosts
from tt_backend.openai_front.limits import ServerLimits, uvicorn_config
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.triton_stream import Delta, TritonError

MODEL = "SmolLM2-135M-Instruct"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
           template: Any = None) -> list[int]:
    return [ord(c) for c in "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"]


def decode(ids: tuple[int, ...]) -> str:
    return "".join(map(chr, ids))


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def front_config(**changes: Any) -> FrontConfig:
    return FrontConfig(f"127.0.0.1:{closed_port()}", MODEL, 8192, max_body_bytes=1 << 16, **changes)


@pytest.fixture
def front() -> Iterator[TestClient]:
    with TestClient(create_app(front_config(), render, decode, encode)) as client:
        yield client


def test_models_and_health(front: TestClient) -> None:
    card = {"id": MODEL, "object": "model", "created": 0, "owned_by": "tt_backend", "root": MODEL,
            "parent": None, "max_model_len": 8192}
    assert front.get("/v1/models").json() == {"object": "list", "data": [card]}
    assert front.get(f"/v1/models/{MODEL}").json() == card
    unknown = front.get("/v1/models/org/Other.Model-1.5")
    assert (unknown.status_code, unknown.json()) == (404, {"error": {
        "message": f"the model 'org/Other.Model-1.5' does not exist; this server serves {MODEL!r}",
        "type": "not_found_error", "param": "model", "code": 404}})
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
    assert big.status_code == 413 and "exceeds 65536 bytes" in big.json()["error"]["message"]
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


# --- Hardening: the body, its media type and values, the event loop, Host, connections, hang-ups ---

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
JSON = {"content-type": "application/json"}
NOT_JSON = ("the request body must be JSON sent with Content-Type: application/json "
            "(optionally ; charset=utf-8)")


def test_a_body_over_the_limit_is_413_whether_declared_or_chunked(front: TestClient) -> None:
    declared = front.post("/v1/completions", content=b" " * (1 << 17), headers=JSON)
    assert (declared.status_code, declared.json()["error"]) == (413, {
        "message": "the request body (131072 bytes) exceeds 65536 bytes", "type": "invalid_request_error",
        "param": None, "code": 413})

    def chunks() -> Iterator[bytes]:  # no content-length: sent chunked
        yield from [b" " * (1 << 15)] * 4

    chunked = front.post("/v1/completions", content=chunks(), headers=JSON)
    assert chunked.status_code == 413
    assert chunked.json()["error"]["message"].endswith("bytes) exceeds 65536 bytes")


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=latin-1", "application/jsonl",
                                          "application/json; boundary=x", "multipart/form-data"])
def test_a_body_not_sent_as_json_is_415_naming_its_content_type(front: TestClient,
                                                                 content_type: str | None) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    for route in ("/v1/chat/completions", "/v1/completions", "/tokenize"):
        reply = front.post(route, content=json.dumps({**CHAT, "prompt": "ab"}).encode(), headers=headers)
        shown = "none" if content_type is None else repr(content_type)
        assert (reply.status_code, reply.json()["error"]["message"]) == (415, f"{NOT_JSON}, got {shown}")


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON;charset=UTF-8",
                                          'application/json; charset="utf-8"'])
def test_json_is_taken_as_application_json_with_or_without_utf8_charset(front: TestClient,
                                                                          content_type: str) -> None:
    reply = front.post("/tokenize", content=json.dumps({"model": MODEL, "prompt": "ab"}).encode(),
                       headers={"content-type": content_type})
    assert (reply.status_code, reply.json()["tokens"]) == (200, [97, 98])


LONG = "1" + "0" * 5000  # past Python's 4,300-digit int limit
VALUES: list[tuple[str, str, str, str | None]] = [
    # (route, raw JSON body after "model", param, exact message or None: the field's own check words it)
    ("chat/completions", '"messages": [{"role": "user", "content": "a\\ud800"}]', "messages[0].content",
     "messages[0].content is not valid Unicode: a lone surrogate '\\ud800' at character 1"),
    ("chat/completions", '"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udc80"}]}]',
     "messages[0].content[0].text",
     "messages[0].content[0].text is not valid Unicode: a lone surrogate '\\udc80' at character 0"),
    ("completions", '"prompt": "x\\udfffy"', "prompt",
     "prompt is not valid Unicode: a lone surrogate '\\udfff' at character 1"),
    ("completions", '"prompt": "a", "stop": ["ok", "\\ud800"]', "stop[1]",
     "stop[1] is not valid Unicode: a lone surrogate '\\ud800' at character 0"),
    ("completions", '"prompt": "a", "logit_bias": {"\\ud800": 1}', "logit_bias",
     "logit_bias holds a key that is not valid Unicode: a lone surrogate '\\ud800' at character 0"),
    ("completions", f'"prompt": "a", "max_tokens": {LONG}', "max_tokens",
     "max_tokens is an integer of 5001 digits, more than the 4300 a number may have"),
    ("chat/completions", f'"messages": [{{"role": "user", "content": "hi"}}], "seed": -{LONG}', "seed",
     "seed is an integer of 5001 digits, more than the 4300 a number may have"),
    ("completions", f'"prompt": [1, {2**40}]', "prompt",
     "prompt holds the token id 1099511627776, beyond any token id (INT32)"),
    ("chat/completions", f'"messages": [{{"role": "user", "content": "hi"}}], "logprobs": true, '
     f'"top_logprobs": {2**70}', "top_logprobs",
     "top_logprobs must be an integer within 64 bits, got an integer of 71 bits"),
    ("completions", '"prompt": "a", "metadata": ' + "[" * 70 + "]" * 70,
     "metadata" + "[0]" * 63, "the request body nests too deeply: metadata" + "[0]" * 63
     + " is 64 levels down, more than 64"),
    ("completions", '"prompt": "a", "max_tokens": 1e400', "max_tokens", None),
    ("chat/completions", f'"messages": [{{"role": "user", "content": "hi"}}], "temperature": {10**400}',
     "temperature", None),
    ("completions", f'"prompt": "a", "seed": {2**70}', "seed", None),
    ("completions", f'"prompt": "a", "top_k": {2**63}', "top_k", None),
    ("completions", f'"prompt": "a", "max_tokens": {2**64}', "max_tokens", None),
]


@pytest.mark.parametrize(("route", "raw", "param", "message"), VALUES)
def test_values_no_field_can_hold_are_400s_naming_their_path(front: TestClient, route: str, raw: str,
                                                              param: str, message: str | None) -> None:
    reply = front.post(f"/v1/{route}", content=f'{{"model": "{MODEL}", {raw}}}'.encode(), headers=JSON)
    error = reply.json()["error"]
    assert (reply.status_code, error["param"]) == (400, param), error
    assert error["message"] == message if message is not None else param in error["message"]


def test_tokenize_checks_messages_as_chat_does(front: TestClient) -> None:
    reply = front.post("/tokenize", content=f'{{"model": "{MODEL}", "messages": [{{"role": "user", '
                       f'"content": "\\ud800"}}]}}'.encode(), headers=JSON)
    assert (reply.status_code, reply.json()["error"]["param"]) == (400, "messages[0].content")
    robot = front.post("/tokenize", json={"model": MODEL, "messages": [{"role": "robot", "content": "x"}]})
    assert (robot.status_code, robot.json()["error"]["param"]) == (400, "messages[0].role")


def test_no_json_value_in_any_field_is_a_500(front: TestClient) -> None:
    """Every odd number, string and container of the fuzzer's corpus, in every field of both
    routes: never a 500 (Triton is down here, so a body that passes is a 503)."""
    for route, base, fields in (("chat/completions", '"messages": [{"role": "user", "content": "hi"}]',
                                 CHAT_FIELDS), ("completions", '"prompt": "hi"', COMPLETION_FIELDS)):
        for field in fields:
            for value in (*ODD_NUMBERS, *ODD_STRINGS, *ODD_CONTAINERS):
                body = f'{{"model": "{MODEL}", {base}, {json.dumps(field)}: {value}}}'
                reply = front.post(f"/v1/{route}", content=body.encode(), headers=JSON)
                assert reply.status_code in (400, 404, 503), (route, field, value[:80], reply.text[:300])
                assert "error" in reply.json()


@pytest.mark.parametrize("route", ["/tokenize", "/v1/chat/completions"])
def test_chat_templating_runs_off_the_event_loop(route: str) -> None:
    rendering, release = threading.Event(), threading.Event()

    def slow_render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                    template: Any = None) -> list[int]:
        rendering.set()
        release.wait(10)
        return render(messages, tools)

    with TestClient(create_app(front_config(), slow_render, decode, encode)) as client:
        thread = threading.Thread(target=client.post, args=(route,), kwargs={"json": CHAT})
        thread.start()
        assert rendering.wait(10)
        started = time.monotonic()
        models = client.get("/v1/models")  # served while the template renders
        took = time.monotonic() - started
        release.set()
        thread.join(10)
    assert models.status_code == 200 and took < 2, took


def test_the_host_header_must_be_a_loopback_name_when_bound_to_loopback() -> None:
    allowed = AllowedHosts.for_bind("127.0.0.1", ["api.example.com"])
    assert allowed == AllowedHosts(frozenset({"api.example.com"}))
    with TestClient(create_app(front_config(allowed_hosts=allowed), render, decode, encode)) as client:
        for host in ("localhost", "localhost:9000", "LOCALHOST.", "127.0.0.1", "127.8.9.10:80", "[::1]",
                     "[::1]:9000", "api.example.com", "api.example.com:443"):
            assert client.get("/v1/models", headers={"host": host}).status_code == 200, host
        for host in ("evil.example", "evil.example:9000", "127.0.0.1.evil.example", "10.0.0.1", "[::2]:9000",
                     "localhost:x", "::1", "", "api.example.com.evil"):
            reply = client.get("/v1/models", headers={"host": host})
            assert reply.status_code == 421, host
            assert reply.json()["error"]["message"] == (
                f"the Host header {host!r} is not a name this server answers to (localhost, 127.0.0.1, "
                "[::1], api.example.com, with any port); start the front with --allowed-hosts to add names")
        assert client.post("/v1/completions", json=CHAT, headers={"host": "evil.example"}).status_code == 421


def test_which_binds_check_the_host_header() -> None:
    for bind in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert AllowedHosts.for_bind(bind, []) == AllowedHosts(), bind
    for bind in ("0.0.0.0", "::", "10.1.2.3", "myhost"):
        assert AllowedHosts.for_bind(bind, [""]) is None, bind
    assert AllowedHosts.for_bind("0.0.0.0", ["a.example", "B.example:80"]) == AllowedHosts(
        frozenset({"a.example", "b.example"}))
    with pytest.raises(ValueError, match="--allowed-hosts: 'a b:c' is not a host name or address"):
        AllowedHosts.for_bind("0.0.0.0", ["a b:c"])


@pytest.mark.parametrize(("code", "status"), [
    (grpc.StatusCode.INVALID_ARGUMENT, 400), (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
    (grpc.StatusCode.UNAVAILABLE, 503), (grpc.StatusCode.CANCELLED, 499), (grpc.StatusCode.NOT_FOUND, 404),
    (grpc.StatusCode.UNIMPLEMENTED, 501), (grpc.StatusCode.INTERNAL, 500), (grpc.StatusCode.UNKNOWN, 500),
    (grpc.StatusCode.ALREADY_EXISTS, 500), (None, 500)])
def test_triton_errors_map_to_http_by_status_code(code: grpc.StatusCode | None, status: int) -> None:
    error = TritonError.of_code("capacity; shutting down; not ready; unknown model", code)
    assert (error.status, error.code) == (status, code)  # the words play no part


@contextmanager
def live_front(limits: ServerLimits, config: FrontConfig | None = None) -> Iterator[int]:
    """The front under uvicorn with the front's own protocol and limits on a free port (no Triton)."""
    port = closed_port()
    app = create_app(config or front_config(), render, decode, encode)
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, limits))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the front did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and how long that took."""
    sock.settimeout(timeout)
    start, data = time.monotonic(), b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 16):
            data += chunk
    return data, time.monotonic() - start


FAST = ServerLimits(limit_concurrency=8, timeout_keep_alive=1, timeout_request_head_s=1.5)


def test_an_idle_connection_is_closed_after_the_keep_alive_timeout() -> None:
    with live_front(FAST) as port:
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        for sock in sockets:  # they send nothing at all
            data, took = until_closed(sock, timeout=6)
            assert data == b"" and took < 3
            sock.close()


def test_a_request_head_that_trickles_in_gets_408_at_its_timeout() -> None:
    with live_front(FAST) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        start = time.monotonic()
        sock.settimeout(0.25)
        data = b""
        for byte in b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:
            if time.monotonic() - start > 6:
                break
            with contextlib.suppress(TimeoutError):
                if (chunk := sock.recv(1 << 16)) == b"":
                    break
                data += chunk
            try:
                sock.send(bytes([byte]))  # a byte every 0.25 s: each one resets keep-alive, not this
            except (BrokenPipeError, ConnectionResetError):
                break
        took = time.monotonic() - start
    assert data.startswith(b"HTTP/1.1 408 Request Timeout\r\n") and b"connection: close" in data
    assert json.loads(data.split(b"\r\n\r\n", 1)[1])["error"] == {
        "message": "the request line and headers did not arrive within 1.5 s",
        "type": "invalid_request_error", "param": None, "code": 408}
    assert 1.4 < took < 3.5, took


def test_a_request_head_over_64_kib_gets_431() -> None:
    with live_front(FAST) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (70 << 10))
        data, took = until_closed(sock, timeout=5)
    assert data.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n") and took < 2


def test_requests_over_limit_concurrency_get_503() -> None:
    with live_front(ServerLimits(limit_concurrency=3, timeout_keep_alive=5)) as port:
        url = f"http://127.0.0.1:{port}/v1/models"
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        time.sleep(0.2)
        assert requests.get(url, timeout=10).status_code == 503  # uvicorn's own answer
        for sock in idle:
            sock.close()
        time.sleep(0.2)
        assert requests.get(url, timeout=10).status_code == 200


def test_a_chunked_body_is_refused_as_it_passes_the_limit_and_the_rest_does_not_hold_the_connection() -> None:
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (16 << 10, b" " * (16 << 10))
    with live_front(FAST) as port, socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + chunk * 5)  # 80 KiB of a 64 KiB limit, and the body goes on
        sock.settimeout(3)
        answer = sock.recv(1 << 16)
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
        assert b"the request body (at least 81920 bytes) exceeds 65536 bytes" in answer
        start, closed = time.monotonic(), False
        sock.settimeout(0.1)
        while not closed and time.monotonic() - start < 8:  # keep sending: the server drops it, then closes
            try:
                sock.sendall(chunk)
                closed = sock.recv(1 << 16) == b""
            except TimeoutError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                closed = True
        assert closed and time.monotonic() - start < 4


@pytest.mark.parametrize("first_delta", [True, False])
def test_a_non_streamed_request_is_cancelled_when_its_client_hangs_up(monkeypatch: pytest.MonkeyPatch,
                                                                      first_delta: bool) -> None:
    started, closed = threading.Event(), threading.Event()

    async def endless(client: Any, model: str, call: GenerateCall) -> AsyncIterator[Delta]:
        started.set()
        try:
            while True:  # a generation that would go on long after the client left
                await asyncio.sleep(0.05 if first_delta else 3600)
                yield Delta("x", 1, num_prompt_tokens=1)
        finally:
            closed.set()

    monkeypatch.setattr(app_module, "stream", endless)
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 4}).encode()
    with live_front(FAST) as port:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: "
                         b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            assert started.wait(5)
            time.sleep(0.3)
        assert closed.wait(2), "the generation went on after its client hung up"
