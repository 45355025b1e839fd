"""The traced runtime on the default model (fp32): coverage preflight, the compile gate, cleanup
order, late KV capacity, and traced steps equal to eager ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tt_backend.assembly.torch_engine import build_runner
from tt_backend.config import EngineConfig
from tt_backend.contract.modes import TraceMode
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.cleanup import CleanupError
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.models.loader import LoadedModel, load_model
from tt_backend.runtime.config import StepShape
from tt_backend.runtime.program_compiler import CompileGateClosedError
from tt_backend.runtime.runner import ModelRunner
from tt_backend.runtime.trace_compiler import TraceCoverageError

BLOCK = 16


@pytest.fixture(scope="module")
def model(model_dir: Path) -> LoadedModel:
    return load_model(model_dir, ComputePlan.resolve(torch.device("cpu"), "float32"))


def runner(model: LoadedModel, trace_mode: TraceMode | str) -> ModelRunner:
    config = EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=4, max_num_batched_tokens=256,
                          num_kv_blocks=32, trace_mode=trace_mode)
    config = config.resolve_for_model(8192, 1)
    r = build_runner(config, model.module, model.capabilities, model.spec, torch.float32, torch.device("cpu"))
    r.allocate()
    return r


def prefill(*rows: tuple[int, int, tuple[int, ...]]) -> StepPlan:
    """Rows of (start, length, blocks); token ids are arbitrary but fixed."""
    return StepPlan("prefill", tuple(PlannedRow(tuple(range(100, 100 + n)), start, blocks, True)
                                     for start, n, blocks in rows))


def decode(*rows: tuple[int, tuple[int, ...]]) -> StepPlan:
    """Rows of (position, blocks)."""
    return StepPlan("decode", tuple(PlannedRow((300 + i,), pos, blocks, True)
                                    for i, (pos, blocks) in enumerate(rows)))


def test_trace_miss_raises_before_any_kv_write(model: LoadedModel) -> None:
    r = runner(model, "all")
    assert r.traced is not None and r.traces is not None
    # Capture only the first wave's shape: a 2-row wave of 32 tokens.
    covered = StepShape("prefill", 2, 32, 2)
    r.traced.compile(covered)
    r.traces.capture_all()
    # waves: 2x32, then 1x60 (the CPU device's fine length buckets: 60 stays 60)
    plan = prefill((0, 20, (0, 1)), (0, 30, (2, 3)), (0, 60, (4, 5, 6, 7)))
    assert [c.shape for c in r.eager.prepare(plan)] == [covered, StepShape("prefill", 1, 60, 4)]
    before = r.kv.context.cache.clone()
    with pytest.raises(TraceCoverageError, match="prefill:b1:t60:w4"):
        r.execute(plan)
    assert torch.equal(r.kv.context.cache, before)  # not even the covered first wave ran
    r.close()


def test_compile_after_the_gate_closes_is_refused(model: LoadedModel) -> None:
    r = runner(model, "decode_only")
    r.programs.compile(StepShape("prefill", 1, 16, 1))
    r.programs.close_gate()
    r.programs.compile(StepShape("prefill", 1, 16, 1))  # already compiled: idempotent
    with pytest.raises(CompileGateClosedError, match="prefill:b1:t20:w2"):
        r.execute(prefill((0, 20, (0, 1))))
    assert r.eager_steps == 1 and r.kv.context.cache.abs().sum() == 0
    assert [p.shape.key for p in r.programs.programs] == ["prefill:b1:t16:w1"]
    r.close()


def test_warmup_covers_every_shape_the_planner_produces(model: LoadedModel) -> None:
    r = runner(model, "all")
    report = r.warmup()
    assert report.compiled == report.captured == len(r.programs.programs)
    assert r.programs.gate_open is False
    plans = [
        decode((5, (0,))), decode((40, (0, 1, 2)), (200, tuple(range(3, 16)))),
        decode(*[(i * 7, (i,)) for i in range(3)]),
        prefill((0, 1, (0,))), prefill((0, 256, tuple(range(16)))),
        prefill((0, 17, (0, 1)), (0, 31, (2, 3)), (0, 9, (4,))), prefill((48, 100, tuple(range(10)))),
        prefill((240, 16, tuple(range(16)))),
    ]
    for plan in plans:
        for call in r.eager.prepare(plan):
            assert r.traces is not None and r.traces.covers(call.shape), call.shape.key
        r.execute(plan)  # a miss would raise
    r.close()


def test_traced_steps_equal_eager_steps(model: LoadedModel) -> None:
    """Same logits and the same K/V written, bit for bit, across decode and prefill shapes."""
    r = runner(model, "all")
    r.warmup()
    assert r.traced is not None
    cache = r.kv.context.cache
    torch.manual_seed(0)
    cache.normal_()
    for plan in (prefill((0, 20, (0, 1)), (0, 30, (2, 3))), prefill((32, 40, (4, 5, 6, 7, 8))),
                 decode((20, (0, 1))), decode((20, (0, 1)), (31, (2, 3)), (71, (4, 5, 6, 7, 8)))):
        start = cache.clone()
        traced = r.traced.execute(plan)
        after_traced = cache.clone()
        cache.copy_(start)
        eager = r.eager.execute(plan)
        assert torch.equal(traced, eager)
        assert torch.equal(after_traced[:, :, :-1], cache[:, :, :-1])  # all but the padding sink
        assert not torch.equal(cache, start)
    r.close()


def test_late_kv_capacity_shrinks_geometry_without_rebuilding_the_model(model: LoadedModel) -> None:
    config = EngineConfig(dtype="float32", max_model_len=256, num_kv_blocks=64, trace_mode="none")
    config = config.resolve_for_model(8192, 1)
    r = build_runner(config, model.module, model.capabilities, model.spec, torch.float32, torch.device("cpu"))
    steps = r.eager.steps
    layout = r.configure_capacity(16)
    assert (layout.num_blocks, layout.block_size, layout.max_blocks_per_seq) == (16, BLOCK, 16)
    assert r.eager.decode.layout == layout == r.eager.prefill.layout == r.kv.layout
    with pytest.raises(ValueError, match="may only shrink"):
        r.configure_capacity(17)
    r.allocate()
    assert r.kv.context.cache.shape[2] == 17  # 16 blocks + the padding sink
    assert r.eager.steps is steps
    for op in ("prefill", "decode"):  # one model under every step; each operation's variants share a body
        body = steps[op, "logits"].body
        assert body.model is model.module and body.decode == (op == "decode")
        assert all(s.body is body for (o, v), s in steps.items() if o == op and v != "logits")
    with pytest.raises(RuntimeError, match="capacity is final"):
        r.configure_capacity(8)
    assert r.execute(prefill((0, 20, (0, 1)))).shape == (1, model.spec.vocab_size)
    r.close()


def test_cleanup_runs_in_order_once_and_retries_failed_releases(model: LoadedModel) -> None:
    r = runner(model, "decode_only")
    r.warmup()
    assert r.traces is not None
    real_release = r.traces.release
    calls = []

    def failing_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("trace release failed")
        real_release()

    r.traces.release = failing_once  # type: ignore[method-assign]
    with pytest.raises(CleanupError, match="traces"):
        r.close()
    assert r.cleanup_log.events == ["output_reads", "traces:failed", "programs", "kv_cache", "device"]
    with pytest.raises(RuntimeError, match="closed"):
        r.execute(decode((5, (0,))))
    r.close()  # retries only the orphan
    r.close()  # nothing left: no event
    assert r.cleanup_log.events[-1] == "traces" and len(r.cleanup_log.events) == 6
    assert calls == [1, 1] and not r.cleanup_log.orphans
    assert not r.kv.bound and r.traces.shapes == ()


def test_disable_batched_prefill_reaches_the_prefill_plan(model: LoadedModel,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISABLE_BATCHED_PREFILL", "1")
    for config, batched in ((EngineConfig(dtype="float32", max_model_len=256, trace_mode="none"), False),
                            (EngineConfig(dtype="float32", max_model_len=256, trace_mode="none",
                                          disable_batched_prefill=False), True)):
        config = config.resolve_for_model(8192, 1)
        r = build_runner(config, model.module, model.capabilities, model.spec, torch.float32,
                         torch.device("cpu"))
        assert r.eager.prefill.plan.batching_supported is batched
        r.close()
