"""`python -m tt_backend.tt_doctor`: the whole report on this machine (no ttnn, Python 3.11) and
each check over small fakes of what it is given."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tt_backend.mesh_options import MeshOptions
from tt_backend.models.registry import ModelEntry, build_registry
from tt_backend.tt_doctor.checks import (
    Check,
    TTNNFacts,
    check_checkpoint,
    check_chips,
    check_fabric,
    check_hf_model,
    check_python,
    check_ttnn,
    mesh_shape,
)
from tt_backend.tt_doctor.generators import check_generator, check_models_package

ROOT = Path(__file__).resolve().parents[2]
HAS_TTNN = importlib.util.find_spec("ttnn") is not None
WHERE = "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"
TTNN_MISSING_LINE = (
    "missing  ttnn: device=tt needs ttnn, tt-metal's Python package (pip install ttnn, Python 3.10 or 3.12; "
    "see the README's Tenstorrent section), and it does not import here: No module named 'ttnn' "
    "-> run scripts/setup_tt_hardware.sh")
MODELS_MISSING_LINE = (
    "missing  tt-metal models: no `models` package: tt-metal's checkout is not on the Python path (models is "
    "not on PyPI) -> run scripts/setup_tt_hardware.sh (a checkout at your ttnn's tag, on the path by a .pth "
    "file), or point extra_models_dir at a bundle")


def _doctor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("MESH_DEVICE", "HF_MODEL", "EXTRA_MODELS_DIR")}
    return subprocess.run([sys.executable, "-m", "tt_backend.tt_doctor", *args], cwd=ROOT, env=clean | env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(HAS_TTNN, reason="ttnn is installed here")
def test_the_doctor_without_ttnn_says_what_is_missing_and_exits_1() -> None:
    proc = _doctor()
    version = ".".join(str(v) for v in sys.version_info[:3])
    python = (f"ok       Python: {version}" if sys.version_info[:2] in ((3, 10), (3, 12)) else
              f"missing  Python: {version}: ttnn has wheels for Python 3.10 and 3.12 only -> make the venv "
              "with python3.12 or python3.10 (run scripts/setup_tt_hardware.sh)")
    assert proc.stdout.splitlines() == [
        python,
        TTNN_MISSING_LINE,
        "missing  chips: not counted: ttnn does not import",
        "warn     MESH_DEVICE: unset: every chip as one row; no chip to count",
        "warn     fabric: not checked: no mesh",
        MODELS_MISSING_LINE,
        "missing  builtin TT classes: TTGemma3ForConditionalGeneration, TTLlamaForCausalLM, "
        "TTMistral3ForConditionalGeneration, TTMistralForCausalLM, TTMllamaForConditionalGeneration, "
        "TTQwen2ForCausalLM, "
        "TTQwen2_5_VLForConditionalGeneration, TTQwen3ForCausalLM: not checked, tt-metal's generator_vllm "
        "does not import",
        "ok       HF_MODEL: unset: the loader sets it from the model option",
        f"device=tt: {4 + (python.startswith('missing'))} thing(s) missing, each named above with what to do",
    ]
    assert proc.returncode == 1


@pytest.mark.skipif(HAS_TTNN, reason="ttnn is installed here")
def test_the_doctor_checks_the_mesh_and_the_checkpoint_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    proc = _doctor("--model", str(tmp_path), MESH_DEVICE="(4,8)")
    lines = proc.stdout.splitlines()
    assert "warn     MESH_DEVICE: (4,8) is 4x8; not checked against the machine (no chip seen)" in lines
    assert "ok       fabric: fabric_config=auto sets FABRIC_1D_RING on a 4x8 mesh" in lines
    assert f"ok       HF_MODEL: unset: the loader sets it from the model option ({tmp_path})" in lines
    assert (f"missing  model: {tmp_path}: architectures ['Qwen2ForCausalLM'] -> TTQwen2ForCausalLM "
            "(models.tt_transformers.tt.generator_vllm:QwenForCausalLM), which needs tt-metal's "
            "generator_vllm, and it does not import (see tt-metal models above)") in lines
    assert proc.returncode == 1


def test_python_versions() -> None:
    assert check_python((3, 12, 1)) == Check("ok", "Python", "3.12.1")
    assert check_python((3, 10, 14)).status == "ok"
    assert check_python((3, 11, 7)).line() == (
        "missing  Python: 3.11.7: ttnn has wheels for Python 3.10 and 3.12 only -> make the venv with "
        "python3.12 or python3.10 (run scripts/setup_tt_hardware.sh)")


def test_ttnn_and_chips() -> None:
    assert check_ttnn(TTNNFacts(version="0.81.1")) == Check("ok", "ttnn", "0.81.1")
    assert check_ttnn(TTNNFacts(error="no ttnn")).status == "missing"
    assert check_chips(TTNNFacts(version="0.81.1", chips=8, cluster="T3K")).line() == \
        "ok       chips: ttnn sees 8 (cluster T3K)"
    assert check_chips(TTNNFacts(version="0.81.1", chips=0)).line() == \
        "missing  chips: ttnn sees no Tenstorrent chip -> check the card and its driver (tt-smi lists the " \
        "chips)"
    assert check_chips(TTNNFacts(version="0.81.1", chips_error="RuntimeError: no driver")).detail == \
        "ttnn.get_num_devices() failed: RuntimeError: no driver"


def test_the_mesh_against_the_chips_seen() -> None:
    n150, t3k, galaxy = (TTNNFacts(version="v", chips=n) for n in (1, 8, 32))
    assert mesh_shape("T3K", n150) == (Check(
        "missing", "MESH_DEVICE", "T3K is 1x8: MESH_DEVICE=1x8 needs 8 chips, but ttnn sees 1; set "
        "MESH_DEVICE (option mesh_device) to the mesh of this machine"), (1, 8))
    assert mesh_shape("1x8", n150)[0].detail.startswith("MESH_DEVICE=1x8 needs 8 chips")
    assert mesh_shape("(1, 8)", t3k) == (Check("ok", "MESH_DEVICE", "(1, 8) is 1x8, 8 of 8 chip(s)"), (1, 8))
    assert mesh_shape("N300", t3k) == (Check("ok", "MESH_DEVICE", "N300 is 1x2, 2 of 8 chip(s)"), (1, 2))
    assert mesh_shape("TG", galaxy)[1] == (8, 4)
    assert mesh_shape("", t3k) == (Check("ok", "MESH_DEVICE", "unset: every chip as one row, 1x8"), (1, 8))
    bad, shape = mesh_shape("T4K", t3k)
    assert (bad.status, shape) == ("missing", None)
    assert bad.detail.startswith("MESH_DEVICE='T4K' (option mesh_device) is neither a mesh name (N150,")


def _options(fabric: Any = "auto") -> MeshOptions:
    return MeshOptions(None, fabric, 0, None, None, "auto", 1, 1)


def test_the_fabric_the_mesh_would_open_with() -> None:
    fabrics = ("DISABLED", "FABRIC_1D", "FABRIC_1D_RING", "FABRIC_2D", "FABRIC_2D_TORUS_XY")
    wh_galaxy = TTNNFacts(version="v", chips=32, cluster="GALAXY", fabrics=fabrics)
    bh_galaxy = TTNNFacts(version="v", chips=32, cluster="BLACKHOLE_GALAXY", fabrics=fabrics)
    assert check_fabric(_options(), (8, 4), wh_galaxy).detail == \
        "fabric_config=auto sets FABRIC_1D_RING on a 8x4 mesh"
    assert check_fabric(_options(), (4, 8), bh_galaxy).detail == \
        "fabric_config=auto sets FABRIC_2D_TORUS_XY on a 4x8 mesh"
    assert check_fabric(_options(), (1, 1), bh_galaxy).detail == \
        "fabric_config=auto sets DISABLED on a 1x1 mesh"
    old_ttnn = TTNNFacts(version="v", chips=32, cluster="BLACKHOLE_GALAXY", fabrics=fabrics[:4])
    assert check_fabric(_options(), (8, 4), old_ttnn).line() == (
        "missing  fabric: fabric_config=auto sets FABRIC_2D_TORUS_XY on a 8x4 mesh, which this ttnn lacks "
        "(it has DISABLED, FABRIC_1D, FABRIC_1D_RING, FABRIC_2D) -> set fabric_config to one of those, or "
        "install a newer ttnn")
    assert check_fabric(_options("FABRIC_2D"), (1, 8), wh_galaxy).detail == \
        "fabric_config=FABRIC_2D sets FABRIC_2D on a 1x8 mesh"
    assert check_fabric(_options(), None, wh_galaxy) == Check("warn", "fabric", "not checked: no mesh")


def _importer(error: BaseException | None) -> Any:
    def import_module(name: str) -> ModuleType:
        if error is not None:
            raise error
        return ModuleType(name)
    return import_module


def test_the_models_package_and_what_its_generator_vllm_lacks() -> None:
    found = lambda name: object()  # noqa: E731
    assert check_models_package(lambda name: None, _importer(None)).line() == MODELS_MISSING_LINE
    assert check_models_package(found, _importer(None)) == Check(
        "ok", "tt-metal models", "models.tt_transformers.tt.generator_vllm imports")
    no_vllm = ModuleNotFoundError("No module named 'vllm'", name="vllm")
    assert check_models_package(found, _importer(no_vllm)).line() == (
        "missing  tt-metal models: models.tt_transformers.tt.generator_vllm imports vllm (the Tenstorrent "
        "vLLM), which is not installed: No module named 'vllm' -> install it as scripts/setup_tt_hardware.sh "
        "does, or point extra_models_dir at a bundle")
    no_envs = ModuleNotFoundError("No module named 'vllm.envs'", name="vllm.envs")
    assert "imports vllm (the Tenstorrent vLLM)" in check_models_package(found, _importer(no_envs)).detail
    other_models = ModuleNotFoundError("No module named 'models.tt_transformers'",
                                       name="models.tt_transformers")
    assert check_models_package(found, _importer(other_models)).detail == (
        "this `models` package has no models.tt_transformers.tt.generator_vllm (No module named "
        "'models.tt_transformers'): not tt-metal's, or a tt-metal too old")
    no_loguru = ModuleNotFoundError("No module named 'loguru'", name="loguru")
    assert check_models_package(found, _importer(no_loguru)).line() == (
        "missing  tt-metal models: models.tt_transformers.tt.generator_vllm needs the module 'loguru', which "
        "is not installed -> pip install it (tt-metal's tt_metal/python_env requirements list it)")
    assert check_models_package(found, _importer(RuntimeError("boom"))).detail == \
        "models.tt_transformers.tt.generator_vllm fails to import: RuntimeError: boom"


class _Generator:
    """What our runner calls, with tt-metal's signatures (generator.py / generator_vllm.py)."""

    model_capabilities = {"supports_prefix_caching": True}

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              tt_data_parallel: int = 1) -> Any: ...
    def allocate_kv_cache(self, *args: Any, **kwargs: Any) -> Any: ...
    def prefill_forward(self, *args: Any, **kwargs: Any) -> Any: ...
    def prefill_forward_text(self, tokens: Any, page_table: Any = None, kv_cache: Any = None,
                             prompt_lens: Any = None, empty_slots: Any = None,
                             start_pos: Any = None) -> Any: ...
    def decode_forward(self, *args: Any, **kwargs: Any) -> Any: ...
    def decode_forward_text(self, tokens: Any, start_pos: Any, page_table: Any = None, kv_cache: Any = None,
                            enable_trace: bool = True, read_from_device: bool = True) -> Any: ...
    def read_decode_output(self, tt_out: Any, async_read: bool = False) -> Any: ...
    def process_decode_output_host(self, tt_out: Any, is_tokens: bool = False) -> Any: ...
    def warmup_model_decode(self, kv_cache: Any, enable_trace: bool, max_batch_size: int) -> None: ...


