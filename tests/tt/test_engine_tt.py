"""device=tt end to end in the engine, on mock Wormhole meshes, over the contract generator
(tests/tt/bundles/tt_contract_llama: tt-metal's generator API with every precondition it relies
on checked, the numbers from HF transformers on the host over a token cache addressed by the same
page tables). Any call that breaks tt-metal's contract fails the request with "tt-metal contract:
..."; a wrong page table, position, lane or prefix changes the tokens. So equality with HF fp32
greedy checks the runner's plumbing, not the device's numbers (mock read-backs are zeros)."""

from typing import Any

from tests.conftest import CHAT_PROMPTS
from tests.tt.mock_device import BUNDLES, run_scenario

MAX_TOKENS = 40
TT = {"device": "tt", "extra_models_dir": str(BUNDLES), "max_model_len": "512", "max_num_seqs": "4",
      "max_num_batched_tokens": "512", "num_kv_blocks": "64", "dtype": "float32"}
VARIANTS = BUNDLES / "tt_contract_llama" / "variants"
CONTEXT = ("Paris is the capital and largest city of France. It lies on the Seine river, in the north of the "
           "country, at the heart of the Ile-de-France region. The city is known for its museums and "
           "architectural landmarks: the Louvre, the Eiffel Tower, the Arc de Triomphe and the Notre-Dame "
           "cathedral. It hosts the headquarters of many international organisations, and its metro carries "
           "millions of passengers every day. Paris has been a centre of finance, diplomacy, commerce, "
           "fashion and science for centuries.")


def _variant(name: str) -> str:
    return str(VARIANTS / name)


