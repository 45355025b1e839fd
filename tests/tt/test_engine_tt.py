"""device=tt end to end in the engine, on a mock n150 with the reference generator bundle: the
registry, the mesh, the generator, its KV cache, prefill with page tables, decode at the fixed
capacity with the async output read and its event, host sampling. The tokens are the reference
generator's host compute (the mock device reads back zeros), so their equality with HF
transformers' fp32 greedy checks the runner's plumbing (rows, positions, page tables, slots),
not the device's numbers."""

from typing import Any

from tests.conftest import CHAT_PROMPTS
from tests.tt.mock_device import BUNDLES, run_scenario

MAX_TOKENS = 40
TT = {"device": "tt", "block_size": "32", "extra_models_dir": str(BUNDLES), "max_model_len": "512",
      "max_num_seqs": "4", "max_num_batched_tokens": "512", "num_kv_blocks": "64", "dtype": "float32"}


def test_engine_on_n150_matches_hf_greedy_on_the_four_chat_prompts(chat_ids: Any, hf_greedy: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    seen = run_scenario("engine", "n150", timeout=900, params=TT, prompts=prompts, max_tokens=MAX_TOKENS)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    # 4 prefills (one token each); trace_mode auto is decode_only: every later token is one decode
    # step through the generator with enable_trace=True (an answer may stop early at EOS)
    assert seen["eager_steps"] == 4
    assert seen["traced_steps"] == sum(len(tokens) - 1 for tokens in seen["tokens"])
    assert all(0 < len(tokens) <= MAX_TOKENS for tokens in seen["tokens"])
    assert seen["cache_dtype"] == "bfloat8_b"
    assert seen["cleanup"] == ["kv_cache", "generator", "device"]
    assert seen["max_decode_rows"] == 1
    assert (seen["fabric_closed"], seen["reopens"]) == ("DISABLED", True)


def test_concurrent_requests_decode_in_their_own_slots(chat_ids: Any, hf_greedy: Any) -> None:
    # All four at once: decode steps carry several live rows (slots, positions and page tables
    # side by side); the reference computes each row alone, so each must still be HF's answer.
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    seen = run_scenario("engine", "n150", timeout=900, params=TT, prompts=prompts, max_tokens=MAX_TOKENS,
                        concurrent=True)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    assert seen["max_decode_rows"] == 4