class _NoPrefixGenerator(_Generator):
    model_capabilities = {"supports_prefix_caching": False}

    def prefill_forward_text(self, tokens: Any, page_table: Any = None, kv_cache: Any = None,
                             prompt_lens: Any = None) -> Any: ...


class _OldGenerator(_Generator):
    def read_decode_output(self, tt_out: Any, unpadded_batch: int, is_tokens: bool = False) -> Any: ...
    process_decode_output_host = None  # type: ignore[assignment]


class _NoProcessGenerator(_Generator):
    process_decode_output_host = None  # type: ignore[assignment]


class _BadReadGenerator(_Generator):
    def read_decode_output(self, tt_out: Any, blocking: bool) -> Any: ...  # type: ignore[override]


class _KwargsGenerator:
    """Every call forwarded as **kwargs, no *_text method: the signatures say nothing, taken as taking."""

    @classmethod
    def initialize_vllm_model(cls, *args: Any, **kwargs: Any) -> Any: ...
    def allocate_kv_cache(self, *args: Any, **kwargs: Any) -> Any: ...
    def prefill_forward(self, *args: Any, **kwargs: Any) -> Any: ...
    def decode_forward(self, *args: Any, **kwargs: Any) -> Any: ...
    def read_decode_output(self, *args: Any, **kwargs: Any) -> Any: ...
    def process_decode_output_host(self, *args: Any, **kwargs: Any) -> Any: ...


