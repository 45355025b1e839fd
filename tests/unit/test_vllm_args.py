"""vLLM engine arguments (a vllm_backend model.json) mapped onto the engine's options: each class of
the table (mapped, accepted with a warning, refused), the precedence of config.pbtxt, and where
model.json is found."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from tt_backend.config import EngineConfig
from tt_backend.config.vllm_args import (
    VLLM_ARGS,
    Mapped,
    Note,
    Refused,
    engine_parameters,
    find_model_json,
    translate,
)
from tt_backend.contract.modes import TraceMode
from tt_backend.triton.model_params import tokenizer_model_option, vllm_engine_parameters

SAMPLE = {"model": "facebook/opt-125m", "disable_log_requests": True, "gpu_memory_utilization": 0.5,
          "enforce_eager": True, "disable_log_stats": False}
"""vllm_backend's samples/model_repository/vllm_model/1/model.json."""


def test_every_mapped_argument_names_an_engine_option() -> None:
    options = {f.name for f in dataclasses.fields(EngineConfig)}
    mapped = {rule.option for rule in VLLM_ARGS.values() if isinstance(rule, Mapped)}
    assert sorted(mapped - options) == []


def test_vllm_backends_sample_model_json() -> None:
    out = translate(SAMPLE)
    assert out.parameters == {"model": "facebook/opt-125m", "kv_cache_memory_fraction": "0.5",
                              "trace_mode": "none"}
    assert [(n.argument, n.level) for n in out.notes] == [
        ("model", logging.INFO), ("disable_log_requests", logging.WARNING),
        ("gpu_memory_utilization", logging.INFO), ("enforce_eager", logging.INFO),
        ("disable_log_stats", logging.WARNING)]
    assert out.notes[3].message.startswith("model.json: enforce_eager -> trace_mode=none (true: "
                                           "trace_mode=none")
    assert out.notes[1].message.startswith("model.json: disable_log_requests=True has no effect here: ")


def test_common_arguments_map_onto_a_config() -> None:
    out = translate({"served_model_name": ["my-model"], "dtype": "half", "seed": 7, "max_model_len": 512,
                     "max_num_seqs": 4, "max_num_batched_tokens": 1024, "block_size": 32,
                     "enable_prefix_caching": False, "enable_chunked_prefill": True,
                     "tensor_parallel_size": 1,
                     "data_parallel_size": 2, "kv_cache_dtype": "auto", "num_gpu_blocks_override": 64,
                     "enforce_eager": False, "trust_remote_code": True, "swap_space": 4, "quantization": None,
                     "additional_config": {"tt": {"sample_on_device_mode": "none"}}, "cpu_kernels": "torch"})
    config = EngineConfig.from_parameters(out.parameters)
    assert (config.served_model_name, config.dtype, config.seed, config.max_model_len, config.max_num_seqs,
            config.max_num_batched_tokens, config.block_size, config.enable_prefix_caching,
            config.enable_chunked_prefill, config.data_parallel_size, config.num_kv_blocks,
            config.trace_mode, str(config.sample_on_device_mode), config.cpu_kernels) == (
        "my-model", "float16", 7, 512, 4, 1024, 32, False, True, 2, 64, TraceMode.AUTO, "none", "torch")
    warned = {n.argument for n in out.notes if n.level == logging.WARNING}
    assert warned == {"trust_remote_code", "swap_space"}
    by_arg = {n.argument: n.message for n in out.notes}
    assert by_arg["enforce_eager"] == ("model.json: enforce_eager: our default (true: trace_mode=none "
                                       "(every step eager); false: trace_mode keeps its default (auto))")
    assert by_arg["kv_cache_dtype"] == ("model.json: kv_cache_dtype='auto': as here (the KV cache is kept "
                                        "in the model's dtype (the dtype option))")
    assert by_arg["additional_config.sample_on_device_mode"] == (
        "model.json: additional_config.sample_on_device_mode -> sample_on_device_mode=none "
        "(this engine's option)")


