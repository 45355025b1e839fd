"""`python -m tt_backend.tt_doctor` on ttnn's mock devices: ttnn and the chips it sees, MESH_DEVICE
against them, the fabric auto picks, and tt-metal's models package (not installed here) said plainly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tt.mock_device import BUNDLES, MOCK, mock_env

MODELS_MISSING = (
    "missing  tt-metal models: no `models` package: tt-metal's checkout is not on the Python path (models is "
    "not on PyPI) -> run scripts/setup_tt_hardware.sh (a checkout at your ttnn's tag, on the path by a .pth "
    "file), or point extra_models_dir at a bundle")


def _doctor(cluster: str, mesh_device: str, *args: str) -> tuple[list[str], int]:
    """The doctor's check lines (ttnn's own log lines left out) and its exit status."""
    work = MOCK / "work"  # ttnn writes generated/ into the working directory
    work.mkdir(parents=True, exist_ok=True)
    env = mock_env(cluster) | {"MESH_DEVICE": mesh_device}
    env.pop("HF_MODEL", None)
    env.pop("EXTRA_MODELS_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "tt_backend.tt_doctor", *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines()
             if line.startswith(("ok ", "missing ", "warn ", "device=tt:"))]
    return lines, proc.returncode


def test_on_an_n150_a_t3k_mesh_is_refused_and_the_models_package_is_missing() -> None:
    lines, status = _doctor("n150", "T3K")
    assert lines[0] == f"ok       Python: {'.'.join(str(v) for v in sys.version_info[:3])}"
    assert lines[1].startswith("ok       ttnn: 0.81.1 (") and lines[1].endswith("site-packages/ttnn)")
    assert lines[2:] == [
        "ok       chips: ttnn sees 1 (cluster N150)",
        "missing  MESH_DEVICE: T3K is 1x8: MESH_DEVICE=1x8 needs 8 chips, but ttnn sees 1; set MESH_DEVICE "
        "(option mesh_device) to the mesh of this machine",
        "ok       fabric: fabric_config=auto sets FABRIC_1D on a 1x8 mesh",
        MODELS_MISSING,
        "missing  builtin TT classes: TTGemma3ForConditionalGeneration, TTLlamaForCausalLM, "
        "TTMistral3ForConditionalGeneration, TTMistralForCausalLM, TTMllamaForConditionalGeneration, "
        "TTQwen2ForCausalLM, "
        "TTQwen2_5_VLForConditionalGeneration, TTQwen3ForCausalLM: not checked, tt-metal's generator_vllm "
        "does not import",
        "ok       HF_MODEL: unset: the loader sets it from the model option",
        "device=tt: 3 thing(s) missing, each named above with what to do",
    ]
    assert status == 1


@pytest.mark.parametrize("cluster, mesh_device, mesh, fabric", [
    ("n150", "N150", "ok       MESH_DEVICE: N150 is 1x1, 1 of 1 chip(s)",
     "ok       fabric: fabric_config=auto sets DISABLED on a 1x1 mesh"),
    ("t3k", "(1, 8)", "ok       MESH_DEVICE: (1, 8) is 1x8, 8 of 8 chip(s)",
     "ok       fabric: fabric_config=auto sets FABRIC_1D on a 1x8 mesh"),
])
def test_a_mesh_that_fits(cluster: str, mesh_device: str, mesh: str, fabric: str) -> None:
    lines, status = _doctor(cluster, mesh_device)
    assert lines[3:5] == [mesh, fabric]
    # what is still missing: the models package, so the builtin classes
    assert lines[-1] == "device=tt: 2 thing(s) missing, each named above with what to do"
    assert status == 1


def test_a_bundle_serves_without_the_models_package(tmp_path: Path) -> None:
    """extra_models_dir with the contract generator: its class checked against the runner's calls,
    the models package only a warning, a Llama checkpoint mapped to it, exit 0."""
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (bundles / "tt_contract_llama").symlink_to(BUNDLES / "tt_contract_llama")
    checkpoint = tmp_path / "llama"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    lines, status = _doctor("n150", "N150", "--extra-models-dir", str(bundles), "--model", str(checkpoint))
    assert lines[5:] == [
        MODELS_MISSING.replace("missing ", "warn    ", 1),
        "ok       TTLlamaForCausalLM: contract_generator:TTLlamaForCausalLM: model_capabilities="
        "{'supports_prefix_caching': True, 'supports_async_decode': True}; read: "
        "read_decode_output(async_read); warmup: warmup_model_prefill, warmup_model_decode",
        "warn     builtin TT classes: TTGemma3ForConditionalGeneration, TTMistral3ForConditionalGeneration, "
        "TTMistralForCausalLM, TTMllamaForConditionalGeneration, TTQwen2ForCausalLM, "
        "TTQwen2_5_VLForConditionalGeneration, TTQwen3ForCausalLM: "
        "not checked, tt-metal's generator_vllm does not import",
        f"ok       HF_MODEL: unset: the loader sets it from the model option ({checkpoint})",
        f"ok       model: {checkpoint}: architectures ['LlamaForCausalLM'] -> TTLlamaForCausalLM "
        "(contract_generator:TTLlamaForCausalLM)",
        "device=tt: everything it needs is here",
    ]
    assert status == 0
