"""Engine failure handling: a failing step fails only its requests; a dying engine thread
fails everything pending and refuses new work; the waiting queue has a limit."""

import re
import threading
from typing import Any

import pytest

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.contract.modes import StepMode
from tt_backend.contract.step import StepPlan
from tt_backend.engine.engine import LLMEngine
from tt_backend.engine.faults import (
    ALLOW_ENV,
    AsyncFaultInjectingRunner,
    FaultInjectingRunner,
    FaultSpec,
    inject_faults,
)
from tt_backend.engine.outputs import RequestOutput
from tt_backend.engine.pipeline import StepPipeline
from tt_backend.engine.stats import EngineStats
from tt_backend.engine.watchdog import StepTimeout
from tt_backend.runtime.step_runner import AsyncStepRunner
from tt_backend.sampling.params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return build_engine(EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=8))


def collect(outputs: dict[str, list[RequestOutput]]) -> Any:
    return lambda out: outputs.setdefault(out.request_id, []).append(out)


def run_until_idle(engine: LLMEngine) -> None:
    for _ in range(1000):
        if not engine.has_unfinished:
            return
        engine.step()
    raise AssertionError("engine did not finish")


def test_failing_step_fails_only_its_requests(engine: LLMEngine, chat_ids: Any) -> None:
    outputs: dict[str, list[RequestOutput]] = {}
    engine.add_request("alone", chat_ids("Name a colour."), GREEDY, collect(outputs))
    run_until_idle(engine)
    expected = [t for o in outputs["alone"] for t in o.new_token_ids]

    real = engine.runner.execute
    failed_plans: list[StepPlan] = []

    def flaky(plan: StepPlan, sampling: Any = None, feedback: Any = None) -> Any:
        if plan.mode == "prefill" and len(plan.rows) == 2 and not failed_plans:
            failed_plans.append(plan)
            raise RuntimeError("injected device fault")
        return real(plan, sampling, feedback)

    engine.runner.execute = flaky  # type: ignore[method-assign]
    try:
        engine.add_request("a", chat_ids("Name a colour."), GREEDY, collect(outputs))
        engine.step()  # prefill a
        engine.step()  # decode a
        engine.add_request("b", chat_ids("Hi"), GREEDY, collect(outputs))
        engine.add_request("c", chat_ids("Bye"), GREEDY, collect(outputs))
        engine.step()  # prefill b + c: fails
        run_until_idle(engine)
    finally:
        engine.runner.execute = real  # type: ignore[method-assign]
    assert len(failed_plans) == 1
    for rid in ("b", "c"):
        assert [(o.finish_reason, o.error) for o in outputs[rid]] == [
            ("error", "step failed: injected device fault")]
    assert [t for o in outputs["a"] for t in o.new_token_ids] == expected
    assert outputs["a"][-1].finish_reason == "length"
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)


def test_dead_engine_fails_pending_and_refuses_new(chat_ids: Any) -> None:
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=128))
    outputs: dict[str, list[RequestOutput]] = {}
    failed = threading.Event()
    engine.set_failure_listener(lambda exc: failed.set())

    def broken() -> Any:
        raise MemoryError("scheduler state corrupted")

    engine.scheduler.schedule = broken  # type: ignore[method-assign]
    engine.add_request("x", chat_ids("Hi"), GREEDY, collect(outputs))
    engine.start()
    assert failed.wait(timeout=30)
    assert [(o.finish_reason, o.error) for o in outputs["x"]] == [
        ("error", "engine failed: MemoryError('scheduler state corrupted')")]
    with pytest.raises(RuntimeError, match="the engine failed and serves no requests"):
        engine.add_request("y", chat_ids("Hi"), GREEDY, collect(outputs))
    engine.shutdown()


def test_waiting_queue_limit(chat_ids: Any) -> None:
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=128, max_num_seqs=2,
                                       max_waiting_requests=3))
    for i in range(5):
        engine.add_request(f"r{i}", chat_ids("Hi"), GREEDY, lambda out: None)
    with pytest.raises(RuntimeError, match=r"at capacity \(5 requests in flight, max_waiting_requests=3\)"):
        engine.add_request("r5", chat_ids("Hi"), GREEDY, lambda out: None)


def test_stats_count_exactly(chat_ids: Any) -> None:
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256))
    reports: list[EngineStats] = []
    engine.set_stats_listener(reports.append)
    prompt = chat_ids("Count to three.")
    engine.add_request("s1", prompt, SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
                       lambda out: None)
    run_until_idle(engine)
    engine.add_request("s2", prompt, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True),
                       lambda out: None)
    run_until_idle(engine)
    assert [r.step_mode for r in reports] == ["prefill"] + ["decode"] * 4 + ["prefill"] + ["decode"] * 2
    assert sum(r.prompt_tokens for r in reports) == 2 * len(prompt)
    assert sum(r.generation_tokens for r in reports) == 8
    assert sum(r.prefix_cache_queries for r in reports) == 2 * len(prompt)
    # The second request finds every full block of the first one's prompt but the last token's.
    assert sum(r.prefix_cache_hits for r in reports) == (len(prompt) - 1) // 16 * 16
    finished = [f for r in reports for f in r.finished]
    assert [(f.reason, f.num_generation_tokens) for f in finished] == [("length", 5), ("length", 3)]
    assert all(f.ttft_s is not None and f.e2e_s >= f.ttft_s for f in finished)
    assert reports[-1].kv_cache_usage == 0 and reports[-1].num_running == 0
    # Tokens computed per step: the prompt (the second without its cached blocks), one per decode.
    cached = (len(prompt) - 1) // 16 * 16
    assert [r.step_tokens for r in reports] == [len(prompt)] + [1] * 4 + [len(prompt) - cached] + [1] * 2
    # One interval per token after a request's first, reported with the step that sampled it; a
    # request's decode time is the sum of its intervals, and inference is prefill plus decode.
    assert [len(r.inter_token_latencies) for r in reports] == [0] + [1] * 4 + [0] + [1] * 2
    intervals = [r.inter_token_latencies[0] for r in reports if r.inter_token_latencies]
    for done, own in zip(finished, (intervals[:4], intervals[4:]), strict=True):
        assert done.prefill_time_s is not None and done.decode_time_s is not None
        assert done.decode_time_s == pytest.approx(sum(own))
        assert done.inference_time_s == pytest.approx(done.prefill_time_s + done.decode_time_s)
        assert done.time_per_output_token_s == pytest.approx(done.decode_time_s / (len(own)))


