"""The TT load path with the contract generator bundle (tests/tt/bundles): the registry resolves
TTLlamaForCausalLM from EXTRA_MODELS_DIR, the mesh opens, the generator splits it into its
data-parallel submeshes and allocates the paged KV cache in tt-metal's layout, a chip's share of the
KV heads in the shape, on the mock device's real allocator; failures close everything again."""

from tests.tt.mock_device import BUNDLES, run_scenario

BASE = {"device": "tt", "extra_models_dir": str(BUNDLES), "max_model_len": "512",
        "max_num_seqs": "4", "max_num_batched_tokens": "512"}


def test_data_parallel_2_on_t3k_uses_two_submeshes_each_with_its_kv_cache() -> None:
    seen = run_scenario("load", "t3k", params={**BASE, "MESH_DEVICE": "T3K", "data_parallel_size": "2",
                                               "num_kv_blocks": "64"})
    assert (seen["architecture"], seen["generator"]) == ("TTLlamaForCausalLM", "TTLlamaForCausalLM")
    assert (seen["single_execute"], seen["prefix_caching"]) == (True, True)
    assert seen["submeshes"] == [[1, 4], [1, 4]] and seen["mesh_submeshes"] == 2
    assert seen["max_num_seqs"] == 4  # per submesh: the generator got 2 x 4 and split it
    # SmolLM2-135M: 30 layers, 3 KV heads of 64; 64 blocks + the padding sink, per lane. The shape
    # is each chip's (tt-metal replicates it to the 4 chips of a submesh): 3 // min(4, 3) = 1 head
    assert (seen["lanes"], seen["layers"], seen["kv_devices"]) == (2, [30, 30], [4, 4])
    assert seen["kv_shape"] == [65, 1, 32, 64]
    assert (seen["kv_dtype"], seen["kv_layout"], seen["kv_buffer"]) == \
        ("DataType.BFLOAT8_B", "Layout.TILE", "BufferType.DRAM")
    assert seen["cleanup"] == ["kv_cache", "device"]
    assert seen["mesh_events"] == ["synchronize", "submesh0", "submesh1", "mesh", "fabric"]
    assert (seen["fabric_closed"], seen["reopens"]) == ("DISABLED", True)


def test_n150_sizes_the_kv_cache_from_kv_cache_memory_bytes() -> None:
    seen = run_scenario("load", "n150", params={**BASE, "kv_cache_memory_bytes": str(1 << 30)})
    # bfloat8_b: 2 x 30 layers x 3 heads x 64 x 1088/1024 bytes = 12240 bytes per token
    blocks = (1 << 30) // (12240 * 32)
    assert seen["num_kv_blocks"] == blocks and seen["kv_shape"] == [blocks + 1, 3, 32, 64]
    assert seen["submeshes"] == [[1, 1]] and seen["mesh_events"] == ["synchronize", "mesh"]


def test_n300_budgets_each_chip_for_its_share_of_the_heads() -> None:
    # kv_cache_memory_bytes is each chip's: 1 of the 3 KV heads per chip, 4080 bytes per token
    seen = run_scenario("load", "n300", params={**BASE, "MESH_DEVICE": "N300",
                                                "kv_cache_memory_bytes": str(1 << 30)})
    blocks = (1 << 30) // (4080 * 32)
    assert seen["num_kv_blocks"] == blocks and seen["kv_shape"] == [blocks + 1, 1, 32, 64]
    assert seen["kv_devices"] == [2]


def test_kv_cache_auto_takes_tt_metals_token_capacity() -> None:
    # no get_max_tokens_all_users on the class: tt-metal's fallback of 131072 tokens per lane, plus
    # a block per sequence (the plugin's get_num_available_blocks_tt)
    seen = run_scenario("load", "n150", params=BASE)
    assert seen["num_kv_blocks"] == (131072 + 32 * 4) // 32


def test_an_oversized_kv_cache_fails_the_load_naming_the_options() -> None:
    seen = run_scenario("load_fails", "n150", params={**BASE, "kv_cache_memory_bytes": str(16 << 30)})
    assert seen["error"] == "ValueError"
    message = seen["message"]
    assert message.startswith("the KV cache does not fit on the device: 1 lane(s) x 30 layers x K/V of ")
    assert "lower num_kv_blocks (now 43862 per lane) or kv_cache_memory_bytes. ttnn: " in message
    assert "Out of Memory: Not enough space to allocate" in message
    assert (seen["fabric_after"], seen["reopens"]) == ("DISABLED", True)


def test_tensor_parallel_fails_the_load_naming_mesh_device() -> None:
    seen = run_scenario("config_fails", "n300", params={**BASE, "tensor_parallel_size": "2"})
    assert seen == {"error": "ValueError", "message": (
        "tensor_parallel_size=2 is not supported: tensor parallelism comes from the mesh shape; set "
        "MESH_DEVICE (the mesh_device option or the env MESH_DEVICE, e.g. N300, T3K or 1x8) instead of "
        "tensor_parallel_size")}


def test_data_parallel_that_does_not_split_the_mesh_fails_before_it_opens() -> None:
    seen = run_scenario("load_fails", "t3k", engine=False, params={**BASE, "data_parallel_size": "3"})
    assert seen["error"] == "ValueError"
    assert seen["message"] == ("data_parallel_size=3 does not split the mesh MESH_DEVICE=1x8 into equal "
                               "submeshes; choose a data_parallel_size that divides its rows or columns")
    assert (seen["fabric_after"], seen["reopens"]) == ("DISABLED", True)

