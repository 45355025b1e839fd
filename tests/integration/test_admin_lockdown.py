"""Through tritonserver: Triton's admin APIs (logging, statistics, model repository, trace,
shared memory) refuse every client without the admin key, on HTTP (403) and gRPC (UNAVAILABLE,
Triton 2.51's code for a restricted protocol), and serve it with the key; inference, health,
metadata, model config and the metrics port stay open. The session server runs with the key
`ADMIN_KEY` (tests/integration/conftest.py), which never reaches its log."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.clients import http_generate
from tests.integration.conftest import ADMIN_KEY, Server

pytestmark = pytest.mark.integration

HTTP_REFUSAL = {"error": "This API is restricted, expecting header 'admin-key'"}
GRPC_REFUSAL = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
ADMIN_CALLS = [("POST", "/v2/logging", {"log_verbose_level": 0}), ("GET", "/v2/models/stats", None),
               ("POST", "/v2/repository/index", {}), ("GET", "/v2/trace/setting", None),
               ("GET", "/v2/systemsharedmemory/status", None)]


def call(server: Server, method: str, path: str, body: dict[str, Any] | None,
         headers: dict[str, str] | None = None) -> requests.Response:
    return requests.request(method, f"http://{server.http}{path}", headers=headers, timeout=30,
                            data=None if body is None else json.dumps(body))


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_CALLS)
def test_http_admin_apis_refuse_without_the_key_and_serve_with_it(server: Server, method: str, path: str,
                                                                   body: dict[str, Any] | None) -> None:
    wrong = (None, {"admin-key": "wrong"}, {"admin-key": ""}, {"triton-grpc-protocol-admin-key": ADMIN_KEY})
    for headers in wrong:
        refused = call(server, method, path, body, headers)
        assert (refused.status_code, refused.json()) == (403, HTTP_REFUSAL), headers
    served = call(server, method, path, body, {"admin-key": ADMIN_KEY})
    assert served.status_code == 200, served.text


def test_http_admin_apis_with_the_key_return_their_content(server: Server) -> None:
    key = {"admin-key": ADMIN_KEY}
    logging = call(server, "POST", "/v2/logging", {"log_verbose_level": 0}, key).json()
    assert logging["log_verbose_level"] == 0 and logging["log_info"] is True
    models = {"ensemble", "postprocessing", "preprocessing", "tensorrt_llm_bls", "tt_llm"}
    stats = call(server, "GET", "/v2/models/stats", None, key).json()
    assert {m["name"] for m in stats["model_stats"]} == models
    index = call(server, "POST", "/v2/repository/index", {}, key).json()
    assert sorted((m["name"], m["state"]) for m in index) == [(name, "READY") for name in sorted(models)]
    assert call(server, "GET", "/v2/trace/setting", None, key).json()["trace_level"] == ["OFF"]


Rpc = Callable[[grpcclient.InferenceServerClient, dict[str, str] | None], Any]
GRPC_CALLS: list[tuple[str, Rpc]] = [
    ("update_log_settings", lambda c, h: c.update_log_settings({"log_verbose_level": 0}, headers=h)),
    ("get_inference_statistics", lambda c, h: c.get_inference_statistics("tt_llm", headers=h)),
    ("get_model_repository_index", lambda c, h: c.get_model_repository_index(headers=h)),
    ("get_trace_settings", lambda c, h: c.get_trace_settings(headers=h)),
]


@pytest.mark.parametrize(("name", "rpc"), GRPC_CALLS, ids=[name for name, _ in GRPC_CALLS])
def test_grpc_admin_protocols_refuse_without_the_key_and_serve_with_it(server: Server, name: str,
                                                                       rpc: Rpc) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        for headers in (None, {"triton-grpc-protocol-admin-key": "wrong"}, {"admin-key": ADMIN_KEY}):
            with pytest.raises(InferenceServerException) as refused:
                rpc(client, headers)
            assert refused.value.status() == "StatusCode.UNAVAILABLE", headers
            assert refused.value.message() == GRPC_REFUSAL
        assert rpc(client, {"triton-grpc-protocol-admin-key": ADMIN_KEY}) is not None
    finally:
        client.close()


def test_grpc_with_the_key_reads_the_statistics_and_log_settings(server: Server) -> None:
    client = grpcclient.InferenceServerClient(server.grpc)
    key = {"triton-grpc-protocol-admin-key": ADMIN_KEY}
    try:
        stats = client.get_inference_statistics("tt_llm", headers=key, as_json=True)
        assert [m["name"] for m in stats["model_stats"]] == ["tt_llm"]
        settings = client.update_log_settings({"log_verbose_level": 0}, headers=key, as_json=True)
        assert settings["settings"]["log_verbose_level"] == {"uint32_param": 0}
    finally:
        client.close()


def test_inference_health_metadata_and_metrics_stay_open(server: Server, chat_text: Any) -> None:
    base = f"http://{server.http}"
    assert requests.get(f"{base}/v2/health/ready", timeout=10).status_code == 200
    assert requests.get(f"{base}/v2/health/live", timeout=10).status_code == 200
    assert requests.get(f"{base}/v2/models/tt_llm/ready", timeout=10).status_code == 200
    assert requests.get(f"{base}/v2", timeout=10).json()["name"] == "triton"
    assert requests.get(f"{base}/v2/models/tt_llm", timeout=10).json()["name"] == "tt_llm"
    assert requests.get(f"{base}/v2/models/tt_llm/config", timeout=10).json()["name"] == "tt_llm"
    metrics = requests.get(f"http://{server.metrics}/metrics", timeout=10)
    assert metrics.status_code == 200 and "vllm:num_requests_running" in metrics.text
    reply = http_generate(server.http, "tt_llm", {
        "text_input": chat_text("Say hi."), "exclude_input_in_output": True, "return_finish_reason": True,
        "sampling_parameters": json.dumps({"temperature": 0, "max_tokens": 4, "ignore_eos": True})})
    assert (reply["status"], reply["finish_reason"]) == (200, "length"), reply
    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        assert client.is_server_ready() and client.is_model_ready("tt_llm")
        assert client.get_model_metadata("tt_llm").name == "tt_llm"
        assert client.get_model_config("tt_llm").config.name == "tt_llm"
    finally:
        client.close()


def test_serve_says_how_the_admin_apis_open_and_never_logs_the_key(server: Server) -> None:
    log = server.log_text()
    assert ("[serve] admin APIs (model-repository,logging,trace,shared-memory,statistics) need the header "
            "admin-key (gRPC: triton-grpc-protocol-admin-key) set to TT_BACKEND_ADMIN_KEY") in log
    assert ADMIN_KEY not in log
