"""GrammarCompiler's bounds, with a fake compile (what it compiles does not matter here): a
compile past the timeout fails its requests and a fresh worker serves the queue; past
MAX_ABANDONED stuck compiles the queue waits for one to finish; an abort cancels a queued compile
and drops a running one's result unless another request waits; the cache evicts least recently
used entries past its bytes, in exact order. Then through the engine on the real model: the
timeout ends the request with an error naming the option, and max_parked_requests refuses with
CapacityError."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from typing import Any

import pytest

from tests.unit.test_engine_sampling import Served, started
from tt_backend.config import EngineConfig
from tt_backend.contract.errors import CapacityError
from tt_backend.engine.grammar_compiler import (
    BYTES_PER_SPEC_BYTE,
    ENTRY_BYTES,
    MAX_ABANDONED,
    CompileTimeout,
    GrammarCompiler,
    estimated_size,
)
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.structured import GrammarKind, StructuredOutputs


def regex(spec: str) -> StructuredOutputs:
    return StructuredOutputs(GrammarKind.REGEX, spec)


def key(spec: str) -> tuple[str, str]:
    return ("regex", spec)


def wait_until(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


class FakeCompile:
    """Compiles a regex to its text upper-cased; a held spec blocks until released; a spec
    starting with `bad` fails as a real compile error does."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self._held: dict[str, threading.Event] = {}
        self._started: dict[str, threading.Event] = {}

    def hold(self, spec: str) -> None:
        self._held[spec], self._started[spec] = threading.Event(), threading.Event()

    def release(self, spec: str) -> None:
        self._held[spec].set()

    def wait_started(self, spec: str) -> None:
        assert self._started[spec].wait(10)

    def release_all(self) -> None:
        for event in self._held.values():
            event.set()

    def __call__(self, constraint: StructuredOutputs) -> str:
        self.calls.append(constraint.spec)
        if constraint.spec in self._held:
            self._started[constraint.spec].set()
            assert self._held[constraint.spec].wait(30)
        if constraint.spec.startswith("bad"):
            raise ValueError(f"structured_outputs.regex is invalid: {constraint.spec}")
        return constraint.spec.upper()


@pytest.fixture
def fake() -> Iterator[FakeCompile]:
    compile_fn = FakeCompile()
    yield compile_fn
    compile_fn.release_all()  # abandoned threads end


def timeout_message(seconds: float) -> str:
    return f"structured_outputs: the grammar did not compile within grammar_compile_timeout_s={seconds:g} s"


def test_a_repeated_constraint_compiles_once_and_a_failed_one_is_retried(fake: FakeCompile) -> None:
    compiler = GrammarCompiler(fake)
    try:
        assert compiler.submit(regex("ab")).result(5) == "AB"
        assert compiler.submit(regex("ab")).result(5) == "AB"
        for _ in range(2):
            with pytest.raises(ValueError, match="^structured_outputs.regex is invalid: bad$"):
                compiler.submit(regex("bad")).result(5)
        assert fake.calls == ["ab", "bad", "bad"]
        assert compiler.cached == [key("ab")]
        seconds, hits = compiler.take_stats()
        assert (len(seconds), hits) == (3, 1)
    finally:
        compiler.shutdown()


def test_a_compile_past_the_timeout_fails_its_requests_and_a_fresh_worker_serves_the_queue(
        fake: FakeCompile) -> None:
    compiler = GrammarCompiler(fake, timeout_s=0.5)
    try:
        fake.hold("stuck")
        start = time.monotonic()
        stuck = [compiler.submit(regex("stuck")), compiler.submit(regex("stuck"))]
        fake.wait_started("stuck")
        time.sleep(0.25)
        queued = compiler.submit(regex("next"))  # its deadline is 0.25 s after the stuck one's
        for future in stuck:
            with pytest.raises(CompileTimeout, match=f"^{re.escape(timeout_message(0.5))}$"):
                future.result(5)
        assert time.monotonic() - start >= 0.5
        assert queued.result(5) == "NEXT"  # compiled by the fresh worker before its own deadline
        assert compiler.num_waiting == 0
        fake.release("stuck")  # the abandoned compile finishes: its result is dropped
        wait_until(lambda: len(compiler.take_stats()[0]) == 1)  # 'next' counted; 'stuck' pending
        wait_until(lambda: compiler._abandoned == 0)
        assert compiler.cached == [key("next")]
        assert fake.calls == ["stuck", "next"]
        assert compiler.submit(regex("stuck")).result(5) == "STUCK"  # compiled again, then cached
        assert compiler.cached == [key("next"), key("stuck")]
    finally:
        compiler.shutdown()


