"""The OpenAI front's limits against a real tritonserver (the session server, started by
scripts/serve.sh): bodies over 4 MiB (declared or chunked) are 413s, JSON only as
application/json, sockets that send nothing or half a request line are closed, the Host check of a
loopback bind, a non-streamed request whose client hangs up is aborted in the engine, and tt_llm's
errors reach HTTP by their code (tt_llm puts it at the head of the error's text when the front asks;
the stream does not open with `triton_grpc_error: true`, whose mode crashed Triton 2.51).
A second front, started with its CLI flags, checks --limit-concurrency, --timeout-keep-alive,
--timeout-request-head and --allowed-hosts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
import requests
import tritonclient.grpc.aio as grpcclient

from tests.integration.clients import idle_scrape, scrape, series, wait_for_metrics
from tests.integration.conftest import ROOT, Server, free_ports
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.triton_stream import TritonError, stream

pytestmark = pytest.mark.integration
MODEL = "SmolLM2-135M-Instruct"
CHAT: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                        "temperature": 0}


def address(server: Server) -> tuple[str, int]:
    assert server.openai is not None
    host, port = server.openai.removeprefix("http://").removesuffix("/v1").rsplit(":", 1)
    return host, int(port)


def until_closed(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes the connection (socket timeout if it does not)."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 16):
            data += chunk
    return data


def one_response(sock: socket.socket, timeout: float) -> bytes:
    """One whole HTTP response (head and Content-Length body): the server may write its head and
    body in separate segments, so one recv can hold only the head."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    while length is not None and len(body) < int(length[1]):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def running(metrics: str) -> float:
    return sum(v for k, v in scrape(metrics).items() if k.startswith("vllm:num_requests_running{"))


def test_errors_from_many_clients_at_once_leave_tritonserver_up(server: Server) -> None:
    """400 tt_llm errors and 200 generations from 8 clients at once through the front. With the
    stream in Triton's `triton_grpc_error` mode, Triton 2.51 died (SIGSEGV or SIGABRT; the
    supervisor restarted it) within about 130 such errors; now every error is a 400 naming its
    value, every generation a 200, and tritonserver never exits."""
    assert server.openai is not None
    exits_before = server.log_text().count("[supervise] tritonserver exited")
    bad = {"model": MODEL, "prompt": [1, 99999], "max_tokens": 2}
    good = {"model": MODEL, "prompt": "Hi", "max_tokens": 2}

    def client(i: int) -> list[tuple[int, str]]:
        with requests.Session() as session:
            got = []
            for k in range(75):
                body = {**(good if k % 3 == 2 else bad), "stream": (i + k) % 2 == 0}
                reply = session.post(f"{server.openai}/completions", json=body, timeout=120)
                got.append((reply.status_code, reply.json()["error"]["message"] if reply.status_code != 200
                            else "ok"))
            return got

    with ThreadPoolExecutor(8) as pool:
        replies = [r for rs in pool.map(client, range(8)) for r in rs]
    refused = (400, "input_ids hold 99999, outside the vocabulary [0, 49152)")
    assert sorted(set(replies)) == [(200, "ok"), refused]
    assert replies.count((200, "ok")) == 200
    assert server.log_text().count("[supervise] tritonserver exited") == exits_before


def test_a_body_over_4_mib_is_413_declared_or_chunked(server: Server) -> None:
    assert server.openai is not None
    declared = requests.post(f"{server.openai}/completions", data=b" " * (5 << 20), timeout=60,
                             headers={"content-type": "application/json"})
    assert (declared.status_code, declared.json()["error"]["message"]) == (
        413, "the request body (5242880 bytes) exceeds 4194304 bytes")
    host, port = address(server)
    with socket.create_connection((host, port)) as sock:  # chunked, and it never ends
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
        for _ in range(5):
            sock.sendall(chunk)
        answer = one_response(sock, timeout=10)  # answered before the body ends
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["error"]["code"] == 413
    counted = re.fullmatch(r"the request body \(at least (\d+) bytes\) exceeds 4194304 bytes",
                           body["error"]["message"])
    assert counted is not None and 4194304 < int(counted[1]) <= 5 << 20, body  # refused as it passed 4 MiB


def test_only_application_json_is_taken(server: Server) -> None:
    assert server.openai is not None
    for content_type in ("text/plain", "application/x-www-form-urlencoded",
                         "application/json; charset=utf-16"):
        reply = requests.post(f"{server.openai}/chat/completions", data=json.dumps(CHAT), timeout=60,
                              headers={"content-type": content_type})
        assert reply.status_code == 415 and repr(content_type) in reply.json()["error"]["message"]
    reply = requests.post(f"{server.openai}/chat/completions", data=json.dumps(CHAT), timeout=60,
                          headers={"content-type": "application/json; charset=utf-8"})
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]


def test_sockets_that_send_nothing_or_half_a_request_line_are_closed(server: Server) -> None:
    """50 sockets send half a request line and 50 send nothing: the front closes every one (the
    head timeout is 10 s, keep-alive 5 s by default), so such sockets cannot pile up."""
    host, port = address(server)
    start = time.monotonic()
    half = [socket.create_connection((host, port)) for _ in range(50)]
    silent = [socket.create_connection((host, port)) for _ in range(50)]
    for sock in half:
        sock.sendall(b"POST /v1/chat/completions HT")
    try:
        for sock in silent:
            assert until_closed(sock, timeout=max(1.0, 5 + 4 - (time.monotonic() - start))) == b""
        assert time.monotonic() - start < 9
        for sock in half:
            answer = until_closed(sock, timeout=max(1.0, 10 + 4 - (time.monotonic() - start)))
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer[:200]
        assert 9.5 < time.monotonic() - start < 14
    finally:
        for sock in half + silent:
            sock.close()
    assert server.openai is not None
    assert requests.get(f"{server.openai}/models", timeout=10).status_code == 200