TRIGGER = 9999
"""The first token of the prompts that meet an injected fault (the good ones start with <|im_start|>)."""


def test_fault_injection_is_refused_without_the_test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    with pytest.raises(ValueError, match=r"fault_injection='raise:decode:5' is for reliability tests "
                       r"only: the server's environment must set TT_BACKEND_ALLOW_FAULT_INJECTION=1"):
        FaultSpec.parse("raise:decode:5")
    monkeypatch.setenv(ALLOW_ENV, "1")
    for bad in ("raise:decode", "explode:decode:5", "hang:sample:5", "raise:prefill:x"):
        with pytest.raises(ValueError, match=rf"fault_injection='{bad}': '{bad}' is not "
                           r"<raise\|hang>:<prefill\|decode>:<token id>"):
            FaultSpec.parse(bad)
    assert FaultSpec.parse("hang:prefill:7, raise:decode:8") == (
        FaultSpec("hang", StepMode.PREFILL, 7), FaultSpec("raise", StepMode.DECODE, 8))
    assert FaultSpec.parse("") == ()


def test_async_scheduling_needs_a_runner_that_launches_ahead(engine: LLMEngine,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_ENV, "1")
    specs = FaultSpec.parse(f"raise:decode:{TRIGGER}")
    assert isinstance(engine.runner, AsyncStepRunner)  # the torch ModelRunner
    kept = inject_faults(engine.runner, specs, frozenset, threading.Event())  # it stays an async runner
    assert type(kept) is AsyncFaultInjectingRunner and isinstance(kept, AsyncStepRunner)
    sync_only = FaultInjectingRunner(engine.runner, specs, frozenset, threading.Event())
    assert not isinstance(sync_only, AsyncStepRunner)
    with pytest.raises(ValueError, match=r"^async_scheduling=true, but the FaultInjectingRunner cannot "
                       r"launch a step before the previous one is read \(no async decode\); set "
                       r"async_scheduling=false$"):
        StepPipeline(engine.scheduler, sync_only, engine.requests, True, engine.max_model_len)
    synchronous = StepPipeline(engine.scheduler, sync_only, engine.requests, False, engine.max_model_len)
    assert synchronous.ahead is None


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_an_injected_decode_fault_fails_its_batch_and_the_next_requests_succeed(
        monkeypatch: pytest.MonkeyPatch, chat_ids: Any, async_scheduling: bool) -> None:
    monkeypatch.setenv(ALLOW_ENV, "1")
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256, async_scheduling=async_scheduling,
                                       fault_injection=f"raise:decode:{TRIGGER}"))
    outputs: dict[str, list[RequestOutput]] = {}
    engine.add_request("faulty", [TRIGGER, *chat_ids("Name a colour.")], GREEDY, collect(outputs))
    run_until_idle(engine)
    engine.add_request("good", chat_ids("Name a colour."), GREEDY, collect(outputs))
    run_until_idle(engine)
    # Its prefill ran (one token out), then its first decode step raised.
    assert [(o.finish_reason, o.error) for o in outputs["faulty"]] == [
        (None, None), ("error", "step failed: injected fault in the decode step (fault_injection)")]
    assert outputs["good"][-1].finish_reason == "length"
    assert sum(len(o.new_token_ids) for o in outputs["good"]) == GREEDY.max_tokens
    assert isinstance(engine.runner, FaultInjectingRunner) and engine.runner.injected == 1
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)
    engine.shutdown()


def test_the_watchdog_fails_the_engine_when_a_step_hangs(monkeypatch: pytest.MonkeyPatch,
                                                         chat_ids: Any) -> None:
    monkeypatch.setenv(ALLOW_ENV, "1")
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256, step_timeout_s=1,
                                       fault_injection=f"hang:decode:{TRIGGER}"))
    failures: list[BaseException] = []
    failed = threading.Event()
    engine.set_failure_listener(lambda exc: (failures.append(exc), failed.set()))
    engine.start()
    engine.add_request("hung", [TRIGGER, *chat_ids("Hi")], GREEDY, lambda out: None)
    assert failed.wait(timeout=60)
    assert isinstance(failures[0], StepTimeout)
    assert re.fullmatch(r"the decode step of 1 request\(s\) has run 1\.\d s, past step_timeout_s=1: "
                        r"the device or the model is hung", str(failures[0]))
    with pytest.raises(RuntimeError, match="the engine failed and serves no requests: StepTimeout"):
        engine.add_request("next", chat_ids("Hi"), GREEDY, lambda out: None)
    engine.shutdown()  # releases the injected hang, so the engine thread ends
    assert len(failures) == 1
