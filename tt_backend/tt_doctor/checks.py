"""The doctor's machine checks: each takes the facts it needs and returns one `Check`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tt_backend.mesh_options import MeshOptions, check_fits, parse_mesh_device
from tt_backend.models.registry import TT_BUILTINS, ModelEntry, ModelRegistry

Status = Literal["ok", "missing", "warn"]

TTNN_PYTHONS = ((3, 10), (3, 12))
"""The Pythons ttnn has wheels for."""
SETUP = "run scripts/setup_tt_hardware.sh"


@dataclass(frozen=True)
class Check:
    """One finding: `missing` fails the doctor, `warn` does not."""

    status: Status
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<7}  {self.name}: {self.detail}" + (f" -> {self.fix}" if self.fix else "")


@dataclass(frozen=True)
class TTNNFacts:
    """What ttnn told the doctor; `error` when it did not import (then the rest is empty)."""

    version: str = ""
    error: str = ""
    chips: int = 0
    chips_error: str = ""
    cluster: str | None = None
    """ttnn's ClusterType name (GALAXY, BLACKHOLE_GALAXY, T3K, N150, ...); None: not known."""
    fabrics: tuple[str, ...] = ()
    """The members of ttnn.FabricConfig."""


def check_python(version: tuple[int, ...]) -> Check:
    shown = ".".join(str(v) for v in version[:3])
    if tuple(version[:2]) in TTNN_PYTHONS:
        return Check("ok", "Python", shown)
    return Check("missing", "Python", f"{shown}: ttnn has wheels for Python 3.10 and 3.12 only",
                 f"make the venv with python3.12 or python3.10 ({SETUP})")


def check_ttnn(facts: TTNNFacts) -> Check:
    if facts.error:
        return Check("missing", "ttnn", facts.error, SETUP)
    return Check("ok", "ttnn", facts.version)


def check_chips(facts: TTNNFacts) -> Check:
    if facts.error:
        return Check("missing", "chips", "not counted: ttnn does not import")
    if facts.chips_error:
        return Check("missing", "chips", f"ttnn.get_num_devices() failed: {facts.chips_error}",
                     "check the card and its driver (tt-smi lists the chips)")
    if facts.chips < 1:
        return Check("missing", "chips", "ttnn sees no Tenstorrent chip",
                     "check the card and its driver (tt-smi lists the chips)")
    cluster = f" (cluster {facts.cluster})" if facts.cluster else ""
    return Check("ok", "chips", f"ttnn sees {facts.chips}{cluster}")


def mesh_shape(value: str, facts: TTNNFacts) -> tuple[Check, tuple[int, int] | None]:
    """The mesh MESH_DEVICE (or --mesh-device) names, checked against the chips ttnn sees."""
    if not value:
        if facts.chips < 1:
            return Check("warn", "MESH_DEVICE", "unset: every chip as one row; no chip to count"), None
        shape = (1, facts.chips)
        return Check("ok", "MESH_DEVICE", f"unset: every chip as one row, 1x{facts.chips}"), shape
    try:
        shape = parse_mesh_device(value)
    except ValueError as exc:
        return Check("missing", "MESH_DEVICE", str(exc)), None
    rows, cols = shape
    if facts.error or facts.chips < 1:
        return Check("warn", "MESH_DEVICE", f"{value} is {rows}x{cols}; not checked against the machine "
                     "(no chip seen)"), shape
    try:
        check_fits(shape, facts.chips)
    except ValueError as exc:
        named = "" if value == f"{rows}x{cols}" else f"{value} is {rows}x{cols}: "
        return Check("missing", "MESH_DEVICE", named + str(exc)), shape
    used = f"{value} is {rows}x{cols}, {rows * cols} of {facts.chips} chip(s)"
    return Check("ok", "MESH_DEVICE", used), shape


def check_fabric(options: MeshOptions, shape: tuple[int, int] | None, facts: TTNNFacts) -> Check:
    """The fabric the mesh would be opened with, and whether this ttnn has it."""
    if shape is None:
        return Check("warn", "fabric", "not checked: no mesh")
    rows, cols = shape
    fabric = options.fabric_for(rows * cols, facts.cluster)
    said = f"fabric_config={options.fabric} sets {fabric} on a {rows}x{cols} mesh"
    if fabric != "DISABLED" and facts.fabrics and fabric not in facts.fabrics:
        lacks = f"{said}, which this ttnn lacks (it has {', '.join(facts.fabrics)})"
        return Check("missing", "fabric", lacks, "set fabric_config to one of those, or install a newer ttnn")
    return Check("ok", "fabric", said)


def check_hf_model(env: Mapping[str, str], model: str) -> Check:
    """tt-metal's ModelArgs reads the checkpoint from the env HF_MODEL (and asserts on it)."""
    value = env.get("HF_MODEL", "")
    if not value:
        where = f" ({model})" if model else ""
        return Check("ok", "HF_MODEL", f"unset: the loader sets it from the model option{where}")
    if model and Path(value).expanduser().resolve() != Path(model).expanduser().resolve():
        return Check("warn", "HF_MODEL", f"{value}, but --model is {model}: tt-metal loads HF_MODEL's "
                     "weights", "unset HF_MODEL and let the loader set it from model")
    return Check("ok", "HF_MODEL", value)


def is_builtin(entry: ModelEntry) -> bool:
    """A tt-metal generator_vllm class (not a bundle's, which may register under the same name)."""
    return TT_BUILTINS.get(entry.arch) == entry.class_path


def check_checkpoint(model: str, registry: ModelRegistry, builtins_import: bool) -> Check:
    """A local checkpoint's config.json `architectures` map to a TT class of `registry` that can
    load here (a builtin only where tt-metal's generator_vllm imports)."""
    path = Path(model).expanduser()
    config = path / "config.json"
    if not config.is_file():
        return Check("missing", "model", f"{model}: no config.json there",
                     "give the folder of an HF checkpoint (config.json and safetensors)")
    try:
        architectures: Any = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError) as exc:
        return Check("missing", "model", f"{config} does not read as JSON: {exc}")
    try:
        entry = registry.find(list(architectures))
    except ValueError as exc:
        return Check("missing", "model", str(exc), "add a bundle for it with extra_models_dir")
    mapped = f"{model}: architectures {architectures} -> {entry.arch} ({entry.class_path})"
    if is_builtin(entry) and not builtins_import:
        return Check("missing", "model", f"{mapped}, which needs tt-metal's generator_vllm, and it does not "
                     "import (see tt-metal models above)")
    return Check("ok", "model", mapped)
