"""The clients and server probes of bench/reliability.py: one streamed request over the gRPC stream,
HTTP generate_stream or the OpenAI front, ended as completed / cancelled / error / stuck / lost, and
the server's metrics and processes."""

from __future__ import annotations

import json
import os
import queue
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import requests
import tritonclient.grpc as grpcclient

ENDINGS = ("completed", "cancelled", "error", "stuck", "lost")


@dataclass(frozen=True)
class Job:
    index: int
    path: str
    """grpc, http or openai."""
    prompt: str | list[int]
    """Text, or token ids (gRPC and HTTP only: `input_ids`)."""
    sampling: dict[str, object]
    cancel_after: int | None = None
    """Cancel after this many text chunks (0: before the first token); None: run to the end."""
    cancel_delay_s: float = 0.0
    """With cancel_after=0 (gRPC): wait this long after sending, then cancel (a long prefill runs)."""


@dataclass
class Outcome:
    ended: str = "stuck"
    """One of ENDINGS."""
    text: str = ""
    finals: int = 0
    error: str = ""
    chunk_times: list[float] = field(default_factory=list)
    sent_at: float = 0.0

    @property
    def first_token_s(self) -> float:
        return self.chunk_times[0] - self.sent_at if self.chunk_times else 0.0

    @property
    def max_gap_after_first_s(self) -> float:
        """The longest wait between two chunks: how long the request made no progress once started."""
        times = self.chunk_times
        return max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0)


def _tensor(name: str, value: np.ndarray, dtype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(value.shape), dtype)
    t.set_data_from_numpy(value)
    return t


def _prompt_tensor(prompt: str | list[int]) -> grpcclient.InferInput:
    if isinstance(prompt, str):
        return _tensor("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES")
    return _tensor("input_ids", np.array(prompt, dtype=np.int32), "INT32")


def run_grpc(port: int, job: Job, timeout: float) -> Outcome:
    out = Outcome(sent_at=time.monotonic())
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    inputs = [_prompt_tensor(job.prompt),
              _tensor("sampling_parameters", np.array([json.dumps(job.sampling).encode()], dtype=np.object_),
                      "BYTES"),
              _tensor("stream", np.array([True]), "BOOL"),
              _tensor("return_text_output", np.array([True]), "BOOL")]
    if isinstance(job.prompt, str):
        inputs.append(_tensor("exclude_input_in_output", np.array([True]), "BOOL"))
    chunks = 0
    try:
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        client.async_stream_infer("tt_llm", inputs, enable_empty_final_response=True)
        if job.cancel_after == 0:
            time.sleep(job.cancel_delay_s)
            client.stop_stream(cancel_requests=True)
            out.ended = "cancelled"
            return out
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                result, error = events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if error is not None:
                out.ended, out.error = "error", str(error)
                return out
            text = result.as_numpy("text_output")
            if text is not None:
                out.text += text.reshape(-1)[0].decode()
                out.chunk_times.append(time.monotonic())
                chunks += 1
            if result.get_response().parameters["triton_final_response"].bool_param:
                out.finals += 1
                out.ended = "completed"
                return out
            if job.cancel_after is not None and chunks >= job.cancel_after:
                client.stop_stream(cancel_requests=True)
                out.ended = "cancelled"
                return out
        return out
    except Exception as exc:  # noqa: BLE001 (the server went away: the stream ended with an error)
        out.ended, out.error = "error", repr(exc)
        return out
    finally:
        try:
            client.stop_stream()
            client.close()
        except Exception:  # noqa: BLE001
            pass


def run_http(port: int, job: Job, timeout: float) -> Outcome:
    prompt = {"text_input": job.prompt} if isinstance(job.prompt, str) else {"input_ids": job.prompt}
    body = {**prompt, "sampling_parameters": json.dumps(job.sampling), "stream": True,
            "exclude_input_in_output": True, "return_finish_reason": True, "return_text_output": True}
    return _sse(f"http://127.0.0.1:{port}/v2/models/tt_llm/generate_stream", body, job, timeout,
                lambda e: (e.get("text_output", ""), e.get("finish_reason") not in (None, "None")))


