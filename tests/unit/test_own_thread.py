"""The torch engine is built on a thread of its own that has ended when `build_engine` returns, so the
thread that steps it is the only one holding OpenMP workers (devices/torch/own_thread.py says why;
bench/openmp_threads.py measures what it is worth)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import tt_backend.assembly.torch_engine as torch_engine
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.devices.torch.own_thread import on_own_thread
from tt_backend.runtime.runner import ModelRunner
from tt_backend.sampling.params import SamplingParams


def test_on_own_thread_returns_what_the_work_returns_from_a_thread_that_has_ended() -> None:
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 41 + 1

    assert on_own_thread(work, "tt-probe") == 42
    assert seen[0] is not threading.current_thread() and seen[0].name == "tt-probe"
    assert not seen[0].is_alive()


def test_on_own_thread_raises_the_works_own_error_on_the_callers_thread() -> None:
    def work() -> None:
        raise ValueError("max_model_len=7 is smaller than the prompt")

    with pytest.raises(ValueError, match="max_model_len=7 is smaller than the prompt"):
        on_own_thread(work, "tt-probe")


def test_the_torch_engine_loads_and_warms_up_on_a_build_thread_that_has_ended(
        monkeypatch: pytest.MonkeyPatch) -> None:
    threads: dict[str, threading.Thread] = {}
    load, warmup = torch_engine.load_model, ModelRunner.warmup

    def recording_load(*args: Any, **kwargs: Any) -> Any:
        threads["load"] = threading.current_thread()
        return load(*args, **kwargs)

    def recording_warmup(self: ModelRunner) -> Any:
        threads["warmup"] = threading.current_thread()
        return warmup(self)

    monkeypatch.setattr(torch_engine, "load_model", recording_load)
    monkeypatch.setattr(ModelRunner, "warmup", recording_warmup)
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=2))
    try:
        assert threads["load"] is threads["warmup"]
        assert threads["load"].name == "tt-build" and threads["load"] is not threading.current_thread()
        assert not threads["load"].is_alive()
        done = threading.Event()
        tokens: list[int] = []

        def on_output(out: Any) -> None:
            tokens.extend(out.new_token_ids)
            if out.finished:
                done.set()

        engine.start()  # the engine still serves, stepped from its own thread
        engine.add_request("r", [1, 2, 3, 4], SamplingParams(max_tokens=3, ignore_eos=True), on_output)
        assert done.wait(120)
        assert len(tokens) == 3
    finally:
        engine.shutdown()
