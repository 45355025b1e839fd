"""The doctor's tt-metal checks: the `models` package (and the vLLM its generator_vllm imports), and
each TT generator class against the calls our runner makes."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType

from tt_backend.models.registry import ModelEntry
from tt_backend.models.tt_capabilities import generator_traits, read_form, takes
from tt_backend.tt_doctor.checks import SETUP, Check

GENERATOR_VLLM = "models.tt_transformers.tt.generator_vllm"
REQUIRED_METHODS = ("initialize_vllm_model", "allocate_kv_cache", "prefill_forward", "decode_forward",
                    "read_decode_output")
"""And process_decode_output_host with the current read form (the older reads in decode_forward)."""
# (method, parameter) our runner always passes (runtime/generator_runner.py), found on the method or
# the `*_text` method tt-metal's prefill_forward / decode_forward forward to.
REQUIRED_PARAMETERS = (("decode_forward", "enable_trace"), ("decode_forward", "read_from_device"))
OPTIONAL_PARAMETERS = {("prefill_forward", "start_pos"): "prefix caching (tt-metal PR #33883, 2026)",
                       ("prefill_forward", "empty_slots"): "data_parallel_size > 1"}
WARMUP_HOOKS = ("warmup_model_prefill", "warmup_model_decode")
BUNDLE_FIX = "or point extra_models_dir at a bundle"

Importer = Callable[[str], ModuleType]


def check_models_package(find: Callable[[str], object | None] = importlib.util.find_spec,
                         importer: Importer = importlib.import_module) -> Check:
    """tt-metal's `models` package and its generator_vllm, which imports the Tenstorrent vLLM
    (`vllm`) at module level in many tt-metal versions: each way it fails, said apart."""
    name = "tt-metal models"
    if find("models") is None:
        return Check("missing", name, "no `models` package: tt-metal's checkout is not on the Python path "
                     "(models is not on PyPI)", f"{SETUP} (a checkout at your ttnn's tag, on the path "
                     f"by a .pth file), {BUNDLE_FIX}")
    try:
        importer(GENERATOR_VLLM)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing == "vllm":
            return Check("missing", name, f"{GENERATOR_VLLM} imports vllm (the Tenstorrent vLLM), which is "
                         f"not installed: {exc}", f"install it as scripts/setup_tt_hardware.sh does, "
                         f"{BUNDLE_FIX}")
        if missing == "models":
            return Check("missing", name, f"this `models` package has no {GENERATOR_VLLM} ({exc}): not "
                         "tt-metal's, or a tt-metal too old", f"{SETUP}, {BUNDLE_FIX}")
        if missing == "ttnn":
            return Check("missing", name, f"{GENERATOR_VLLM} needs ttnn, which does not import")
        return Check("missing", name, f"{GENERATOR_VLLM} needs the module {exc.name!r}, which is not "
                     "installed", "pip install it (tt-metal's tt_metal/python_env requirements list it)")
    except Exception as exc:  # noqa: BLE001 (any failure of the import is the finding)
        return Check("missing", name, f"{GENERATOR_VLLM} fails to import: {type(exc).__name__}: {exc}")
    return Check("ok", name, f"{GENERATOR_VLLM} imports")


def _accepts(cls: type, method: str, parameter: str) -> bool:
    """Whether a call of `method` passing `parameter` by keyword is accepted: named by it or the
    `*_text` method it forwards to, or taken by **kwargs."""
    return takes(cls, method, parameter, declared=True)


def check_generator(entry: ModelEntry) -> Check:
    """The class `entry` resolves to has every method the runner calls, with the parameters it
    passes; what the runner will do with it (models/tt_capabilities.py, the load path's reading of
    the class) is shown: its model_capabilities, optional parameters, read form, warmup hooks."""
    name = entry.arch
    try:
        cls = entry.resolve()
    except Exception as exc:  # noqa: BLE001 (any failure to resolve is the finding)
        return Check("missing", name, f"{entry.class_path} does not resolve: {type(exc).__name__}: {exc}")
    caps = getattr(cls, "model_capabilities", None)
    shown = f"model_capabilities={caps!r}" if isinstance(caps, dict) else "no model_capabilities"
    lacks = [m for m in REQUIRED_METHODS if not callable(getattr(cls, m, None))]
    lacks += [f"{m}({p}=)" for m, p in REQUIRED_PARAMETERS if m not in lacks and not _accepts(cls, m, p)]
    try:
        current = not lacks and read_form(cls)
        traits = None if lacks else generator_traits(cls, None, 1, 32)
    except ValueError as exc:
        return Check("missing", name, f"{entry.class_path}: {exc}; {shown}")
    if current and not callable(getattr(cls, "process_decode_output_host", None)):
        lacks.append("process_decode_output_host")
    if lacks or traits is None:
        return Check("missing", name, f"{entry.class_path} lacks {', '.join(lacks)}; {shown}",
                     "use a tt-metal release whose generator has them (the README's Tenstorrent section)")
    taken = {"start_pos": traits.calls.takes_start_pos, "empty_slots": traits.calls.takes_empty_slots}
    without = [f"no {p} ({why})" for (_, p), why in OPTIONAL_PARAMETERS.items() if not taken[p]]
    hooks = [h for h in WARMUP_HOOKS if callable(getattr(cls, h, None))]
    read = "read_decode_output(async_read)" if current else "older, inside decode_forward(read_from_device)"
    notes = [shown, f"read: {read}", f"warmup: {', '.join(hooks) or 'none'}"]
    if without:
        return Check("warn", name, f"{entry.class_path}: prefill_forward takes {', '.join(without)}; "
                     + "; ".join(notes), "a newer tt-metal release has them")
    return Check("ok", name, f"{entry.class_path}: " + "; ".join(notes))
