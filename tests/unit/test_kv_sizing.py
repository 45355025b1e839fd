"""The KV cache sized after the model loads (kv_cache_memory_bytes=auto): the late, shrink-only
capacity step over the real model, with the device's memory readings replaced by given numbers
where the test needs them exact."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from tt_backend.assembly import build_engine, kv_sizing
from tt_backend.config import EngineConfig
from tt_backend.devices.torch.memory import PeakReading

MIB = 1 << 20
BLOCK_BYTES = 2 * 30 * 3 * 64 * 4 * 16
"""SmolLM2-135M in float32: K and V of 30 layers x 3 KV heads x 64 dims, 16 tokens a block."""
CONFIG = {"dtype": "float32", "max_model_len": 256, "max_num_seqs": 8, "trace_mode": "none"}


def _readings(monkeypatch: pytest.MonkeyPatch, free: int, peak: int) -> list[int]:
    """Free memory and the profiled peak as given; returns the token counts profiled."""
    profiled: list[int] = []
    monkeypatch.setattr(kv_sizing, "free_bytes", lambda device: (free, "test"))

    def measure(device: Any, work: Callable[[], Any]) -> tuple[Any, PeakReading]:
        profiled.append(1)
        return work(), PeakReading(peak, "test")

    monkeypatch.setattr(kv_sizing, "measure_peak", measure)
    return profiled


def test_auto_takes_the_fraction_of_what_weights_and_the_step_peak_leave(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    profiled = _readings(monkeypatch, free=60 * MIB, peak=1 * MIB)
    with caplog.at_level(logging.INFO, logger="tt_backend.assembly.torch_engine"):
        engine = build_engine(EngineConfig(**CONFIG))
    try:
        # the peak at 128 profiled tokens scales to the 2048-token step budget: 16 MiB
        expected = int(0.5 * (60 * MIB - 16 * MIB)) // BLOCK_BYTES
        assert (engine.config.num_kv_blocks, engine.scheduler.config.num_blocks) == (expected, expected)
        assert engine.runner.kv.config.num_blocks == expected and profiled == [1]
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("kv cache:"))
        assert f"-> {expected} blocks of 16 per lane x 1 lane(s)" in line and "60 MiB free" in line
        assert "ceiling 128 blocks per lane" in line
    finally:
        engine.shutdown()


def test_auto_stops_at_every_seat_at_max_model_len_and_lanes_share_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _readings(monkeypatch, free=1 << 40, peak=0)
    engine = build_engine(EngineConfig(**{**CONFIG, "max_num_seqs": 4, "data_parallel_size": 2}))
    try:
        assert engine.config.num_kv_blocks == 4 * 256 // 16  # the ceiling: 4 seats x 16 blocks
        assert engine.runner.kv.config.num_blocks == 2 * 64
    finally:
        engine.shutdown()


def test_auto_refuses_memory_that_cannot_hold_one_request_naming_the_options(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _readings(monkeypatch, free=20 * MIB, peak=1 * MIB)
    with pytest.raises(ValueError, match=r"kv_cache_memory_bytes=auto: .* fewer than one request of "
                                         r"max_model_len=256 needs \(16\)"):
        build_engine(EngineConfig(**CONFIG))


def test_an_explicit_budget_or_block_count_measures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    profiled = _readings(monkeypatch, free=0, peak=0)
    engine = build_engine(EngineConfig(**CONFIG, kv_cache_memory_bytes=64 * BLOCK_BYTES))
    try:
        assert engine.config.num_kv_blocks == 64 and profiled == []
    finally:
        engine.shutdown()


def test_the_options_parse_auto_and_check_the_fraction() -> None:
    config = EngineConfig.from_parameters({"kv_cache_memory_bytes": "auto",
                                           "kv_cache_memory_fraction": "0.25"})
    assert (config.kv_cache_memory_bytes, config.kv_cache_memory_fraction) == (None, 0.25)
    for bad in ("0", "1.5", "nan"):
        with pytest.raises(ValueError, match="kv_cache_memory_fraction must be in"):
            EngineConfig.from_parameters({"kv_cache_memory_fraction": bad})
    with pytest.raises(ValueError, match="kv_cache_memory_fraction='x' is not a number"):
        EngineConfig.from_parameters({"kv_cache_memory_fraction": "x"})


class _ScratchRunner:
    """What the profile asks of its scratch runner (the real one is exercised above)."""

    def allocate(self) -> None: ...

    def execute(self, plan: Any) -> None: ...

    def close(self) -> None: ...


def test_the_device_cap_bounds_an_auto_cache_whatever_is_free(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from tt_backend.devices.torch.device import TorchDevice

    _readings(monkeypatch, free=1 << 40, peak=0)
    config = EngineConfig(**{**CONFIG, "max_model_len": 8192, "data_parallel_size": 2}).resolve_for_model(
        8192, BLOCK_BYTES // 16)
    cap = TorchDevice.for_device(torch.device("cpu")).auto_kv_cache_cap
    assert cap == 4 << 30
    sizing = kv_sizing.size_kv_cache(config, BLOCK_BYTES, torch.device("cpu"),
                                     lambda c: _ScratchRunner(), cap)  # type: ignore[arg-type,return-value]
    assert sizing.blocks_per_lane == (4 << 30) // (2 * BLOCK_BYTES) < config.num_kv_blocks == 8 * 512
    assert "at most 4096 MiB on this device" in sizing.describe(config, BLOCK_BYTES)
