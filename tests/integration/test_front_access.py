"""The OpenAI front's access flags through scripts/serve.sh (`--openai-arg`) over a real tritonserver,
with the `openai` SDK: without the key an AuthenticationError, with it a completion; /health and
/metrics (tritonserver's, on the front's port) stay open; a CORS preflight gets its headers only for
the allowed origin; the key is in no line of the server's log; and a stop after streamed calls
unloads every model without waiting out Triton's exit timeout."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests

from tests.integration.conftest import Server, free_ports, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration
MODEL = "SmolLM2-135M-Instruct"
KEY = f"tt-test-{secrets.token_hex(16)}"
ORIGIN = "http://app.example:3000"


_PROCS: list[subprocess.Popen[bytes]] = []
"""The module server's serve.sh (the last test stops it)."""


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, srv = start_server(tmp_path_factory.mktemp("front_access") / "server.log",
                             openai_port=free_ports(1)[0],
                             openai_args=(f"--api-key={KEY}", f"--allowed-origins={ORIGIN}"))
    try:
        wait_ready(proc, srv)  # polls the front's /health, which needs no key
        _PROCS.append(proc)
        yield srv
    finally:
        stop_server(proc)


def sdk(server: Server, key: str) -> openai.OpenAI:
    assert server.openai is not None
    return openai.OpenAI(base_url=server.openai, api_key=key, max_retries=0, timeout=120)


def test_the_sdk_needs_the_key(keyed: Server) -> None:
    for key in ("EMPTY", KEY[:-1]):  # "EMPTY": what a client of a keyless vLLM sends
        with pytest.raises(openai.AuthenticationError) as info:
            sdk(keyed, key).completions.create(model=MODEL, prompt="Hi", max_tokens=2)
        assert info.value.status_code == 401
        assert info.value.body == {"message": "the API key is not valid", "type": "authentication_error",
                                   "param": None, "code": 401}
    assert keyed.openai is not None
    bare = requests.get(f"{keyed.openai}/models", timeout=10)
    assert (bare.status_code, bare.headers["www-authenticate"]) == (401, "Bearer")
    reply = sdk(keyed, KEY).completions.create(model=MODEL, prompt="Hi", max_tokens=2, temperature=0)
    assert reply.usage is not None and reply.usage.completion_tokens >= 1 and reply.choices[0].text


def test_health_and_tritons_metrics_are_open_on_the_front_port(keyed: Server) -> None:
    assert keyed.openai is not None
    front = keyed.openai.removesuffix("/v1")
    assert requests.get(f"{front}/health", timeout=10).status_code == 200
    scrape = requests.get(f"{front}/metrics", timeout=10)
    assert scrape.status_code == 200
    assert scrape.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "vllm:num_requests_running{" in scrape.text  # serve.sh told the front its metrics port
    assert "vllm:num_requests_running" in requests.get(f"http://{keyed.metrics}/metrics", timeout=10).text


def test_a_cors_preflight_is_answered_for_the_allowed_origin_only(keyed: Server) -> None:
    assert keyed.openai is not None
    asks = {"Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}
    allowed = requests.options(f"{keyed.openai}/chat/completions", headers={"Origin": ORIGIN, **asks},
                               timeout=10)
    assert (allowed.status_code, allowed.headers.get("access-control-allow-origin")) == (200, ORIGIN)
    other = requests.options(f"{keyed.openai}/chat/completions", timeout=10,
                             headers={"Origin": "http://evil.example", **asks})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers


def test_the_key_is_in_no_log_line(keyed: Server) -> None:
    log = keyed.log_text()
    assert "API key: required" in log  # the front said it needs one ...
    assert KEY not in log and KEY[:-1] not in log  # ... and never which


def test_a_stop_after_streamed_calls_unloads_every_model_in_time(keyed: Server) -> None:
    """The front drains each finished gRPC call; cancelling it after its final response (as the
    front once did) left tt_llm held, and about half such stops waited out Triton's 30 s exit
    timeout ("Exit timeout expired")."""
    def one(i: int) -> str:
        chunks = sdk(keyed, KEY).completions.create(model=MODEL, prompt=f"Count to {i}", max_tokens=2,
                                                    temperature=0, stream=True)
        return "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)

    with ThreadPoolExecutor(8) as pool:
        assert all(list(pool.map(one, range(40))))
    stop_server(_PROCS[0])
    log = keyed.log_text()
    assert "Exit timeout expired" not in log
    assert "tt_backend.triton.llm_model: finalized in" in log  # tt_llm's finalize ran, and ended