def test_engine_on_n150_matches_hf_greedy_on_the_four_chat_prompts(chat_ids: Any, hf_greedy: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    seen = run_scenario("engine", "n150", timeout=900, params=TT, prompts=prompts, max_tokens=MAX_TOKENS)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    # 4 prefills (one token each); trace_mode auto is decode_only: every later token is one decode
    # step through the generator with enable_trace=True (an answer may stop early at EOS)
    assert seen["eager_steps"] == 4
    decodes = sum(len(tokens) - 1 for tokens in seen["tokens"])
    assert seen["traced_steps"] == seen["decode_calls"] == decodes
    assert seen["cache_dtype"] == "bfloat8_b"
    # block_size defaulted to 32 on device=tt; the two-phase warmup: every shape compiled untraced,
    # then the decode trace captured, at the decode batch and the page table's width (512 / 32)
    decode = {"max_batch_size": 4, "num_blocks": 16, "can_sample_on_device": False,
              "non_greedy_decoding_on_device": False}
    prefill = {"can_sample_on_device": False, "non_greedy_decoding_on_device": False}
    assert seen["warmups"] == [["warmup_model_prefill", {"enable_trace": False, **prefill}],
                               ["warmup_model_decode", {"enable_trace": False, **decode}],
                               ["warmup_model_decode", {"enable_trace": True, **decode}]]
    # each prefill sent the whole prompt from position 0, untraced (trace_mode auto traces decode)
    assert [call["start_pos"] for call in seen["prefill_calls"]] == [[0]] * 4
    assert [call["prompt_lens"] for call in seen["prefill_calls"]] == [[len(ids)] for ids in prompts]
    assert all(call["enable_trace"] is False for call in seen["prefill_calls"])
    assert seen["cleanup"] == ["decode_reads", "kv_cache", "generator", "device"]
    assert seen["max_decode_rows"] == 1
    assert (seen["fabric_closed"], seen["reopens"]) == ("DISABLED", True)


def test_concurrent_requests_decode_in_their_own_slots(chat_ids: Any, hf_greedy: Any) -> None:
    # All four at once: decode steps carry several live rows (slots, positions and page tables
    # side by side); the generator computes each row alone, so each must still be HF's answer.
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    seen = run_scenario("engine", "n150", timeout=900, params=TT, prompts=prompts, max_tokens=MAX_TOKENS,
                        concurrent=True)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    assert seen["max_decode_rows"] == 4


def test_a_prompt_reusing_four_cached_blocks_sends_its_whole_sequence_from_start_pos(
        chat_ids: Any, hf_greedy: Any) -> None:
    # The two prompts share their first 135 tokens: 4 whole blocks (128 tokens) are a prefix-cache
    # hit for the second. tt-metal takes its every token with start_pos=128 and prompt_lens its full
    # length, and computes the rest over the cached K/V (for this length its alignment, lcm(32, 64),
    # keeps 128).
    first, second = chat_ids(CONTEXT + " Question: which river runs through Paris?"), \
        chat_ids(CONTEXT + " Question: name two museums in the city.")
    assert (len(first), len(second)) == (147, 148)
    seen = run_scenario("engine", "n150", timeout=900, params=TT, prompts=[first, second],
                        max_tokens=MAX_TOKENS)
    for ids, tokens in zip((first, second), seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    hit = seen["prefill_calls"][1]
    assert (hit["start_pos"], hit["prompt_lens"], hit["start_pos_floored"]) == ([128], [148], [128])
    assert seen["prefix_cache_hits"] == 128


def test_preempted_requests_are_recomputed_from_their_whole_sequence(chat_ids: Any, hf_greedy: Any) -> None:
    # 5 blocks of 32 for four concurrent prompts of 2 blocks each, the two long answers growing into
    # a third each (6 blocks for those two alone): the scheduler preempts and later recomputes,
    # prompt and generated tokens alike, in one prefill of its whole sequence; each answer must be
    # HF's.
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    params = {**TT, "num_kv_blocks": "5", "max_model_len": "128"}
    seen = run_scenario("engine", "n150", timeout=900, params=params, prompts=prompts, max_tokens=MAX_TOKENS,
                        concurrent=True)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    assert seen["preemptions"] == 1
    # the recompute: the preempted request's prompt (41) and the 24 tokens it had generated
    assert [call["prompt_lens"] for call in seen["prefill_calls"]] == [[37, 43], [41], [41], [65]]


def test_chunked_prefill_where_the_generator_declares_it(chat_ids: Any, hf_greedy: Any) -> None:
    # supports_chunked_prefill (the chunked variant) with a 48-token budget: the 147-token prompt
    # prefills in chunks ending at 48, 96, 144 and 147, each call with every token up to its end; a
    # chunk starting mid-block is sent from its block's start (48 -> 32, 144 -> 128).
    prompt = chat_ids(CONTEXT + " Question: which river runs through Paris?")
    params = {**TT, "extra_models_dir": _variant("chunked"), "max_num_batched_tokens": "48"}
    seen = run_scenario("engine", "n150", timeout=900, params=params, prompts=[prompt], max_tokens=MAX_TOKENS)
    assert seen["tokens"][0] == hf_greedy(tuple(prompt), MAX_TOKENS)
    assert [(call["start_pos"][0], call["prompt_lens"][0]) for call in seen["prefill_calls"]] == \
        [(0, 48), (32, 96), (96, 144), (128, 147)]


def test_an_older_generator_without_warmup_hooks_decodes_eager(chat_ids: Any, hf_greedy: Any) -> None:
    # tt-metal d9d95fa's shape: no model_capabilities, no start_pos, read_decode_output(tt_out,
    # unpadded_batch): prefix caching off, the read inside decode_forward, and no decode trace (one
    # captured while serving is what the two-phase warmup exists to avoid)
    prompts = [chat_ids(p) for p in CHAT_PROMPTS[:2]]
    seen = run_scenario("engine", "n150", timeout=900, params={**TT, "extra_models_dir": _variant("older")},
                        prompts=prompts, max_tokens=MAX_TOKENS)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    assert seen["traced_steps"] == 0 and seen["warmups"] == []
    assert seen["prefix_cache_hits"] == 0


def test_seeded_sampling_gives_the_same_tokens_alone_and_in_a_batch(chat_ids: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    sampling = {"temperature": 0.9, "top_p": 0.95, "seed": 1234}
    alone = run_scenario("engine", "n150", timeout=900, params=TT, prompts=prompts[:1], max_tokens=24,
                         sampling=sampling)
    batch = run_scenario("engine", "n150", timeout=900, params=TT, prompts=prompts, max_tokens=24,
                         concurrent=True, sampling=sampling)
    assert batch["tokens"][0] == alone["tokens"][0] and len(alone["tokens"][0]) > 0
    assert batch["max_decode_rows"] == 4


def test_n300_holds_a_chips_share_of_the_kv_heads(chat_ids: Any, hf_greedy: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS[:2]]
    seen = run_scenario("engine", "n300", timeout=900, params={**TT, "MESH_DEVICE": "N300"}, prompts=prompts,
                        max_tokens=MAX_TOKENS, concurrent=True)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)


def test_data_parallel_2_on_t3k_serves_a_lane_on_each_submesh(chat_ids: Any, hf_greedy: Any) -> None:
    # Two lanes, two 1x4 submeshes, each with its own cache and block ids: the scheduler's merged
    # plan goes to the generator lane by lane (decode rows at [lane x 4, lane x 4 + 4), prefill rows
    # by empty_slots), and each row's page table holds its submesh's local block ids. A row sent to
    # the wrong submesh, or given the other lane's block ids, reads another cache and breaks the
    # contract (its prefix slots hold another sequence) or changes tokens.
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    params = {**TT, "MESH_DEVICE": "T3K", "data_parallel_size": "2"}
    seen = run_scenario("engine", "t3k", timeout=900, params=params, prompts=prompts, max_tokens=MAX_TOKENS,
                        concurrent=True)
    for ids, tokens in zip(prompts, seen["tokens"], strict=True):
        assert tokens == hf_greedy(tuple(ids), MAX_TOKENS)
    assert seen["lanes"] == 2
    assert seen["warmups"][-1] == ["warmup_model_decode", {
        "enable_trace": True, "max_batch_size": 8, "num_blocks": 16, "can_sample_on_device": False,
        "non_greedy_decoding_on_device": False}]
    # the least-loaded lane takes each new request: two per lane; every token but each prompt's
    # last is computed once by its lane's submesh (prefill rows count once per prompt)
    per_lane = [sum(len(t) for t in seen["tokens"][lane::2]) for lane in (0, 1)]
    assert seen["rows_per_submesh"] == per_lane
    assert seen["max_decode_rows"] == 4
    assert seen["cleanup"] == ["decode_reads", "kv_cache", "generator", "device"]
    assert (seen["fabric_closed"], seen["reopens"]) == ("DISABLED", True)
