"""Small client helpers over tritonclient gRPC streaming and HTTP generate(_stream)."""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import np_to_triton_dtype


@dataclass
class StreamResult:
    responses: list[dict[str, np.ndarray]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    """time.monotonic() at which each response arrived."""
    error: str | None = None

    def ids(self, name: str = "output_ids") -> list[int]:
        return [int(t) for r in self.responses for t in r[name].reshape(-1)]

    def text(self) -> str:
        return "".join(r["text_output"].reshape(-1)[0].decode("utf-8") for r in self.responses)


def infer_input(name: str, value: np.ndarray) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    t.set_data_from_numpy(value)
    return t


def grpc_stream(url: str, model: str, inputs: dict[str, np.ndarray], timeout: float = 120,
                on_response: Callable[[], None] | None = None, batched: bool = False) -> StreamResult:
    """Send one request on a gRPC stream and collect every response until the final one; `batched`
    adds the batch dimension of one prompt that TRT-LLM's models (ensemble, tensorrt_llm_bls) take."""
    if batched:
        inputs = {name: value[None] for name, value in inputs.items()}
    events: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    result = StreamResult()
    client.start_stream(callback=lambda result, error: events.put((result, error)))
    try:
        client.async_stream_infer(model, [infer_input(k, v) for k, v in inputs.items()],
                                  enable_empty_final_response=True)
        while True:
            res, err = events.get(timeout=timeout)
            if err is not None:
                result.error = str(err)
                return result
            response = res.get_response()
            outputs = {o.name: res.as_numpy(o.name) for o in response.outputs}
            if outputs:
                result.responses.append(outputs)
                result.times.append(time.monotonic())
                if on_response is not None:
                    on_response()
            if response.parameters["triton_final_response"].bool_param:
                return result
    finally:
        client.stop_stream()
        client.close()


def http_generate(url: str, model: str, body: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    r = requests.post(f"http://{url}/v2/models/{model}/generate", json=body, timeout=timeout)
    return {"status": r.status_code, **r.json()}


def http_generate_stream(url: str, model: str, body: dict[str, Any],
                         timeout: float = 120) -> list[dict[str, Any]]:
    """Server-sent events of /generate_stream, decoded."""
    events = []
    with requests.post(f"http://{url}/v2/models/{model}/generate_stream", json=body, stream=True,
                       timeout=timeout) as r:
        for line in r.iter_lines(decode_unicode=False):
            if line.startswith(b"data: "):
                events.append(json.loads(line[len(b"data: "):].decode("utf-8")))
    return events


def s(value: str) -> np.ndarray:
    return np.array([value.encode("utf-8")], dtype=np.object_)


def scrape(url: str) -> dict[str, float]:
    """Prometheus text from Triton's metrics port: {'name{labels}': value} for our families."""
    text = requests.get(f"http://{url}/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        if line.startswith(("vllm:", "tt:")):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def idle_scrape(url: str, timeout: float = 10) -> dict[str, float]:
    """A scrape taken once no request runs or waits on any lane. A client sees a request's last
    response before the engine's report of that step reaches the metrics; the report that sets
    the running gauge to 0 also counts the finish, so after this every earlier request is counted."""
    deadline = time.monotonic() + timeout
    while True:
        values = scrape(url)
        busy = sum(v for k, v in values.items()
                   if k.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")))
        if busy == 0 or time.monotonic() > deadline:
            return values
        time.sleep(0.1)


DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
"""The `model_name` label of the default model (its served name)."""


def series(name: str, **labels: str) -> str:
    """The key `scrape` uses for one series (labels sorted, as Triton prints them)."""
    defaults = {"model": "tt_llm", "model_name": DEFAULT_MODEL_NAME, "lane": "0"}
    body = ",".join(f'{k}="{v}"' for k, v in sorted({**defaults, **labels}.items()))
    return f"{name}{{{body}}}"


def wait_for_metrics(url: str, expected: dict[str, float], before: dict[str, float],
                     timeout: float = 10) -> dict[str, float]:
    """Scrape until every expected delta (or gauge value, for names ending in '=') holds."""
    deadline = time.monotonic() + timeout
    while True:
        now = scrape(url)
        deltas = {k: now.get(k, 0.0) - before.get(k, 0.0) for k in expected}
        if deltas == expected or time.monotonic() > deadline:
            return deltas
        time.sleep(0.2)
