"""Access control of the OpenAI front without Triton: the API key (401 in OpenAI's shape on every
path but /health and /metrics, preflights unchecked), CORS only for the origins given, and /metrics
passing tritonserver's text through or answering 503 naming why (a small HTTP server stands in for
tritonserver's metrics port; the integration test scrapes the real one)."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.test_openai_front import CHAT, MODEL, closed_port, decode, encode, front_config, render
from tt_backend.openai_front import app as app_module
from tt_backend.openai_front.access import CorsPolicy, parse_list, resolve_api_key
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.triton_stream import Delta

KEY = "sk-test-0123456789"
ORIGIN = "http://app.example:3000"
MISSING = {"error": {"message": "an API key is required: send the header `Authorization: Bearer <key>`",
                     "type": "authentication_error", "param": None, "code": 401}}


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """A front with KEY and CORS for ORIGIN, over a Triton that answers every request with "ok"."""
    async def answer(client: Any, model: str, call: GenerateCall) -> AsyncIterator[Delta]:
        yield Delta("ok", 1, num_prompt_tokens=3, finish_reason="stop")

    monkeypatch.setattr(app_module, "stream", answer)
    config = front_config(api_key=KEY, cors=CorsPolicy((ORIGIN,)))
    with TestClient(app_module.create_app(config, render, decode, encode)) as client:
        yield client


def test_every_path_but_health_and_metrics_needs_the_key(keyed: TestClient) -> None:
    for path in ("/v1/models", "/v1/models/", "//v1/models", "/docs", "/openapi.json", "/no/such/path"):
        reply = keyed.get(path)
        assert (reply.status_code, reply.json()) == (401, MISSING), path
        assert reply.headers["www-authenticate"] == "Bearer"
    for path in ("/v1/chat/completions", "/v1/completions", "/tokenize"):
        assert keyed.post(path, json=CHAT).json() == MISSING, path
    assert keyed.get("/health").status_code == 503  # open: no Triton behind it
    assert keyed.get("/metrics").status_code == 503  # open: no metrics port behind it
    with_key = {"Authorization": f"Bearer {KEY}"}
    assert keyed.get("/v1/models", headers=with_key).json()["data"][0]["id"] == MODEL
    chat = keyed.post("/v1/chat/completions", json=CHAT, headers=with_key)
    assert (chat.status_code, chat.json()["choices"][0]["message"]["content"]) == (200, "ok")
    assert keyed.post("/tokenize", json=CHAT, headers=with_key).status_code == 200


@pytest.mark.parametrize("authorization", [f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", f"Basic {KEY}", KEY,
                                           "Bearer", "Bearer ", f"{KEY} Bearer", f"Bearerx {KEY}"])
def test_a_wrong_key_or_scheme_is_refused(keyed: TestClient, authorization: str) -> None:
    reply = keyed.get("/v1/models", headers={"Authorization": authorization})
    assert reply.status_code == 401 and reply.json()["error"]["message"] == "the API key is not valid"
    assert KEY not in reply.text


@pytest.mark.parametrize("authorization", [f"Bearer {KEY}", f"bearer {KEY}", f"BEARER  {KEY} "])
def test_the_scheme_is_case_insensitive(keyed: TestClient, authorization: str) -> None:
    assert keyed.get("/v1/models", headers={"Authorization": authorization}).status_code == 200


def test_a_preflight_passes_the_key_check_and_only_an_allowed_origin_gets_cors_headers(
        keyed: TestClient) -> None:
    asks = {"Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}
    allowed = keyed.options("/v1/chat/completions", headers={"Origin": ORIGIN, **asks})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    assert allowed.headers["access-control-allow-headers"] == "authorization, content-type"
    assert "POST" in allowed.headers["access-control-allow-methods"]
    other = keyed.options("/v1/chat/completions", headers={"Origin": "http://evil.example", **asks})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    # A page of the allowed origin can read the 401 (and its reason) of a request without the key.
    refused = keyed.post("/v1/chat/completions", json=CHAT, headers={"Origin": ORIGIN})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == ORIGIN
    assert "access-control-allow-origin" not in keyed.get("/health", headers={"Origin": "http://evil.example"}
                                                          ).headers


def test_without_allowed_origins_no_cors_header_is_sent() -> None:
    with TestClient(app_module.create_app(front_config(), render, decode, encode)) as client:
        preflight = client.options("/v1/models",
                                   headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
        plain = client.get("/v1/models", headers={"Origin": ORIGIN})
    assert (preflight.status_code, plain.status_code) == (405, 200)
    assert not [h for h in (*preflight.headers, *plain.headers) if h.startswith("access-control-")]


def test_the_key_comes_from_the_flag_else_the_env_and_is_never_shown() -> None:
    env = {"TT_BACKEND_API_KEY": "from-env"}
    assert (resolve_api_key("from-flag", env), resolve_api_key(None, env)) == ("from-flag", "from-env")
    assert resolve_api_key(None, {}) is None and resolve_api_key(None, {"TT_BACKEND_API_KEY": ""}) is None
    with pytest.raises(ValueError, match="^--api-key is empty"):
        resolve_api_key("", env)  # `--api-key=$UNSET` must not serve without a key
    for bad in ("two words", "tab\tkey", "k\u00e9y"):
        with pytest.raises(ValueError, match="printable ASCII") as info:
            resolve_api_key(bad, {})
        assert bad not in str(info.value)
    assert KEY not in repr(front_config(api_key=KEY))


def test_cors_flags_take_a_json_list_or_commas_and_refuse_origins_no_browser_sends() -> None:
    assert parse_list('["http://a.example", "https://b.example:8443"]', "--x") == (
        "http://a.example", "https://b.example:8443")
    assert parse_list(" http://a.example, ,http://[::1]:80 ", "--x") == ("http://a.example", "http://[::1]:80")
    assert CorsPolicy.from_flags("", "*", "*", False) is None
    assert CorsPolicy.from_flags("HTTP://A.example", "GET,POST", "*", True) == CorsPolicy(
        ("http://a.example",), ("GET", "POST"), ("*",), True)
    for origins, credentials, words in [
            ("http://a.example/", False, "'http://a.example/' is not `*` or an origin"),
            ("a.example", False, "'a.example' is not `*` or an origin"),
            ("null", False, "'null' is not"),
            ("*", True, "--allow-credentials with --allowed-origins '*'"),
            ('["http://a.example"', False, "--allowed-origins: not a JSON list"),
            ('[1]', False, "a JSON list must hold strings only")]:
        with pytest.raises(ValueError, match=words.replace("*", r"\*").replace("[", r"\[")):
            CorsPolicy.from_flags(origins, "*", "*", credentials)


class _TritonMetricsPort(BaseHTTPRequestHandler):
    """/metrics: a line of Prometheus text; /slow: the same after 2 s; anything else: 404."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/slow":
            time.sleep(2)
        if self.path not in ("/metrics", "/slow"):
            self.send_error(404)
            return
        body = b'vllm:num_requests_running{model="m",lane="0"} 0\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        pass


