"""The Tenstorrent fast path end to end in the engine, on mock meshes, over the contract generator's
`sampling` variant (tt-metal's device sampler and its four-step async read, RULES.md): tokens
sampled inside the step and read back instead of logits, a batch that needs the host taking it for
that step only, decode run ahead of the host with async_scheduling, and aborts in flight."""

from typing import Any

from tests.conftest import CHAT_PROMPTS
from tests.tt.mock_device import run_scenario
from tests.tt.test_engine_tt import TT, _variant

SAMPLING = {**TT, "extra_models_dir": _variant("sampling")}
VOCAB = 49152
MAX_TOKENS = 24


def _greedy(prompt: list[int], max_tokens: int = MAX_TOKENS, **extra: Any) -> dict[str, Any]:
    return {"prompt": prompt, "sampling": {"temperature": 0.0, "max_tokens": max_tokens, **extra}}


def test_device_sampled_greedy_matches_hf_with_async_decode_on_and_off(chat_ids: Any, hf_greedy: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    runs = {mode: run_scenario("fast_path", "n150", timeout=900,
                               params={**SAMPLING, "async_scheduling": mode},
                               requests=[_greedy(p) for p in prompts]) for mode in ("false", "true")}
    for mode, seen in runs.items():
        for ids, tokens in zip(prompts, seen["tokens"], strict=True):
            assert tokens == hf_greedy(tuple(ids), MAX_TOKENS), mode
        assert {where for _, where, _ in seen["steps"]} == {"device"}  # no step needed the host
        assert seen["host_sampling_steps"] == 0
        assert (seen["blocks_held"], seen["requests_held"], seen["reads_pending"]) == (0, 0, 0)
    sync, ahead = runs["false"], runs["true"]
    assert sync["launched"] == 0 and sync["decode_calls"] == sync["reads"]
    # with async on, every decode step was launched ahead of the host's work on the one before
    # (the pipeline drained whenever a request finished), and only the prefill ran synchronously
    assert ahead["launched"] == ahead["decode_calls"] and ahead["decode_drains"] > 0
    assert [mode for mode, _, _ in ahead["steps"]] == ["prefill"]
    # what a decode read copies: the 4 rows' int32 tokens, not 4 x 49152 float32 logits
    assert sync["bytes_read"] == 4 * 4 * sync["reads"] and ahead["bytes_read"] == 4 * 4 * ahead["reads"]


def test_host_sampling_reads_the_logits_of_every_row(chat_ids: Any, hf_greedy: Any) -> None:
    # the current variant declares no device sampling: every step samples on the host
    prompt = chat_ids(CHAT_PROMPTS[0])
    seen = run_scenario("fast_path", "n150", timeout=900, params=TT, requests=[_greedy(prompt)])
    assert seen["tokens"][0] == hf_greedy(tuple(prompt), MAX_TOKENS)
    assert {where for _, where, _ in seen["steps"]} == {"host"}
    assert seen["bytes_read"] // seen["reads"] == 4 * VOCAB * 4  # float32 logits of the 4-row batch


def test_seeded_device_sampling_gives_the_same_tokens_alone_and_in_a_batch_of_8(chat_ids: Any) -> None:
    params = {**SAMPLING, "max_num_seqs": "8"}
    prompts = [chat_ids(p) for p in CHAT_PROMPTS] * 2
    seeded = {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 1234, "max_tokens": MAX_TOKENS}
    others = [{"temperature": 0.7, "top_k": 10, "seed": 10 + i, "max_tokens": MAX_TOKENS} for i in range(8)]
    alone = run_scenario("fast_path", "n150", timeout=900, params=params,
                         requests=[{"prompt": prompts[4], "sampling": seeded}])
    # in a batch of 8 the seeded request is the fifth: another slot, seven neighbours
    batch = [{"prompt": p, "sampling": seeded if i == 4 else others[i]} for i, p in enumerate(prompts)]
    together = run_scenario("fast_path", "n150", timeout=900, params=params, requests=batch)
    assert len(alone["tokens"][0]) == MAX_TOKENS
    assert together["tokens"][4] == alone["tokens"][0]
    assert max(rows for mode, _, rows in together["steps"] if mode == "decode") == 8
    assert {where for _, where, _ in together["steps"]} == {"device"}


def test_a_logprobs_request_takes_the_host_for_its_steps_only(chat_ids: Any, hf_greedy: Any) -> None:
    first, second = chat_ids(CHAT_PROMPTS[0]), chat_ids(CHAT_PROMPTS[1])
    requests = [_greedy(first, 30, ignore_eos=True), _greedy(second, 5, logprobs=1, ignore_eos=True)]
    seen = run_scenario("fast_path", "n150", timeout=900, params={**SAMPLING, "async_scheduling": "true"},
                        requests=requests)
    assert seen["tokens"][1] == hf_greedy(tuple(second), 5) and seen["logprobs"][1] == 5
    assert len(seen["tokens"][0]) == 30
    # the logprobs request took part in 5 steps (one per token): those, and only those, on the host
    assert seen["host_sampling_steps"] == 5
    assert sum(1 for _, where, _ in seen["steps"] if where == "host") == 5
    # once it finished, the other request's decode ran on the device, ahead of the host
    assert seen["launched"] > 0


def test_an_abort_in_flight_frees_every_block_slot_and_read(chat_ids: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS[:2]]
    requests = [{**_greedy(prompts[0], 200, ignore_eos=True), "abort_after": 6}, _greedy(prompts[1], 12)]
    seen = run_scenario("fast_path", "n150", timeout=900, params={**SAMPLING, "async_scheduling": "true"},
                        requests=requests)
    assert seen["reasons"][0] == "abort" and 6 <= len(seen["tokens"][0]) < 200
    assert seen["launched"] > 0
    assert (seen["blocks_held"], seen["requests_held"], seen["reads_pending"]) == (0, 0, 0)
    assert seen["cleanup"] == ["decode_reads", "kv_cache", "generator", "device"]


def test_data_parallel_2_on_t3k_samples_on_each_submesh_with_async_decode(chat_ids: Any,
                                                                         hf_greedy: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    params = {**SAMPLING, "MESH_DEVICE": "T3K", "data_parallel_size": "2", "async_scheduling": "true"}
    seen = run_scenario("fast_path", "t3k", timeout=900, params=params,
                        requests=[_greedy(p) for p in prompts])
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    assert seen["lanes"] == 2 and seen["launched"] > 0
    assert {where for _, where, _ in seen["steps"]} == {"device"}
    assert (seen["blocks_held"], seen["requests_held"], seen["reads_pending"]) == (0, 0, 0)


def test_async_scheduling_is_refused_where_the_generator_declares_no_device_sampling() -> None:
    seen = run_scenario("load_fails", "n150", timeout=600, params={**TT, "async_scheduling": "true"})
    assert seen["error"] == "ValueError"
    assert seen["message"] == ("async_scheduling=true on device=tt, but the generator TTLlamaForCausalLM "
                               "does not declare supports_sample_on_device (its model_capabilities); set "
                               "async_scheduling=false")
    assert seen["reopens"] is True
