"""The paged KV ops at every shape the generator runner plans, on the cache tt-metal's layout
gives (per layer, TILE, bfloat8_b) on a mock n150: ttnn validates each call's arguments, shapes,
layouts and page tables for real (the values are zeros on a mock)."""

import pytest

from tests.tt.mock_device import BUNDLES, run_scenario

BASE = {"device": "tt", "block_size": "32", "extra_models_dir": str(BUNDLES), "num_kv_blocks": "256",
        "max_num_batched_tokens": "2048"}


@pytest.mark.parametrize("max_num_seqs, max_model_len", [(1, 256), (4, 512), (32, 2048)])
def test_paged_ops_run_at_every_planned_shape(max_num_seqs: int, max_model_len: int) -> None:
    seen = run_scenario("paged_ops", "n150", timeout=600, params={
        **BASE, "max_num_seqs": str(max_num_seqs), "max_model_len": str(max_model_len)})
    width = max_model_len // 32
    assert seen["decode"] == [max_num_seqs, width]
    # SmolLM2-135M: 9 query heads of 64
    assert seen["sdpa_out"] == [1, max_num_seqs, 9, 64]
    assert seen["prefill_lengths"] == list(range(32, max_model_len + 1, 32))