@pytest.mark.parametrize(("arguments", "message"), [
    ({"kv_cache_dtype": "fp8"}, "model.json: kv_cache_dtype='fp8' is not supported: the KV cache is kept in "
     "the model's dtype"),
    ({"quantization": "awq"}, "model.json: quantization='awq' is not supported: a quantized checkpoint loads "
     "as a GGUF file"),
    ({"speculative_config": {"method": "ngram"}}, "speculative_config={'method': 'ngram'} is not supported"),
    ({"revision": "v2"}, "revision='v2' is not supported: an HF id serves the HF cache's main snapshot"),
    ({"no_such_argument": 1}, "model.json: unknown engine argument 'no_such_argument': neither a vLLM engine "
     "argument this backend knows nor one of its options"),
    ({"additional_config": {"tt": {"nope": 1}}}, "additional_config names 'nope', which is no option"),
    ({"model": "a/b", "tokenizer": "c/d"}, "model.json: tokenizer='c/d' and model='a/b' both set model, "
     "differently"),
    ({"served_model_name": ["a", "b"]}, r"served_model_name=\['a', 'b'\]: this server serves one name"),
])
def test_refused_arguments_name_themselves(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        translate(arguments)


def test_refused_arguments_at_vllms_default_are_accepted() -> None:
    defaults = {name: rule.accepts[0] for name, rule in VLLM_ARGS.items() if isinstance(rule, Refused)}
    out = translate(defaults)
    assert out.parameters == {}
    assert all(n.level == logging.INFO and ": as here (" in n.message for n in out.notes)


def test_engine_options_refuse_what_the_engine_refuses() -> None:
    params = translate({"tensor_parallel_size": 2}).parameters
    with pytest.raises(ValueError, match="tensor_parallel_size=2 is not supported: tensor parallelism comes "
                       "from the mesh shape"):
        EngineConfig.from_parameters(params)
    with pytest.raises(ValueError, match="kv_cache_memory_fraction must be in"):
        EngineConfig.from_parameters(translate({"gpu_memory_utilization": 1.5}).parameters)


def test_config_pbtxt_wins_over_model_json(tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"max_num_seqs": 8, "seed": 3, "enforce_eager": True}), encoding="utf-8")
    out = engine_parameters({"max_num_seqs": "2", "tt.trace_mode": "all"}, path)
    assert out.parameters == {"seed": "3", "max_num_seqs": "2", "tt.trace_mode": "all"}
    assert out.notes[-2:] == (
        Note("max_num_seqs", logging.WARNING, f"{path}: max_num_seqs=8 is overridden by config.pbtxt's "
             "parameter (config.pbtxt wins)"),
        Note("trace_mode", logging.WARNING, f"{path}: trace_mode=none is overridden by config.pbtxt's "
             "parameter (config.pbtxt wins)"))
    assert engine_parameters({"seed": "1"}, None).parameters == {"seed": "1"}


def test_model_json_is_found_where_vllm_backend_reads_it(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "tt_llm"
    (folder / "1").mkdir(parents=True)
    assert find_model_json(folder) is None
    arguments = {"model": "org/M", "swap_space": 4}
    (folder / "1" / "model.json").write_text(json.dumps(arguments), encoding="utf-8")
    assert find_model_json(folder) == folder / "1" / "model.json"
    args = {"model_repository": str(folder), "model_version": "1"}
    with caplog.at_level(logging.INFO, logger="tt_backend"):
        assert vllm_engine_parameters(args, {"seed": "5"}) == {"model": "org/M", "seed": "5"}
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"{folder}/1/model.json: model -> model=org/M (the checkpoint: a folder, a .gguf "
         "file or an HF id in the local HF cache)"),
        (logging.WARNING, f"{folder}/1/model.json: swap_space=4 has no effect here: a preempted request is "
         "recomputed, never swapped to host memory")]
    # the tokenizer models follow it, unless their own `model` parameter says otherwise
    sibling = {"model_repository": str(tmp_path / "preprocessing")}
    assert tokenizer_model_option(sibling, {}) == "org/M"
    assert tokenizer_model_option(sibling, {"model": "x"}) == "x"
    (folder / "model.json").write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match="both .* exist; keep one"):
        find_model_json(folder)
    (folder / "model.json").unlink()
    (folder / "1" / "model.json").write_text("[1]", encoding="utf-8")
    with pytest.raises(ValueError, match="must hold a JSON object of vLLM engine arguments"):
        vllm_engine_parameters(args, {})


def test_the_readme_table_lists_every_argument_as_the_table_treats_it() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| vLLM engine argument | here |"):]
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in table.splitlines()
            if line.startswith("| `")}
    for name, rule in VLLM_ARGS.items():
        (line,) = [line for names, line in rows.items() if f"`{name}`" in names.split(", ")]
        kind = line.split(" | ")[1]
        assert kind.startswith({Mapped: "→", Refused: "refused"}.get(type(rule), "warning")), name
        assert f"{rule.why if not isinstance(rule, Mapped) else rule.effect} |" in line, name
