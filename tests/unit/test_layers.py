"""The house rules of ARCHITECTURE.md, checked on the source: imports point down the layers, the
scheduler needs neither torch nor the runtime, and the runtime imports no model definition."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tt_backend"

# Top to bottom; a module may import its own part and any part below it.
# mesh_options: the Tenstorrent mesh options as values, config.py's companion (config validates them)
LAYERS = ["openai_front", "triton", "engine", "scheduler", "runtime", "sampling", "models", "devices", "text",
          "config", "mesh_options", "contract"]


def _part(module: str) -> str:
    return module.split(".")[1]


def _imports() -> dict[str, set[str]]:
    """tt_backend modules each tt_backend source file imports, by its module name."""
    out: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(("tt_backend", *path.relative_to(PACKAGE).with_suffix("").parts))
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tt_backend."):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("tt_backend."))
        out[name] = found
    return out


def test_every_import_points_down_the_layers() -> None:
    upward = []
    for module, imported in _imports().items():
        if module.count(".") < 1 or module.endswith("__init__") and module.count(".") == 1:
            continue
        rank = LAYERS.index(_part(module))
        upward += [f"{module} -> {dep}" for dep in imported if LAYERS.index(_part(dep)) < rank]
    assert upward == []


def test_the_runtime_imports_no_model_definition_and_the_contract_no_other_layer() -> None:
    imports = _imports()
    runtime_to_models = [f"{m} -> {d}" for m, deps in imports.items() if _part(m) == "runtime"
                         for d in deps if _part(d) == "models"]
    contract_out = [f"{m} -> {d}" for m, deps in imports.items() if _part(m) == "contract"
                    for d in deps if _part(d) != "contract"]
    assert (runtime_to_models, contract_out) == ([], [])


def _loaded_in_a_fresh_interpreter(modules: list[str], watched: list[str]) -> list[str]:
    """Of `watched` (torch, and tt_backend part prefixes), the modules importing `modules` loads."""
    code = (f"import sys; import {', '.join(modules)}; print(sorted(m for m in sys.modules "
            f"if m == 'torch' or m.startswith({tuple(watched)!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=PACKAGE.parent)
    return list(ast.literal_eval(result.stdout.strip()))


def test_the_scheduler_loads_neither_torch_nor_the_runtime() -> None:
    assert _loaded_in_a_fresh_interpreter(
        ["tt_backend.scheduler.lane_coordinator", "tt_backend.scheduler.kv_manager"],
        ["tt_backend.runtime", "tt_backend.engine", "tt_backend.models", "tt_backend.devices"]) == []


def test_the_openai_front_loads_no_torch_and_no_engine() -> None:
    assert _loaded_in_a_fresh_interpreter(
        ["tt_backend.openai_front.app", "tt_backend.openai_front.__main__"],
        ["tt_backend.runtime", "tt_backend.engine", "tt_backend.scheduler", "tt_backend.triton",
         "tt_backend.devices"]) == []