def _entry(cls: type | BaseException) -> ModelEntry:
    def resolve() -> type:
        if isinstance(cls, BaseException):
            raise cls
        return cls
    return ModelEntry("TTLlamaForCausalLM", WHERE, resolve)


def test_a_generator_class_against_the_runners_calls() -> None:
    # what the load path makes of the class (models/tt_capabilities.py), not a reading of its own
    where, current = WHERE, "read: read_decode_output(async_read)"
    assert check_generator(_entry(_Generator)) == Check(
        "ok", "TTLlamaForCausalLM",
        f"{where}: model_capabilities={{'supports_prefix_caching': True}}; {current}; warmup: "
        "warmup_model_decode")
    assert check_generator(_entry(_NoPrefixGenerator)).line() == (
        f"warn     TTLlamaForCausalLM: {where}: prefill_forward takes no start_pos (prefix caching (tt-metal "
        "PR #33883, 2026)), no empty_slots (data_parallel_size > 1); model_capabilities="
        f"{{'supports_prefix_caching': False}}; {current}; warmup: warmup_model_decode -> a newer tt-metal "
        "release has them")
    # the older read (tt_out, unpadded_batch) runs inside decode_forward: no process_decode_output_host
    assert check_generator(_entry(_OldGenerator)) == Check(
        "ok", "TTLlamaForCausalLM", f"{where}: model_capabilities={{'supports_prefix_caching': True}}; read: "
        "older, inside decode_forward(read_from_device); warmup: warmup_model_decode")
    assert check_generator(_entry(_NoProcessGenerator)).line() == (
        f"missing  TTLlamaForCausalLM: {where} lacks process_decode_output_host; model_capabilities="
        "{'supports_prefix_caching': True} -> use a tt-metal release whose generator has them (the "
        "README's Tenstorrent section)")
    # every call **kwargs and nothing declared: the runner passes what it always passes, and no
    # start_pos or empty_slots (the load path's reading of an undeclared class)
    assert check_generator(_entry(_KwargsGenerator)).line() == (
        f"warn     TTLlamaForCausalLM: {where}: prefill_forward takes no start_pos (prefix caching (tt-metal "
        "PR #33883, 2026)), no empty_slots (data_parallel_size > 1); no model_capabilities; read: "
        "read_decode_output(async_read); warmup: none -> a newer tt-metal release has them")
    bad = check_generator(_entry(_BadReadGenerator))
    assert (bad.status, bad.detail.split(" is neither ")[1].split(";")[0]) == (
        "missing", "tt-metal's read_decode_output(tt_out, async_read=False) nor the older (tt_out, "
        "unpadded_batch, is_tokens=False)")
    broken = check_generator(_entry(ModuleNotFoundError("No module named 'vllm'", name="vllm")))
    assert broken.detail == f"{where} does not resolve: ModuleNotFoundError: No module named 'vllm'"


