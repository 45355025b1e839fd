"""Architecture registry: the HF `architectures` name of a checkpoint → an implementation class.

- torch: our implementations, registered under the HF name (`LlamaForCausalLM`, ...).
- Tenstorrent: `TT<Arch>` names map to TT-Metal generator classes, resolved lazily and only
  when `ttnn` is importable (unverified on hardware here).
- Bundles: each folder of `extra_models_dir` (EngineConfig; env EXTRA_MODELS_DIR) holds
  `vllm_metadata.json` (`arch`, `main_class` as `module:Class`) and its adapter code; it registers
  as `TT<arch>` on Tenstorrent and as `arch` on torch. A broken bundle is skipped with a warning
  naming its folder. `builtin_models=false` (env TT_VLLM_BUILTIN_MODELS=0) narrows the registry
  to the bundles. On torch the adapter is imported at startup, so an import error skips the
  bundle there; on Tenstorrent it is imported when first resolved (it needs ttnn), and only
  metadata errors show at startup.
An implementation class provides `from_hf_config(hf_config) -> module`, a `capabilities`
class attribute (ModelCapabilities), and on the module `spec` (ModelSpec) and
`forward(batch, kv_cache) -> logits`.
"""

from __future__ import annotations

import grp
import importlib
import importlib.util
import json
import logging
import os
import pwd
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal

logger = logging.getLogger(__name__)

Platform = Literal["torch", "tt"]

TORCH_BUILTINS = {
    **{arch: f"tt_backend.models.llama:{arch}"
       for arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")},
    "Gemma3ForCausalLM": "tt_backend.models.gemma3:Gemma3ForCausalLM",
    "LlavaForConditionalGeneration": "tt_backend.models.llava:LlavaForConditionalGeneration",
    "Gemma3ForConditionalGeneration": "tt_backend.models.gemma3_vision:Gemma3ForConditionalGeneration",
    "MllamaForConditionalGeneration": "tt_backend.models.mllama:MllamaForConditionalGeneration",
    "Qwen2VLForConditionalGeneration": "tt_backend.models.qwen2_vl:Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration": "tt_backend.models.qwen2_vl:Qwen2_5_VLForConditionalGeneration",
}
# TT-Metal's vLLM-facing generators (tt-metal models/tt_transformers); unverified on hardware here.
TT_BUILTINS = {
    "TTLlamaForCausalLM": "models.tt_transformers.tt.generator_vllm:LlamaForCausalLM",
    "TTMistralForCausalLM": "models.tt_transformers.tt.generator_vllm:MistralForCausalLM",
    "TTQwen2ForCausalLM": "models.tt_transformers.tt.generator_vllm:QwenForCausalLM",
    "TTQwen3ForCausalLM": "models.tt_transformers.tt.generator_vllm:QwenForCausalLM",
    # multimodal (docs/tt_multimodal_generators.md): images reach prefill_forward as the plugin sends them
    "TTQwen2_5_VLForConditionalGeneration":
        "models.demos.qwen25_vl.tt.generator_vllm:Qwen2_5_VLForConditionalGeneration",
    "TTGemma3ForConditionalGeneration":
        "models.tt_transformers.tt.generator_vllm:Gemma3ForConditionalGeneration",
    "TTMistral3ForConditionalGeneration":
        "models.tt_transformers.tt.generator_vllm:Mistral3ForConditionalGeneration",
    # cross-attention (TTCallForms.cross_attention): one PIL image a row, cross_page_table, masks back
    "TTMllamaForConditionalGeneration":
        "models.tt_transformers.tt.generator_vllm:MllamaForConditionalGeneration",
}
TT_IMAGES_UNREACHABLE = {
    "TTMistral3ForConditionalGeneration": (
        "tt-metal's Mistral3ForConditionalGeneration.prefill_forward takes images only as `images` objects "
        "(with pixel_values and image_sizes), which the Tenstorrent plugin never sends, and passes no "
        "enable_trace on, so a traced prefill would drop them as well (docs/tt_multimodal_generators.md "
        "2.3); it is served text only, and a request with images is refused"),
}
"""Multimodal generators whose images no caller's arguments reach: served text only, and why."""


@dataclass(frozen=True)
class ModelEntry:
    arch: str
    class_path: str
    resolve: Callable[[], type]


def _ttnn_available() -> bool:
    return importlib.util.find_spec("ttnn") is not None


def _import_class(class_path: str, search_dir: Path | None = None) -> type:
    """Import `module:Class`; a bundle's module loads from its folder under a unique name, so
    two bundles may both call their module `adapter`."""
    module_name, sep, class_name = class_path.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(f"main_class {class_path!r} is not of the form 'module:Class'")
    if search_dir is None:
        module = importlib.import_module(module_name)
    else:
        module = _import_from_folder(search_dir, module_name)
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"{module_name} has no class {class_name}")
    return cls