def run_openai(port: int, job: Job, timeout: float, model: str) -> Outcome:
    body = {"model": model, "prompt": job.prompt, "stream": True, **job.sampling}
    return _sse(f"http://127.0.0.1:{port}/v1/completions", body, job, timeout,
                lambda e: (e["choices"][0]["text"], e["choices"][0]["finish_reason"] is not None)
                if e.get("choices") else ("", False))


def _sse(url: str, body: dict[str, object], job: Job, timeout: float,
         read: Callable[[dict[str, Any]], tuple[str, bool]]) -> Outcome:
    out = Outcome(sent_at=time.monotonic())
    chunks = 0
    try:
        with requests.post(url, json=body, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                out.ended, out.error = "error", r.text[:300]
                return out
            if job.cancel_after == 0:
                out.ended = "cancelled"
                return out  # closing the response hangs up
            for line in r.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    out.ended, out.error = "error", str(event["error"])[:300]
                    return out
                text, final = read(event)
                out.text += text
                if text:
                    chunks += 1
                    out.chunk_times.append(time.monotonic())
                if final:
                    out.finals += 1
                    out.ended = "completed"
                elif job.cancel_after is not None and chunks >= job.cancel_after:
                    out.ended = "cancelled"
                    return out
            if out.ended != "completed":
                out.ended = "lost"
    except requests.Timeout:
        out.ended = "stuck"
    except requests.RequestException as exc:  # refused or cut: the server went away
        out.ended, out.error = "error", repr(exc)[:300]
    return out


# ---- the server -------------------------------------------------------------------------------------
def server_state(metrics_port: int) -> dict[str, float]:
    """KV usage, running, waiting, aborted requests and preemptions, summed over the lanes."""
    text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    state: Counter[str] = Counter()
    for line in text.splitlines():
        for name in ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
                     "vllm:num_preemptions_total"):
            if line.startswith(name + "{"):
                state[name.split(":")[1]] += float(line.rsplit(" ", 1)[1])
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            state["aborted"] += float(line.rsplit(" ", 1)[1])
    return dict(state)


def settle(metrics_port: int, timeout: float = 30) -> dict[str, float]:
    """The server state once nothing runs or waits (or after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        state = server_state(metrics_port)
        if state.get("num_requests_running", 0) + state.get("num_requests_waiting", 0) == 0 or \
                time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def leaked(state: dict[str, float]) -> bool:
    gauges = ("kv_cache_usage_perc", "num_requests_running", "num_requests_waiting")
    return any(state.get(k, 0) for k in gauges)


def ready(http_port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False


@dataclass(frozen=True)
class ProcessSample:
    rss_mb: float
    fds: int
    threads: int


def server_processes(session: int) -> dict[str, int]:
    """The processes of one scripts/serve.sh session (started with start_new_session, so its id is
    serve.sh's pid): tritonserver, the tt_llm stub, the front."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat[3]) != session:  # the process group
            continue
        if cmd[0].endswith(b"/tritonserver"):
            found["tritonserver"] = int(proc.name)
        elif cmd[0].endswith(b"triton_python_backend_stub") and b"tt_llm/1/model.py" in cmd[1]:
            found["tt_llm stub"] = int(proc.name)
        elif cmd[1:3] == [b"-m", b"tt_backend.openai_front"]:  # not scripts/keep_running.py above it
            found["front"] = int(proc.name)
    return found


def sample(pid: int) -> ProcessSample:
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    value = {line.split(":")[0]: line.split()[1] for line in status
             if line.startswith(("VmRSS", "Threads"))}
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return ProcessSample(int(value["VmRSS"]) / 1024, fds, int(value["Threads"]))