def test_hf_model_is_reported_not_required(tmp_path: Path) -> None:
    unset = "unset: the loader sets it from the model option"
    assert check_hf_model({}, "") == Check("ok", "HF_MODEL", unset)
    same = check_hf_model({"HF_MODEL": str(tmp_path)}, str(tmp_path))
    assert same == Check("ok", "HF_MODEL", str(tmp_path))
    other = check_hf_model({"HF_MODEL": "/elsewhere"}, str(tmp_path))
    assert other.line() == (f"warn     HF_MODEL: /elsewhere, but --model is {tmp_path}: tt-metal loads "
                            "HF_MODEL's weights -> unset HF_MODEL and let the loader set it from model")


def test_a_checkpoints_architectures_map_to_a_tt_class(tmp_path: Path) -> None:
    registry = build_registry("tt", extra_models_dir="", builtin=True)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MistralForCausalLM"]}))
    mapped = (f"{tmp_path}: architectures ['MistralForCausalLM'] -> TTMistralForCausalLM "
              "(models.tt_transformers.tt.generator_vllm:MistralForCausalLM)")
    assert check_checkpoint(str(tmp_path), registry, builtins_import=True) == Check("ok", "model", mapped)
    assert check_checkpoint(str(tmp_path), registry, builtins_import=False) == Check(
        "missing", "model", f"{mapped}, which needs tt-metal's generator_vllm, and it does not import (see "
        "tt-metal models above)")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    assert check_checkpoint(str(tmp_path), registry, builtins_import=True).line() == (
        "missing  model: architectures=['GPT2LMHeadModel'] are not supported on tt; known: "
        "TTGemma3ForConditionalGeneration, TTLlamaForCausalLM, TTMistral3ForConditionalGeneration, "
        "TTMistralForCausalLM, TTMllamaForConditionalGeneration, TTQwen2ForCausalLM, "
        "TTQwen2_5_VLForConditionalGeneration, TTQwen3ForCausalLM "
        "-> add a bundle for it with extra_models_dir")
    assert check_checkpoint(str(tmp_path / "none"), registry, builtins_import=True).line() == (
        f"missing  model: {tmp_path / 'none'}: no config.json there -> give the folder of an HF checkpoint "
        "(config.json and safetensors)")


def test_the_doctor_loads_no_torch_and_no_engine() -> None:
    code = ("import sys, tt_backend.tt_doctor.__main__; print(sorted(m for m in sys.modules if m == 'torch' "
            "or m.startswith(('tt_backend.engine', 'tt_backend.runtime', 'tt_backend.scheduler'))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
