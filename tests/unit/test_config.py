from pathlib import Path

import pytest

from tt_backend.config import EngineConfig


def test_parameters_parse_by_field_type() -> None:
    cfg = EngineConfig.from_parameters({
        "dtype": "float32", "max_model_len": "1024", "tt.max_num_seqs": "4",
        "enable_chunked_prefill": "false", "max_num_batched_tokens": "1024", "num_kv_blocks": ""})
    assert (cfg.dtype, cfg.max_model_len, cfg.max_num_seqs) == ("float32", 1024, 4)
    assert cfg.enable_chunked_prefill is False
    assert cfg.num_kv_blocks is None


@pytest.mark.parametrize("params, message", [
    ({"bogus": "1"}, "unknown engine option 'bogus'"),
    ({"tensor_parallel_size": "2"}, "set MESH_DEVICE (the mesh_device option or the env MESH_DEVICE"),
    ({"pipeline_parallel_size": "4"}, "pipeline_parallel_size=4 is not supported"),
    ({"dtype": "int8"}, "dtype='int8' is not one of auto, bfloat16, float32, float16"),
    ({"max_num_seqs": "x"}, "max_num_seqs='x' is not an integer"),
    ({"max_num_seqs": "0"}, "max_num_seqs must be >= 1, got 0"),
    ({"enable_chunked_prefill": "maybe"}, "enable_chunked_prefill='maybe' is not a boolean"),
    ({"max_num_seqs": "2", "tt.max_num_seqs": "3"}, "given twice"),
    ({"enable_chunked_prefill": "false", "max_model_len": "4096"},
     "max_num_batched_tokens=2048 is smaller than max_model_len=4096"),
    ({"enable_lora": "true"}, "LoRA adapters are not supported yet"),
    ({"speculative_config": '{"method": "ngram"}'}, "speculative decoding"),
    ({"num_speculative_tokens": "4"}, "speculative decoding"),
    ({"max_num_seqs": "64", "max_num_batched_tokens": "32"}, "a full decode step would not fit"),
    ({"decode_steps_between_prefills": "-1"}, "decode_steps_between_prefills must be >= 0"),
    ({"max_prefill_tokens": "0"}, "max_prefill_tokens must be >= 1, got 0"),
    ({"cpu_kernels": "fast"}, "cpu_kernels='fast' is not one of auto, native, torch"),
    ({"builtin_models": "maybe"}, "builtin_models='maybe' is not a boolean"),
    ({"disable_batched_prefill": "2"}, "disable_batched_prefill='2' is not a boolean"),
    ({"extra_models_dir": "/nonexistent/bundles"},
     "extra_models_dir='/nonexistent/bundles' is not a directory"),
])
def test_bad_parameters_name_the_option(params: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as err:
        EngineConfig.from_parameters(params)
    assert message in str(err.value)


def test_resolve_for_model_fills_defaults_and_checks_capacity() -> None:
    cfg = EngineConfig(kv_cache_memory_bytes=1 << 20, block_size=16).resolve_for_model(
        model_max_positions=512, kv_bytes_per_token=1024)
    assert cfg.max_model_len == 512
    assert cfg.num_kv_blocks == (1 << 20) // (1024 * 16)
    with pytest.raises(ValueError, match="max_model_len=1024 exceeds the model's maximum positions"):
        EngineConfig(max_model_len=1024).resolve_for_model(512, 1024)
    with pytest.raises(ValueError, match=r"cannot hold one request of max_model_len=512 \(32 blocks\)"):
        EngineConfig(num_kv_blocks=31).resolve_for_model(512, 1024)


def test_features_follow_model_declarations() -> None:
    unset = EngineConfig()
    on = unset.resolve_for_model(8192, 1024, supports_prefix_caching=True, supports_chunked_prefill=True)
    assert (on.enable_prefix_caching, on.enable_chunked_prefill) == (True, True)
    off = unset.resolve_for_model(2048, 1024, supports_prefix_caching=False, supports_chunked_prefill=False)
    assert (off.enable_prefix_caching, off.enable_chunked_prefill) == (False, False)
    with pytest.raises(ValueError, match="enable_prefix_caching=true, but the model does not support"):
        EngineConfig(enable_prefix_caching=True).resolve_for_model(2048, 1024, False, True)
    with pytest.raises(ValueError, match="enable_chunked_prefill=true, but the model does not support"):
        EngineConfig(enable_chunked_prefill=True).resolve_for_model(2048, 1024, True, False)
    # Without chunking, a prompt of max_model_len must fit one step's budget.
    with pytest.raises(ValueError, match="max_num_batched_tokens=2048 is smaller than max_model_len=8192"):
        unset.resolve_for_model(8192, 1024, True, False)


ENV_OPTIONS = ("DISABLE_BATCHED_PREFILL", "TT_VLLM_BUILTIN_MODELS", "EXTRA_MODELS_DIR")


@pytest.mark.parametrize("env, disable_batched_prefill, builtin_models", [
    ({}, False, True),
    ({"DISABLE_BATCHED_PREFILL": "", "TT_VLLM_BUILTIN_MODELS": ""}, False, True),
    ({"DISABLE_BATCHED_PREFILL": "0", "TT_VLLM_BUILTIN_MODELS": "0"}, False, False),
    ({"DISABLE_BATCHED_PREFILL": "1", "TT_VLLM_BUILTIN_MODELS": "1"}, True, True),
    # Any other value counts as set, as it always did: "false" disables batching, keeps builtins.
    ({"DISABLE_BATCHED_PREFILL": "false", "TT_VLLM_BUILTIN_MODELS": "false"}, True, True),
])
def test_env_options_default_from_the_environment(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], disable_batched_prefill: bool,
        builtin_models: bool) -> None:
    for name in ENV_OPTIONS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = EngineConfig()
    assert (cfg.disable_batched_prefill, cfg.builtin_models, cfg.extra_models_dir) == (
        disable_batched_prefill, builtin_models, "")


def test_parameters_override_the_environment_and_survive_resolve(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DISABLE_BATCHED_PREFILL", "1")
    monkeypatch.setenv("TT_VLLM_BUILTIN_MODELS", "0")
    monkeypatch.setenv("EXTRA_MODELS_DIR", str(tmp_path))
    from_env = EngineConfig()
    assert (from_env.disable_batched_prefill, from_env.builtin_models, from_env.extra_models_dir) == (
        True, False, str(tmp_path))
    cfg = EngineConfig.from_parameters({"disable_batched_prefill": "false", "tt.builtin_models": "true",
                                        "extra_models_dir": ""})
    assert (cfg.disable_batched_prefill, cfg.builtin_models, cfg.extra_models_dir) == (False, True, "")
    for name in ENV_OPTIONS:
        monkeypatch.delenv(name)
    resolved = from_env.resolve_for_model(8192, 1024)  # the values were read once, at construction
    assert (resolved.disable_batched_prefill, resolved.builtin_models, resolved.extra_models_dir) == (
        True, False, str(tmp_path))


def test_extra_models_dir_from_the_environment_must_be_a_directory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EXTRA_MODELS_DIR", str(tmp_path / "missing"))
    with pytest.raises(ValueError) as err:
        EngineConfig()
    assert str(err.value) == (f"extra_models_dir={str(tmp_path / 'missing')!r} is not a directory "
                              "(the option, or the env EXTRA_MODELS_DIR)")
    (tmp_path / "file").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="is not a directory"):
        EngineConfig(extra_models_dir=str(tmp_path / "file"))