def _import_from_folder(folder: Path, module_name: str) -> ModuleType:
    relative = Path(*module_name.split("."))
    path = folder / relative.with_suffix(".py")
    if not path.is_file():
        path = folder / relative / "__init__.py"
    if not path.is_file():
        raise FileNotFoundError(f"no module {module_name!r} in {folder}")
    unique = f"tt_bundle_{abs(hash(str(folder.resolve())))}_{module_name.replace('.', '_')}"
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[unique]
        raise
    return module


def _lazy(class_path: str, search_dir: Path | None, needs_ttnn: bool) -> Callable[[], type]:
    def resolve() -> type:
        if needs_ttnn and not _ttnn_available():
            raise ValueError(f"{class_path} needs ttnn (TT-Metal), which is not importable here")
        return _import_class(class_path, search_dir)
    return resolve


class ModelRegistry:
    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self._entries: dict[str, ModelEntry] = {}

    def register(self, arch: str, class_path: str, search_dir: Path | None = None) -> None:
        name = f"TT{arch}" if self.platform == "tt" and not arch.startswith("TT") else arch
        self._entries[name] = ModelEntry(name, class_path,
                                         _lazy(class_path, search_dir, self.platform == "tt"))

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, arch: str) -> ModelEntry:
        return self._entries[arch]

    def find(self, architectures: list[str]) -> ModelEntry:
        """The entry for the first declared architecture this registry knows."""
        for arch in architectures:
            name = f"TT{arch}" if self.platform == "tt" else arch
            if name in self._entries:
                return self._entries[name]
        raise ValueError(f"architectures={architectures} are not supported on {self.platform}; "
                         f"known: {', '.join(self.names()) or '(none)'}")


def build_registry(platform: Platform = "torch", *, extra_models_dir: str, builtin: bool) -> ModelRegistry:
    """The builtins (when `builtin`) plus the bundles of `extra_models_dir` ("" = none)."""
    registry = ModelRegistry(platform)
    if builtin:
        for arch, path in (TT_BUILTINS if platform == "tt" else TORCH_BUILTINS).items():
            registry.register(arch, path)
    if extra_models_dir:
        for folder in sorted(Path(extra_models_dir).iterdir()):
            if folder.is_dir():
                _register_bundle(registry, folder)
    return registry


def writable_by_others(path: Path) -> str | None:
    """Why `path` may be written by a user other than its owner (None: it may not). A bundle's code
    runs in the server, so a folder or file that another user can change is refused. Group write
    counts, unless the group is the owner's own (a user-private group, as Debian gives each user)."""
    info = path.stat()
    if info.st_mode & stat.S_IWOTH:
        return f"{path} is writable by every user (mode {stat.filemode(info.st_mode)})"
    if info.st_mode & stat.S_IWGRP:
        try:
            private = grp.getgrgid(info.st_gid).gr_name == pwd.getpwuid(info.st_uid).pw_name
        except KeyError:
            private = False
        if not private:
            return f"{path} is writable by its group (mode {stat.filemode(info.st_mode)})"
    if info.st_uid not in (os.getuid(), 0):
        return f"{path} belongs to another user (uid {info.st_uid})"
    return None


def _register_bundle(registry: ModelRegistry, folder: Path) -> None:
    try:
        for path in (folder.parent, folder, *folder.rglob("*")):
            why = writable_by_others(path)
            if why is not None:
                raise PermissionError(f"{why}; a bundle's code runs in the server, so only its owner may "
                                      "write it")
        with open(folder / "vllm_metadata.json", encoding="utf-8") as f:
            meta = json.load(f)
        arch, main_class = meta["arch"], meta["main_class"]
        if not isinstance(arch, str) or not isinstance(main_class, str):
            raise ValueError("arch and main_class must be strings")
        if registry.platform == "torch":
            cls = _import_class(main_class, folder)  # import now: a broken bundle shows at startup
            for attribute in ("from_hf_config", "capabilities"):
                if not hasattr(cls, attribute):
                    raise ValueError(f"{main_class} has no {attribute}")
        registry.register(arch, main_class, folder)
        logger.info("registered model bundle %s from %s", arch, folder)
    except Exception as exc:  # noqa: BLE001 (any failure skips just this bundle)
        logger.warning("skipping model bundle %s: %s: %s", folder, type(exc).__name__, exc)
