"""deploy/grafana: a real Prometheus (Debian's, installed by scripts/test_deps.sh) scrapes a real
server while it serves a small mixed load; then every query of every dashboard panel, and the
KEDA trigger's query, returns data: at least one series, every value a finite number (a latency
percentile with no observation in its window would be NaN)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import yaml

from tests.integration.clients import DEFAULT_MODEL_NAME, http_generate, idle_scrape
from tests.integration.conftest import ROOT, Server, free_ports

pytestmark = pytest.mark.integration

DASHBOARD = ROOT / "deploy" / "grafana" / "tt_backend.json"
RATE_WINDOW = "1m"
"""What Grafana's $__rate_interval stands for here: it holds the whole load."""


@pytest.fixture(scope="module")
def prometheus(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary is not None, "Debian's prometheus is missing: run scripts/test_deps.sh"
    folder = tmp_path_factory.mktemp("prometheus")
    job = {"job_name": "tt_backend", "static_configs": [{"targets": [server.metrics]}]}
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [job]}
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_ports(1)[0]
    log = open(folder / "prometheus.log", "wb")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen([binary, f"--config.file={folder / 'prometheus.yml'}",
                             f"--storage.tsdb.path={folder / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _values(url, 'up{job="tt_backend"}') == [1.0], "the first scrape")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_every_panel_query_returns_data_under_load(server: Server, prometheus: str) -> None:
    with open(DASHBOARD, encoding="utf-8") as f:
        dashboard = json.load(f)
    panels = dashboard["panels"]
    assert {p["title"] for p in panels} >= {"Token throughput", "Time to first token", "Inter-token latency",
                                            "Running requests per lane", "Waiting requests per lane",
                                            "KV cache usage", "Preemptions", "Host-sampling fallbacks",
                                            "Trace replays vs eager steps"}
    before = _values(prometheus, "sum(vllm:request_success_total)")
    _load(server)
    done = idle_scrape(server.metrics)
    finished = sum(v for k, v in done.items() if k.startswith("vllm:request_success_total{"))
    # Prometheus has scraped the finished load (a scrape before it came first: the fixture).
    _wait(lambda: _values(prometheus, "sum(vllm:request_success_total)") == [finished], "the load's scrape")
    assert before != [finished]

    empty = {}
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", RATE_WINDOW)
            expr = expr.replace("$model_name", DEFAULT_MODEL_NAME)
            values = _values(prometheus, expr)
            if not values or not all(math.isfinite(v) for v in values):
                empty[f"{panel['title']} {target['refId']}"] = values
    assert empty == {}

    with open(ROOT / "deploy" / "k8s" / "keda-scaledobject.yaml", encoding="utf-8") as f:
        trigger = yaml.safe_load(f)["spec"]["triggers"][0]["metadata"]
    assert _values(prometheus, trigger["query"]) == [0.0]  # nothing waits once the load is done


def _load(server: Server) -> None:
    """Concurrent greedy requests (TTFT, inter-token, steps, trace replays), one prompt twice (prefix
    cache hits) and one with a repetition penalty (host sampling)."""
    shared = "Tell me a short story about a lighthouse keeper and the sea. " * 6
    bodies: list[dict[str, Any]] = [
        {"text_input": f"Request {i}: name three colours.", "sampling_parameters": json.dumps(
            {"temperature": 0, "max_tokens": 16, "ignore_eos": True})} for i in range(4)]
    greedy = json.dumps({"temperature": 0, "max_tokens": 8})
    bodies += [{"text_input": shared, "sampling_parameters": greedy}] * 2
    bodies.append({"text_input": "Count from one to ten.", "sampling_parameters": json.dumps(
        {"temperature": 0, "max_tokens": 8, "repetition_penalty": 1.3})})
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda b=body: statuses.append(http_generate(server.http, "tt_llm", b)
                                                                      ["status"]))
               for body in bodies[:4]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses += [http_generate(server.http, "tt_llm", body)["status"] for body in bodies[4:]]
    assert statuses == [200] * len(bodies)


class _NotReady(Exception):
    """Prometheus answers 503 until its TSDB has opened."""


def _values(url: str, expr: str) -> list[float]:
    r = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    if r.status_code == 503:
        raise _NotReady(r.text)
    assert r.status_code == 200, (expr, r.text)
    data = r.json()["data"]
    assert data["resultType"] == "vector", expr
    return [float(item["value"][1]) for item in data["result"]]


def _wait(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (requests.ConnectionError, _NotReady):  # not listening or not ready yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"Prometheus: no {what} in {timeout} s")
        time.sleep(0.25)