def test_past_max_abandoned_stuck_compiles_the_queue_waits_for_one_to_finish(fake: FakeCompile) -> None:
    assert MAX_ABANDONED == 2
    compiler = GrammarCompiler(fake, timeout_s=0.3)
    before = set(threading.enumerate())
    try:
        for spec in ("stuck1", "stuck2"):
            fake.hold(spec)
            with pytest.raises(CompileTimeout):
                compiler.submit(regex(spec)).result(5)
        waiting = compiler.submit(regex("later"))  # no worker: two threads still run stuck compiles
        with pytest.raises(CompileTimeout, match=f"^{re.escape(timeout_message(0.3))}$"):
            waiting.result(5)
        assert fake.calls == ["stuck1", "stuck2"]
        workers = [t for t in threading.enumerate() if t not in before and t.name == "tt-grammar"]
        assert len(workers) == 2  # the two abandoned ones; no third was started
        fake.release("stuck1")  # its thread takes the queue again
        assert compiler.submit(regex("later")).result(5) == "LATER"
        assert fake.calls == ["stuck1", "stuck2", "later"]
        assert compiler.cached == [key("later")]
    finally:
        compiler.shutdown()


def test_an_abort_before_the_compile_starts_cancels_it(fake: FakeCompile) -> None:
    compiler = GrammarCompiler(fake)
    try:
        fake.hold("first")
        first = compiler.submit(regex("first"))
        fake.wait_started("first")
        queued = compiler.submit(regex("second"))
        assert compiler.num_waiting == 2
        compiler.release(queued)
        assert queued.cancelled() and compiler.num_waiting == 1
        with pytest.raises(CancelledError):
            queued.result(0)
        fake.release("first")
        assert first.result(5) == "FIRST"
        compiler.release(first)  # done already: nothing changes
        assert fake.calls == ["first"]
        assert compiler.cached == [key("first")]
        assert compiler.submit(regex("second")).result(5) == "SECOND"
        assert fake.calls == ["first", "second"]
    finally:
        compiler.shutdown()


def test_an_abort_while_compiling_drops_the_result_unless_another_request_waits(fake: FakeCompile) -> None:
    compiler = GrammarCompiler(fake)
    try:
        fake.hold("alone")
        alone = compiler.submit(regex("alone"))
        fake.wait_started("alone")
        compiler.release(alone)
        fake.release("alone")
        wait_until(lambda: len(compiler.take_stats()[0]) == 1)
        assert compiler.cached == [] and compiler.num_waiting == 0

        fake.hold("shared")
        one, other = compiler.submit(regex("shared")), compiler.submit(regex("shared"))
        fake.wait_started("shared")
        compiler.release(one)
        fake.release("shared")
        assert other.result(5) == "SHARED" and one.cancelled()
        assert compiler.cached == [key("shared")]

        fake.hold("rejoined")
        gone = compiler.submit(regex("rejoined"))
        fake.wait_started("rejoined")
        compiler.release(gone)
        rejoined = compiler.submit(regex("rejoined"))  # joins the running compile: kept again
        fake.release("rejoined")
        assert rejoined.result(5) == "REJOINED"
        assert compiler.cached == [key("shared"), key("rejoined")]
        assert fake.calls == ["alone", "shared", "rejoined"]
    finally:
        compiler.shutdown()


def test_the_cache_evicts_least_recently_used_past_its_bytes_in_exact_order(fake: FakeCompile) -> None:
    sizes = {"a": 40, "b": 30, "c": 20, "d": 30, "e": 50, "huge": 101}
    compiler = GrammarCompiler(fake, cache_bytes=100, size_of=lambda c, _value: sizes[c.spec])

    def compiled(spec: str) -> tuple[list[tuple[str, str]], int]:
        assert compiler.submit(regex(spec)).result(5) == spec.upper()
        return compiler.cached, compiler.cache_used

    try:
        assert compiled("a") == ([key("a")], 40)
        assert compiled("b") == ([key("a"), key("b")], 70)
        assert compiled("c") == ([key("a"), key("b"), key("c")], 90)
        assert compiled("a") == ([key("b"), key("c"), key("a")], 90)  # a hit: now most recent
        assert compiled("d") == ([key("c"), key("a"), key("d")], 90)  # b evicted
        assert compiled("e") == ([key("d"), key("e")], 80)  # c, then a evicted
        assert compiled("huge") == ([key("d"), key("e")], 80)  # bigger than the cache: not kept
        assert compiled("b") == ([key("e"), key("b")], 80)  # compiled again; d evicted
        assert fake.calls == ["a", "b", "c", "d", "e", "huge", "b"]
    finally:
        compiler.shutdown()


def test_a_zero_byte_cache_keeps_nothing(fake: FakeCompile) -> None:
    compiler = GrammarCompiler(fake, cache_bytes=0)
    try:
        assert [compiler.submit(regex("x")).result(5) for _ in range(2)] == ["X", "X"]
        assert fake.calls == ["x", "x"] and compiler.cached == [] and compiler.cache_used == 0
    finally:
        compiler.shutdown()


def test_the_size_estimate_is_a_fixed_base_plus_a_multiple_of_the_constraint_bytes() -> None:
    assert (ENTRY_BYTES, BYTES_PER_SPEC_BYTE) == (96 << 10, 48)
    assert estimated_size(regex("abc"), object()) == 98304 + 144
    assert estimated_size(StructuredOutputs(GrammarKind.JSON_OBJECT, ""), object()) == 98304
    assert estimated_size(regex("é" * 10), object()) == 98304 + 48 * 20  # by UTF-8 bytes


