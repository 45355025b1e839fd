"""Async decode overlap: the same greedy tokens as the synchronous engine, drains where the steady
path ends, and no KV block left behind after finishes and aborts."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import CHAT_PROMPTS
from tests.unit.test_engine import serve
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.params import SamplingParams


def run(async_scheduling: bool, requests: list[tuple[list[int], SamplingParams]], lanes: int = 1
        ) -> tuple[list[list[RequestOutput]], LLMEngine]:
    """All requests are queued before the engine starts, so both modes batch them identically."""
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=8 // lanes,
                                       data_parallel_size=lanes, async_scheduling=async_scheduling))
    return serve(engine, requests, queue_before_start=True), engine


def tokens(outputs: list[list[RequestOutput]]) -> list[tuple[list[int], str | None]]:
    return [([t for o in outs for t in o.new_token_ids], outs[-1].finish_reason) for outs in outputs]


def test_batch_finishing_by_length_matches_sync(chat_ids: Any) -> None:
    requests = [(chat_ids(p), SamplingParams(max_tokens=10 + 6 * i, ignore_eos=True))
                for i, p in enumerate(CHAT_PROMPTS)]
    sync, _ = run(False, requests)
    overlapped, engine = run(True, requests)
    assert tokens(overlapped) == tokens(sync)
    assert [len(t) for t, _ in tokens(sync)] == [10, 16, 22, 28]
    # Steady decode ran ahead (each step fed the previous one's tokens back); each length finish
    # was seen coming and drained the pipeline first: 4 finishes, one drain each.
    assert engine.runner.traced_steps > 20 and engine.pipeline.decode_drains == 4


def test_two_lanes_run_ahead_together_and_match_sync(chat_ids: Any) -> None:
    requests = [(chat_ids(p), SamplingParams(max_tokens=8 + 5 * i, ignore_eos=True))
                for i, p in enumerate(CHAT_PROMPTS * 2)]
    sync, _ = run(False, requests, lanes=2)
    overlapped, engine = run(True, requests, lanes=2)
    assert tokens(overlapped) == tokens(sync)
    assert engine.pipeline.decode_drains == len(requests)  # each foreseen length finish drained once


def test_eos_finish_and_min_tokens_match_sync(chat_ids: Any, tokenizer: Any) -> None:
    ids = chat_ids("Say OK.")
    requests = [(ids, SamplingParams(max_tokens=64, temperature=0)),
                (ids, SamplingParams(max_tokens=12, min_tokens=12, temperature=0))]
    runs = []
    for request in requests:  # one at a time: the EOS arrives while the next step is in flight
        sync, _ = run(False, [request])
        overlapped, _ = run(True, [request])
        assert tokens(overlapped) == tokens(sync)
        runs.append(tokens(overlapped)[0])
    eos_run, banned_run = runs
    assert eos_run[1] == "stop" and eos_run[0][-1] == tokenizer.eos_token_id and len(eos_run[0]) < 64
    assert banned_run[1] == "length" and tokenizer.eos_token_id not in banned_run[0]


def test_abort_while_steps_are_in_flight_frees_everything(chat_ids: Any) -> None:
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256, async_scheduling=True))
    outputs: list[RequestOutput] = []
    got_tokens = threading.Event()
    finished = threading.Event()

    def on_output(out: RequestOutput) -> None:
        outputs.append(out)
        if len(outputs) >= 5:
            got_tokens.set()
        if out.finished:
            finished.set()

    engine.start()
    try:
        engine.add_request("a", chat_ids(CHAT_PROMPTS[0]), SamplingParams(max_tokens=200, ignore_eos=True),
                           on_output)
        assert got_tokens.wait(60)
        engine.abort("a")
        assert finished.wait(60)
    finally:
        engine.shutdown()
    assert outputs[-1].finish_reason == "abort" and sum(len(o.new_token_ids) for o in outputs) < 200
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)
    assert engine.runner.reader.num_pending == 0


def test_with_async_every_step_and_its_host_sampling_run_on_the_device_thread(
        chat_ids: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread runs torch's parallel regions (devices/torch/own_thread.py says what a second
    costs): the prefill steps and the host path too, not only the decode steps launched ahead."""
    from tt_backend.models.llama import LlamaForCausalLM
    from tt_backend.sampling.host_sampler import HostBatch

    seen: dict[str, set[str]] = {"forward": set(), "host": set()}
    forward, host = LlamaForCausalLM.forward, HostBatch.sample

    def recording_forward(self: LlamaForCausalLM, *args: Any) -> Any:
        seen["forward"].add(threading.current_thread().name)
        return forward(self, *args)

    def recording_host(self: HostBatch, logits: Any) -> Any:
        seen["host"].add(threading.current_thread().name)
        return host(self, logits)

    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=4, trace_mode="none",
                                       async_scheduling=True))
    monkeypatch.setattr(LlamaForCausalLM, "forward", recording_forward)  # (eager steps call it)
    monkeypatch.setattr(HostBatch, "sample", recording_host)
    requests = [(chat_ids(CHAT_PROMPTS[0]), SamplingParams(max_tokens=8, ignore_eos=True)),
                (chat_ids(CHAT_PROMPTS[1]), SamplingParams(max_tokens=8, ignore_eos=True, logprobs=2))]
    outputs = serve(engine, requests, queue_before_start=True)
    assert [sum(len(o.new_token_ids) for o in outs) for outs in outputs] == [8, 8]
    assert seen == {"forward": {"tt-device"}, "host": {"tt-device"}}
