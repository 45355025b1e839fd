import pytest

from tt_backend.runtime.plan import PlannedRow, StepPlan
from tt_backend.runtime.prefill_plan import PrefillPlanConfig, PrefillWave, plan_prefill

CONFIG = PrefillPlanConfig(batching_supported=True, max_physical_batch=32, regular_chunk_size=2048)


def rows(*lengths: int, start: int = 0) -> StepPlan:
    return StepPlan("prefill", tuple(PlannedRow(tuple(range(n)), start, (0,) * 64, True) for n in lengths))


def test_fifteen_rows_make_one_padded_16_wave() -> None:
    assert plan_prefill(rows(*[20] * 15), CONFIG) == (PrefillWave(tuple(range(15)), 16, 32),)


def test_rows_bucket_by_padded_length_in_original_order() -> None:
    waves = plan_prefill(rows(100, 10, 120, 16, 3), CONFIG)
    assert waves == (PrefillWave((1, 3, 4), 4, 16), PrefillWave((0, 2), 2, 128))


@pytest.mark.parametrize("plan, config, reason", [
    (rows(20, 20), PrefillPlanConfig(False, 32, 2048), "batching unsupported"),
    (rows(20, 20, 20), PrefillPlanConfig(True, 2, 2048), "padded batch 4 above the maximum 2"),
    (rows(20, 20, start=16), CONFIG, "cached tokens"),
    (rows(300, 300), PrefillPlanConfig(True, 32, 256), "longer than the regular chunk"),
    (rows(*[4000] * 32), PrefillPlanConfig(True, 32, 8192), "32 x 4096 >= 128 Ki tokens"),
])
def test_sequential_fallbacks(plan: StepPlan, config: PrefillPlanConfig, reason: str) -> None:
    waves = plan_prefill(plan, config)
    assert waves == tuple(PrefillWave((i,), 1, len(r.token_ids)) for i, r in enumerate(plan.rows)), reason


def test_disable_batched_prefill_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISABLE_BATCHED_PREFILL", "1")
    config = PrefillPlanConfig.resolve(True, 32, 8, 2048)
    assert config == PrefillPlanConfig(False, 8, 2048)
    assert plan_prefill(rows(5, 6), config) == (PrefillWave((0,), 1, 5), PrefillWave((1,), 1, 6))