def test_a_loopback_front_answers_only_loopback_host_names(server: Server) -> None:
    assert server.openai is not None
    for host in ("evil.example", "evil.example:80", "192.168.1.10"):
        reply = requests.get(f"{server.openai}/models", headers={"Host": host}, timeout=10)
        assert reply.status_code == 421, host
        assert reply.json()["error"]["message"].startswith(f"the Host header {host!r} is not a name")
    for host in ("localhost:9000", "127.0.0.1", "[::1]:1234"):
        assert requests.get(f"{server.openai}/models", headers={"Host": host}, timeout=10).status_code == 200


def test_a_non_streamed_request_stops_in_the_engine_when_its_client_hangs_up(server: Server) -> None:
    before = idle_scrape(server.metrics)
    body = json.dumps({"model": MODEL, "prompt": "Count from one to a thousand:", "max_tokens": 4000,
                       "temperature": 0, "ignore_eos": True}).encode()
    host, port = address(server)
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"content-length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 60
        while running(server.metrics) < 1:
            assert time.monotonic() < deadline, "the request never ran"
            time.sleep(0.1)
        time.sleep(0.5)
    hung_up = time.monotonic()
    while running(server.metrics) > 0:
        assert time.monotonic() - hung_up < 3, "the request went on running after its client hung up"
        time.sleep(0.1)
    expected = {series("vllm:request_success_total", finished_reason="abort"): 1.0}
    assert wait_for_metrics(server.metrics, expected, before, timeout=10) == expected
    assert idle_scrape(server.metrics)[series("vllm:kv_cache_usage_perc")] == 0


def triton_error_of(server: Server, prompt: str | tuple[int, ...], sampling: dict[str, Any]
                    ) -> TritonError:
    """The error of one tt_llm stream sent as the front sends it (the front's own checks skipped)."""
    async def run() -> TritonError:
        client = grpcclient.InferenceServerClient(server.grpc)
        try:
            async for _ in stream(client, "tt_llm", GenerateCall(prompt, sampling, False, False, None)):
                pass
        except TritonError as exc:
            return exc
        finally:
            await client.close()
        raise AssertionError("tt_llm took the request")

    return asyncio.run(run())


def test_tt_llm_errors_reach_http_by_their_grpc_status_code(server: Server) -> None:
    bad_top_p = triton_error_of(server, "Hi", {"top_p": 5, "max_tokens": 4})
    assert (bad_top_p.code, bad_top_p.status) == (grpc.StatusCode.INVALID_ARGUMENT, 400)
    assert str(bad_top_p).startswith("top_p must be in (0, 1]")  # the code tt_llm put before it, gone
    too_long = triton_error_of(server, "hi " * 9000, {"max_tokens": 4})
    assert (too_long.code, too_long.status) == (grpc.StatusCode.INVALID_ARGUMENT, 400)
    assert "exceeds max_model_len (8192)" in str(too_long)
    assert server.openai is not None  # and through the front: checks only tt_llm makes
    cases: list[tuple[dict[str, Any], str]] = [
        ({"model": MODEL, "prompt": [1, 99999], "max_tokens": 2},
         "input_ids hold 99999, outside the vocabulary [0, 49152)"),
        ({"model": MODEL, "prompt": "hi " * 9000, "max_tokens": 4}, "max_model_len (8192)")]
    for body, words in cases:
        reply = requests.post(f"{server.openai}/completions", json=body, timeout=60)
        assert reply.status_code == 400 and words in reply.json()["error"]["message"], reply.text[:300]


@pytest.fixture(scope="module")
def tight_front(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second front over the session server, started with its CLI's limit flags: http://host:port."""
    port = free_ports(1)[0]
    log = Path(tmp_path_factory.mktemp("front")) / "front.log"
    args = [sys.executable, "-m", "tt_backend.openai_front", "--host", "127.0.0.1", "--port", str(port),
            "--triton-url", server.grpc, "--max-model-len", "8192", "--limit-concurrency", "4",
            "--timeout-keep-alive", "1", "--timeout-request-head", "2", "--allowed-hosts", "api.example.com"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_limit_flags_of_the_front(tight_front: str) -> None:
    port = int(tight_front.rsplit(":", 1)[1])
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as idle:  # --timeout-keep-alive 1
        assert until_closed(idle, timeout=5) == b"" and time.monotonic() - start < 3
    with socket.create_connection(("127.0.0.1", port)) as half:  # --timeout-request-head 2
        half.sendall(b"GET /v1/mod")
        assert until_closed(half, timeout=6).startswith(b"HTTP/1.1 408 ")
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]  # --limit-concurrency 4
    try:
        time.sleep(0.3)
        assert requests.get(f"{tight_front}/v1/models", timeout=10).status_code == 503
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert requests.get(f"{tight_front}/v1/models", timeout=10).status_code == 200
    allowed = requests.get(f"{tight_front}/v1/models", headers={"Host": "api.example.com:443"}, timeout=10)
    refused = requests.get(f"{tight_front}/v1/models", headers={"Host": "evil.example"}, timeout=10)
    assert (allowed.status_code, refused.status_code) == (200, 421)
    reply = requests.post(f"{tight_front}/v1/chat/completions", json=CHAT, timeout=60)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] >= 1
