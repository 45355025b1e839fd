import logging
import shutil
from pathlib import Path

import pytest

from tt_backend.config import EngineConfig
from tt_backend.models.llama import LlamaForCausalLM, Qwen3ForCausalLM
from tt_backend.models.registry import build_registry

BUNDLES = Path(__file__).resolve().parents[1] / "bundles"


def test_builtins_resolve_by_hf_architecture() -> None:
    registry = build_registry("torch", extra_models_dir="", builtin=True)
    assert registry.names() == ["Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "LlamaForCausalLM",
                                "LlavaForConditionalGeneration", "MistralForCausalLM",
                                "MllamaForConditionalGeneration", "Qwen2ForCausalLM",
                                "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                                "Qwen3ForCausalLM"]
    assert registry.find(["Qwen3ForCausalLM"]).resolve() is Qwen3ForCausalLM
    with pytest.raises(ValueError, match=r"architectures=\['GPT2LMHeadModel'\] are not supported on torch"):
        registry.find(["GPT2LMHeadModel"])


def test_bundles_register_and_broken_ones_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tt_backend.models.registry"):
        registry = build_registry("torch", extra_models_dir=str(BUNDLES), builtin=True)
    assert "BundleLlamaForCausalLM" in registry.names()
    assert "BrokenForCausalLM" not in registry.names()
    assert "NoMainClassForCausalLM" not in registry.names()
    cls = registry.find(["BundleLlamaForCausalLM"]).resolve()
    assert issubclass(cls, LlamaForCausalLM) and cls.__name__ == "BundleLlama"
    warnings = [r.getMessage() for r in caplog.records]
    assert any(f"skipping model bundle {BUNDLES / 'broken_import'}: ModuleNotFoundError" in w
               for w in warnings), warnings
    assert any(f"skipping model bundle {BUNDLES / 'broken_metadata'}: KeyError" in w for w in warnings)


def test_builtin_models_off_leaves_only_bundles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TT_VLLM_BUILTIN_MODELS", "0")
    monkeypatch.setenv("EXTRA_MODELS_DIR", str(BUNDLES))
    config = EngineConfig()
    assert (config.builtin_models, config.extra_models_dir) == (False, str(BUNDLES))
    registry = build_registry("torch", extra_models_dir=config.extra_models_dir,
                              builtin=config.builtin_models)
    assert registry.names() == ["BundleLlamaForCausalLM"]


def test_build_registry_reads_its_arguments_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TT_VLLM_BUILTIN_MODELS", "0")
    monkeypatch.setenv("EXTRA_MODELS_DIR", str(BUNDLES))
    assert build_registry("torch", extra_models_dir="", builtin=True).names() == [
        "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "LlamaForCausalLM",
        "LlavaForConditionalGeneration", "MistralForCausalLM", "MllamaForConditionalGeneration",
        "Qwen2ForCausalLM", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
        "Qwen3ForCausalLM"]
    assert build_registry("torch", extra_models_dir="", builtin=False).names() == []


def test_tt_platform_uses_the_tt_prefix_and_needs_ttnn() -> None:
    registry = build_registry("tt", extra_models_dir=str(BUNDLES), builtin=True)
    assert "TTLlamaForCausalLM" in registry.names() and "LlamaForCausalLM" not in registry.names()
    assert "TTBundleLlamaForCausalLM" in registry.names()
    entry = registry.find(["LlamaForCausalLM"])
    assert entry.class_path == "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM"
    with pytest.raises(ValueError, match="needs ttnn"):  # ttnn is not installed on this machine
        entry.resolve()


@pytest.mark.parametrize(("where", "mode", "reason"), [
    ("folder", 0o777, "is writable by every user"),
    ("file", 0o646, "is writable by every user"),
    ("parent", 0o757, "is writable by every user"),
])
def test_a_bundle_others_can_write_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str,
                                               mode: int, reason: str) -> None:
    """EXTRA_MODELS_DIR runs the bundles' code: a bundle folder, file or the folder holding them
    that another user can write is skipped with the reason; locked down, the same bundle loads."""
    extra = tmp_path / "extra"
    bundle = extra / "good_llama"
    shutil.copytree(BUNDLES / "good_llama", bundle, ignore=shutil.ignore_patterns("__pycache__"))
    for path in (extra, *sorted(extra.rglob("*"))):
        path.chmod(0o755 if path.is_dir() else 0o644)
    extra.chmod(0o755)
    target = {"folder": bundle, "file": bundle / "vllm_metadata.json", "parent": extra}[where]
    target.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="tt_backend.models.registry"):
        refused = build_registry("torch", extra_models_dir=str(extra), builtin=False)
    assert refused.names() == []
    assert any(f"skipping model bundle {bundle}: PermissionError: {target} {reason}" in r.getMessage()
               and "only its owner may write it" in r.getMessage() for r in caplog.records), caplog.records
    target.chmod(0o755 if target.is_dir() else 0o644)
    assert build_registry("torch", extra_models_dir=str(extra), builtin=False).names() == [
        "BundleLlamaForCausalLM"]