def test_shutdown_cancels_what_waits(fake: FakeCompile) -> None:
    compiler = GrammarCompiler(fake)
    fake.hold("first")
    first, queued = compiler.submit(regex("first")), compiler.submit(regex("second"))
    fake.wait_started("first")
    compiler.shutdown()
    assert first.cancelled() and queued.cancelled()
    with pytest.raises(RuntimeError, match="^the grammar compiler is shut down$"):
        compiler.submit(regex("third")).result(0)


def test_the_engine_options_parse_and_validate() -> None:
    def options(config: EngineConfig) -> tuple[int, int, int]:
        return config.grammar_compile_timeout_s, config.grammar_cache_bytes, config.max_parked_requests

    parsed = EngineConfig.from_parameters({"grammar_compile_timeout_s": "30", "grammar_cache_bytes": "0",
                                           "max_parked_requests": "8"})
    assert options(parsed) == (30, 0, 8)
    assert options(EngineConfig()) == (10, 64 << 20, 64)
    refused = [("grammar_compile_timeout_s", 0, "grammar_compile_timeout_s must be >= 1, got 0"),
               ("max_parked_requests", 0, "max_parked_requests must be >= 1, got 0"),
               ("grammar_cache_bytes", -1, "grammar_cache_bytes must be >= 0 (0: no cache), got -1")]
    for name, value, message in refused:
        bad: dict[str, Any] = {name: value}
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            EngineConfig(**bad)


# ---- through the engine ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bounded() -> Iterator[Served]:
    yield from started(grammar_compile_timeout_s=2, max_parked_requests=2)


def constrained(choice: list[str]) -> SamplingParams:
    return SamplingParams.from_dict({"structured_outputs": {"choice": choice}, "temperature": 0,
                                     "max_tokens": 8})


class Outputs:
    def __init__(self) -> None:
        self.items: list[RequestOutput] = []
        self.done = threading.Event()

    def __call__(self, out: RequestOutput) -> None:
        self.items.append(out)
        if out.finished:
            self.done.set()


def held_compiles(served: Served) -> tuple[threading.Event, Callable[[], None]]:
    """Make the engine's compiles wait for the returned event; the callable restores them."""
    engine, release = served.engine, threading.Event()
    compile_fn = engine.grammars._compile

    def held(constraint: StructuredOutputs) -> Any:
        assert release.wait(60)
        return compile_fn(constraint)

    engine.grammars._compile = held

    def restore() -> None:
        release.set()
        engine.grammars._compile = compile_fn

    return release, restore


def test_a_compile_past_grammar_compile_timeout_s_ends_its_request_with_an_error(bounded: Served,
                                                                                tokenizer: Any) -> None:
    engine = bounded.engine
    prompt = list(tokenizer("Pick one:").input_ids)
    release, restore = held_compiles(bounded)
    try:
        out = Outputs()
        start = time.monotonic()
        engine.add_request("slow", prompt, constrained(["alpha", "beta"]), out)
        assert out.done.wait(10)
        assert time.monotonic() - start >= 2.0
        assert [(o.finish_reason, o.error) for o in out.items] == [("error", timeout_message(2))]
        free = bounded.generate([(prompt, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))])
        assert free[0][-1].finish_reason == "length"
    finally:
        restore()
    wait_until(lambda: engine.grammars._abandoned == 0)
    again = bounded.generate([(prompt, constrained(["alpha", "beta"]))])  # the fresh worker compiles it
    assert "".join(o.text for o in again[0]) in ("alpha", "beta") and again[0][-1].finish_reason == "stop"


def test_past_max_parked_requests_a_constrained_request_is_refused_with_capacity_error(
        bounded: Served, tokenizer: Any) -> None:
    engine = bounded.engine
    prompt = list(tokenizer("Pick one:").input_ids)
    release, restore = held_compiles(bounded)
    try:
        parked = [Outputs(), Outputs()]
        engine.add_request("parked-0", prompt, constrained(["red", "green"]), parked[0])
        engine.add_request("parked-1", prompt, constrained(["cat", "dog"]), parked[1])
        wait_until(lambda: engine.grammars.num_waiting == 2)
        with pytest.raises(CapacityError, match=re.escape(
                "the server is at capacity for structured outputs (2 requests wait for a grammar "
                "compile, max_parked_requests=2); retry later")):
            engine.add_request("refused", prompt, constrained(["one", "two"]), Outputs())
        free = Outputs()  # a request without a grammar is not limited
        engine.add_request("free", prompt, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), free)
        engine.abort("parked-1")
        assert parked[1].done.wait(10) and [o.finish_reason for o in parked[1].items] == ["abort"]
        assert engine.grammars.num_waiting == 1
        accepted = Outputs()
        engine.add_request("accepted", prompt, constrained(["one", "two"]), accepted)
        release.set()
        assert parked[0].done.wait(30) and accepted.done.wait(30) and free.done.wait(30)
        assert "".join(o.text for o in parked[0].items) in ("red", "green")
        assert "".join(o.text for o in accepted.items) in ("one", "two")
        assert free.items[-1].finish_reason == "length"
        assert engine.grammars.num_waiting == 0
    finally:
        restore()
