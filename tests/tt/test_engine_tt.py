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
    # the generator's warmup hooks ran before the first request, at the decode batch and the page
    # table's width (max_model_len 512 / block_size 32), tokens chosen on the host
    assert seen["warmups"] == [
        ["warmup_model_prefill", {"enable_trace": True, "can_sample_on_device": False,
                                  "non_greedy_decoding_on_device": False}],
        ["warmup_model_decode", {"enable_trace": True, "max_batch_size": 4, "num_blocks": 16,
                                 "can_sample_on_device": False, "non_greedy_decoding_on_device": False}]]
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


def test_data_parallel_2_on_t3k_serves_a_lane_on_each_submesh(chat_ids: Any, hf_greedy: Any) -> None:
    # Two lanes, two 1x4 submeshes, each with its own cache and block ids: the scheduler's merged
    # plan goes to the generator lane by lane (decode rows at [lane x 4, lane x 4 + 4), prefill rows
    # by empty_slots), and each row's page table holds its submesh's local block ids. A row sent to
    # the wrong submesh, or given the other lane's block ids, reads another cache and changes tokens.
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    params = {**TT, "MESH_DEVICE": "T3K", "data_parallel_size": "2"}
    seen = run_scenario("engine", "t3k", timeout=900, params=params, prompts=prompts, max_tokens=MAX_TOKENS,
                        concurrent=True)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    assert seen["lanes"] == 2
    assert seen["warmups"][1] == ["warmup_model_decode", {
        "enable_trace": True, "max_batch_size": 8, "num_blocks": 16, "can_sample_on_device": False,
        "non_greedy_decoding_on_device": False}]
    # the least-loaded lane takes each new request: two per lane; every token but each prompt's
    # last is computed once by its lane's submesh (prefill rows count once per prompt)
    per_lane = [sum(len(t) for t in seen["tokens"][lane::2]) for lane in (0, 1)]
    assert seen["rows_per_submesh"] == per_lane
    assert seen["max_decode_rows"] == 4
    assert seen["cleanup"] == ["kv_cache", "generator", "device"]
    assert (seen["fabric_closed"], seen["reopens"]) == ("DISABLED", True)
