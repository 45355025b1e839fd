"""The TT load's rules that need no device (tt_backend/models/tt_loader.py, devices/tt/mesh.py):
KV heads per chip as the plugin shapes the cache, KV blocks from a per-chip budget or the
generator's token capacity, HF_MODEL for tt-metal's ModelArgs, the decode batch per submesh, and
device=tt's defaults (block size 32; ttnn named first when it is missing)."""

import importlib.util
import logging
from pathlib import Path
from typing import Any

import pytest

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.devices.tt.mesh import check_decode_batch
from tt_backend.models.tt_loader import (
    FALLBACK_MAX_TOKENS_ALL_USERS,
    kv_heads_per_chip,
    set_hf_model,
    tt_kv_blocks,
)

HAS_TTNN = importlib.util.find_spec("ttnn") is not None


@pytest.mark.parametrize("heads, chips, per_chip", [(8, 1, 8), (8, 2, 4), (8, 8, 1), (8, 32, 1), (3, 4, 1),
                                                     (3, 2, 1), (32, 8, 4)])
def test_kv_heads_per_chip_follow_the_plugins_kv_cache_shape(heads: int, chips: int, per_chip: int) -> None:
    # vllm-tt-plugin model_runner._kv_cache_shape: num_kv_heads // min(chips per submesh, num_kv_heads)
    assert kv_heads_per_chip(heads, chips) == per_chip


class Sized:
    asked: dict[str, Any] = {}

    @classmethod
    def get_max_tokens_all_users(cls, **kwargs: Any) -> int:
        cls.asked = kwargs
        return 65536


def test_kv_blocks_come_from_the_option_a_per_chip_budget_or_the_generator() -> None:
    config = EngineConfig(device="tt", max_num_seqs=4, max_model_len=512, data_parallel_size=2, model="m")
    assert tt_kv_blocks(EngineConfig(device="tt", num_kv_blocks=64), object, 1000, 8) == 64
    # kv_cache_memory_bytes is each chip's: every chip of a lane holds its share of every block
    assert tt_kv_blocks(EngineConfig(device="tt", kv_cache_memory_bytes=1 << 30), object, 4080, 8) == \
        (1 << 30) // (4080 * 32)
    # auto: the generator's capacity for one lane, plus a block per sequence (the plugin's rule)
    assert tt_kv_blocks(config, Sized, 4080, 8) == (65536 + 32 * 4) // 32
    assert Sized.asked == {"model_name": "m", "num_devices": 8, "tt_data_parallel": 2, "max_model_len": 512,
                           "max_num_seqs": 4}
    assert tt_kv_blocks(config, object, 4080, 8) == (FALLBACK_MAX_TOKENS_ALL_USERS + 32 * 4) // 32


def test_hf_model_is_set_for_tt_metals_model_args(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    import os
    monkeypatch.setenv("HF_MODEL", "")  # restored after the test, whatever set_hf_model does
    monkeypatch.delenv("HF_MODEL")
    set_hf_model(tmp_path)
    assert os.environ["HF_MODEL"] == str(tmp_path)
    monkeypatch.setenv("HF_MODEL", "/elsewhere")
    with caplog.at_level(logging.WARNING):
        set_hf_model(tmp_path)
    assert os.environ["HF_MODEL"] == "/elsewhere"
    assert f"HF_MODEL=/elsewhere is set and differs from the model served ({tmp_path})" in caplog.text


def test_the_decode_batch_fits_32_users_per_submesh_row() -> None:
    check_decode_batch(32, (1, 8))
    check_decode_batch(128, (4, 8))
    with pytest.raises(ValueError) as err:
        check_decode_batch(64, (1, 4))
    assert str(err.value) == ("max_num_seqs=64 on a 1x4 submesh: tt-metal decodes at most 32 users per mesh "
                              "row (more only as a multiple of the rows); set max_num_seqs to at most 32")
    with pytest.raises(ValueError, match="max_num_seqs=66 on a 4x8 submesh"):
        check_decode_batch(66, (4, 8))


def test_block_size_defaults_to_32_on_tt_and_16_elsewhere() -> None:
    assert EngineConfig.from_parameters({"device": "tt"}).block_size == 32
    assert EngineConfig.from_parameters({"device": "cpu"}).block_size == 16
    assert EngineConfig.from_parameters({}).block_size == 16
    assert EngineConfig.from_parameters({"device": "tt", "block_size": "64"}).block_size == 64
    with pytest.raises(ValueError, match="^block_size=16 on a Tenstorrent device"):
        EngineConfig.from_parameters({"device": "tt", "block_size": "16"})


@pytest.mark.skipif(HAS_TTNN, reason="ttnn is installed here")
def test_device_tt_alone_without_ttnn_fails_naming_ttnn() -> None:
    with pytest.raises(ValueError) as err:
        build_engine(EngineConfig.from_parameters({"device": "tt"}))
    assert str(err.value).startswith("device=tt needs ttnn, tt-metal's Python package (pip install ttnn, "
                                     "Python 3.10 or 3.12;")