@pytest.fixture
def metrics_port() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TritonMetricsPort)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_metrics_pass_tritons_text_through_or_503_naming_why(metrics_port: str) -> None:
    def scrape(url: str) -> tuple[int, str, str]:
        config = front_config(api_key=KEY, triton_metrics_url=url, metrics_timeout_s=0.5)
        with TestClient(app_module.create_app(config, render, decode, encode)) as client:
            reply = client.get("/metrics")
        message = reply.json()["error"]["message"] if reply.status_code != 200 else reply.text
        return reply.status_code, reply.headers["content-type"], message

    assert scrape(f"{metrics_port}/metrics") == (200, "text/plain; version=0.0.4; charset=utf-8",
                                                 'vllm:num_requests_running{model="m",lane="0"} 0\n')
    assert scrape(f"{metrics_port}/gone")[::2] == (
        503, f"tritonserver's metrics at {metrics_port}/gone answered HTTP 404")
    assert scrape(f"{metrics_port}/slow")[::2] == (
        503, f"tritonserver's metrics at {metrics_port}/slow did not answer within 0.5 s")
    down = f"http://127.0.0.1:{closed_port()}/metrics"
    status, _, message = scrape(down)
    assert status == 503 and message.startswith(f"tritonserver's metrics at {down} could not be fetched: "
                                                "ConnectError: "), message
    with pytest.raises(ValueError, match="expected http"):
        front_config(triton_metrics_url="127.0.0.1:8002/metrics")
