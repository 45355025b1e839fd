"""llama.cpp as a baseline of bench/compare.py: llama-cpp-python's OpenAI-compatible server
(`python -m llama_cpp.server`, through bench/llamacpp_server.py, which turns off llama.cpp's extra weight
buffers: the AMX one crashed on an Intel AMX machine; without AMX it changes nothing for this model) on
the default model's own GGUF file (SmolLM2-135M-Instruct.Q4_1.gguf, its Q4_1 blocks as they are), in
its own venv `.venv-llamacpp` that scripts/setup_llamacpp.sh builds once (llama.cpp compiled for this
CPU, -DGGML_NATIVE=ON).

How that server takes concurrent requests (llama_cpp/server/app.py and settings.py of 0.3.36): one
`Llama` object per model and one sequence in it; every request holds an anyio lock pair for its whole
stream, so requests queue and run one after the other, unbatched (llama.cpp's own C++ `llama-server
--parallel N` batches; this Python server has no such setting). With its default
`interrupt_requests=True` a streaming request is ended (`[DONE]` after its current token, no
finish_reason) as soon as another request waits for the lock, so at c >= 2 every stream but the last
is cut short: the "fails at c=8" is that setting, not a crash. The bench serves it with
`interrupt_requests=False` (requests wait their turn; their TTFT includes the wait);
`--llamacpp-set interrupt_requests=true` shows the default, its cut streams counted as failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
LLAMACPP_VENV = ROOT / ".venv-llamacpp"
SETUP = ROOT / "scripts" / "setup_llamacpp.sh"
SERVED_NAME = "smollm2"


def ensure_llamacpp(log: Path) -> Path:
    """The venv's python, after scripts/setup_llamacpp.sh (a no-op once built; the first build takes
    minutes, its output in `log`); RuntimeError with the reason (the log's last lines) when it fails."""
    python = LLAMACPP_VENV / "bin" / "python"
    env = {**os.environ, "LLAMACPP_VENV": str(LLAMACPP_VENV)}
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(["bash", str(SETUP)], env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        tail = [line.strip() for line in lines if line.strip() and not line.startswith("WARNING")]
        raise RuntimeError(f"{SETUP.name} failed ({code}; see {log}): " + " | ".join(tail[-4:]))
    return python


def llamacpp_version(python: Path) -> str:
    done = subprocess.run([str(python), "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def llamacpp_command(python: Path, gguf: Path, port: int, threads: int, n_ctx: int,
                     settings: tuple[str, ...] = ()) -> list[str]:
    """The server's command line: `threads` for decode and for prompt batches alike, logits only for
    the last position (`logits_all` defaults to true there: an LM head over every prompt token that no
    request of the bench reads), the queueing behaviour above; `settings` (`KEY=VALUE`, its
    settings.py names) override any of these."""
    options = {"model": str(gguf), "model_alias": SERVED_NAME, "host": "127.0.0.1", "port": str(port),
               "n_threads": str(threads), "n_threads_batch": str(threads), "n_ctx": str(n_ctx),
               "logits_all": "false", "interrupt_requests": "false", "cache": "false", "verbose": "false"}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise ValueError(f"--llamacpp-set wants KEY=VALUE, got {setting!r}")
        options[key] = value
    return [str(python), str(Path(__file__).with_name("llamacpp_server.py")),
            *(arg for key, value in options.items() for arg in (f"--{key}", value))]


def stream_llamacpp(port: int, prompt: str, max_tokens: int,
                    suppress: tuple[int, ...] = ()) -> tuple[list[float], int]:
    """One streamed `/v1/completions` on llama-cpp-python's server, greedy. It has no `ignore_eos` and
    no usage in a stream: the end-of-generation tokens `suppress` get a logit bias of -1e9 (so every
    request runs `max_tokens`, as ignore_eos does elsewhere), repeat_penalty 1 (its default is 1.1),
    and a stream that ends with finish_reason "length" produced `max_tokens` tokens; one cut short
    (no finish_reason) counts its text chunks, one a token each (a split UTF-8 character aside)."""
    body: dict[str, Any] = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens,
                            "temperature": 0, "repeat_penalty": 1.0, "stream": True,
                            "logit_bias": {str(t): -1e9 for t in suppress}}
    times: list[float] = []
    finish = None
    with requests.post(f"http://127.0.0.1:{port}/v1/completions", json=body, stream=True, timeout=900) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            choice = (event.get("choices") or [{}])[0]
            if choice.get("text"):
                times.append(time.perf_counter())
            finish = choice.get("finish_reason") or finish
    return times, max_tokens if finish == "length" else len(times)
