import pytest

from tt_backend.config import EngineConfig
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.runtime.prefill_plan import (
    DENSE_BATCHES,
    PrefillPlanConfig,
    PrefillWave,
    padded_length,
    plan_prefill,
)

CONFIG = PrefillPlanConfig(batching_supported=True, max_physical_batch=32, regular_chunk_size=2048)


def rows(*lengths: int, start: int = 0) -> StepPlan:
    return StepPlan("prefill", tuple(PlannedRow(tuple(range(n)), start, (0,) * 64, True) for n in lengths))


def test_fifteen_rows_make_one_padded_16_wave() -> None:
    assert plan_prefill(rows(*[20] * 15), CONFIG) == (PrefillWave(tuple(range(15)), 16, 32),)


def test_dense_batches_pad_a_wave_by_at_most_a_few_rows() -> None:
    dense = PrefillPlanConfig(True, 32, 2048, max_wave_tokens=2048, batches=DENSE_BATCHES)
    assert plan_prefill(rows(*[100] * 7), dense) == (PrefillWave(tuple(range(7)), 7, 112),)
    assert plan_prefill(rows(*[100] * 9), dense) == (PrefillWave(tuple(range(9)), 10, 112),)
    assert plan_prefill(rows(*[20] * 17), dense) == (PrefillWave(tuple(range(17)), 20, 32),)
    # 20 x 112 tokens exceed max_wave_tokens (2048): 16 rows fit (18 is not a physical batch).
    assert plan_prefill(rows(*[100] * 20), dense) == (PrefillWave(tuple(range(16)), 16, 112),
                                                      PrefillWave(tuple(range(16, 20)), 4, 112))
    assert plan_prefill(rows(*[100] * 7), CONFIG) == (PrefillWave(tuple(range(7)), 8, 112),)


def test_rows_bucket_by_padded_length_in_original_order() -> None:
    waves = plan_prefill(rows(100, 10, 120, 16, 3), CONFIG)
    assert waves == (PrefillWave((1, 3, 4), 4, 16), PrefillWave((0, 2), 2, 128))
    # A wave is padded to its longest row's quarter-step bucket, not to the power of two.
    assert plan_prefill(rows(100, 90, 97), CONFIG) == (PrefillWave((0, 1, 2), 4, 112),)


@pytest.mark.parametrize("n, padded", [(1, 16), (16, 16), (17, 32), (33, 48), (64, 64), (65, 80),
                                       (100, 112), (128, 128), (129, 160), (250, 256), (257, 320),
                                       (4000, 4096)])
def test_length_buckets_are_quarter_steps_of_the_power_of_two(n: int, padded: int) -> None:
    assert padded_length(n) == padded


@pytest.mark.parametrize("n, padded", [(1, 4), (5, 8), (16, 16), (17, 20), (100, 100), (101, 104),
                                       (128, 128), (129, 136), (257, 272), (2000, 2048)])
def test_fine_length_buckets_are_sixteenth_steps(n: int, padded: int) -> None:
    assert padded_length(n, fine=True) == padded
    assert padded_length(n, fine=True) <= padded_length(n)  # never past the coarse bucket's bounds


def test_fine_lengths_pad_a_wave_to_its_longest_row_in_fine_steps() -> None:
    fine = PrefillPlanConfig(True, 32, 2048, max_wave_tokens=2048, batches=DENSE_BATCHES, fine_lengths=True)
    assert plan_prefill(rows(100, 97, 100), fine) == (PrefillWave((0, 1, 2), 3, 100),)
    assert plan_prefill(rows(100, 97, 100), CONFIG) == (PrefillWave((0, 1, 2), 4, 112),)
    # 20 x 100 tokens fit max_wave_tokens: one wave, where 112-token rows took 16 + 4
    assert plan_prefill(rows(*[100] * 20), fine) == (PrefillWave(tuple(range(20)), 20, 100),)


@pytest.mark.parametrize("plan, config, reason", [
    (rows(20, 20), PrefillPlanConfig(False, 32, 2048), "batching unsupported"),
    (rows(20, 20, 20), PrefillPlanConfig(True, 2, 2048), "padded batch 4 above the maximum 2"),
    (rows(20, 20, start=16), CONFIG, "cached tokens"),
    (rows(300, 300), PrefillPlanConfig(True, 32, 256), "longer than the regular chunk"),
    (rows(50, 50), PrefillPlanConfig(True, 32, 2048, max_wave_tokens=100), "2 x 64 above max_wave_tokens"),
])
def test_sequential_fallbacks(plan: StepPlan, config: PrefillPlanConfig, reason: str) -> None:
    waves = plan_prefill(plan, config)
    # Sequential rows are still padded to their length bucket, so their shapes are bounded too.
    assert waves == tuple(PrefillWave((i,), 1, padded_length(len(r.token_ids)))
                          for i, r in enumerate(plan.rows)), reason


def test_bucket_over_max_wave_tokens_is_cut_into_the_fewest_fitting_waves() -> None:
    config = PrefillPlanConfig(True, 32, 2048, max_wave_tokens=2048)
    waves = plan_prefill(rows(*[100] * 20), config)  # 20 x 112 padded: 32 x 112 would not fit
    assert waves == (PrefillWave(tuple(range(16)), 16, 112), PrefillWave(tuple(range(16, 20)), 4, 112))
    # 32 rows of 4096 tokens: 16 x 4096 is the largest wave under 128 Ki tokens.
    big = plan_prefill(rows(*[4000] * 32), PrefillPlanConfig(True, 32, 8192))
    assert big == (PrefillWave(tuple(range(16)), 16, 4096), PrefillWave(tuple(range(16, 32)), 16, 4096))


def test_disable_batched_prefill_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISABLE_BATCHED_PREFILL", "1")
    assert EngineConfig().disable_batched_prefill is True
    config = PrefillPlanConfig.resolve(True, 32, 8, 2048,
                                       batching_disabled=EngineConfig().disable_batched_prefill)
    assert config == PrefillPlanConfig(False, 8, 2048, max_wave_tokens=2048)
    assert plan_prefill(rows(5, 6), config) == (PrefillWave((0,), 1, 16), PrefillWave((1,), 1, 16))


def test_resolve_honours_the_explicit_argument_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISABLE_BATCHED_PREFILL", "1")
    assert PrefillPlanConfig.resolve(True, 32, 8, 2048, batching_disabled=False) == \
        PrefillPlanConfig(True, 8, 2048, max_wave_tokens=2048)
    monkeypatch.delenv("DISABLE_BATCHED_PREFILL")
    assert PrefillPlanConfig.resolve(True, 32, 8, 2048, batching_disabled=True) == \
        PrefillPlanConfig(False, 8, 2048, max_wave_tokens=2048)
    # The model's own support still decides when the user does not disable it.
    assert PrefillPlanConfig.resolve(False, 32, 8, 2048, batching_disabled=False) == \
        PrefillPlanConfig(False, 8, 2048, max_wave_tokens=2048)
