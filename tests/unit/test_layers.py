"""The house rules of ARCHITECTURE.md, checked on the source: imports point down the layers, the
scheduler needs neither torch nor the runtime, and the runtime imports no model definition."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tt_backend"

# Top to bottom; a module may import its own part and any part below it.
# tt_doctor: the Tenstorrent install checker users run (python -m tt_backend.tt_doctor)
# assembly: the composition room (builds the engines; only triton and tests import it)
# mesh_options: the Tenstorrent mesh options as values, config's companion (config validates them)
LAYERS = ["tt_doctor", "openai_front", "triton", "assembly", "engine", "scheduler", "runtime", "sampling",
          "models", "devices", "text", "config", "mesh_options", "contract"]


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


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_the_import_graph_drawn_by_grimp_has_no_circle() -> None:
    import grimp

    graph = grimp.build_graph("tt_backend")  # every import statement, those inside functions too
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert len(edges) > 90 and _strongly_connected(edges) == []


_DEVICE_KIND_TEST = re.compile(r"""\.(type|kind)\s*[!=]=\s*["'](cpu|cuda)["']|device_type\s*[!=]=""")


def test_device_policy_is_asked_of_the_device_object_not_decided_by_strings_outside_devices() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in PACKAGE.rglob("*.py")
             if path.relative_to(PACKAGE).parts[0] != "devices"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if _DEVICE_KIND_TEST.search(line)]
    assert found == []


# Who may compute with block ids: the KV manager and its pool (they hand them out), and each runner
# where it maps a row's lane-local ids into its own cache regions.
_BLOCK_ARITHMETIC_HOMES = {"scheduler/kv_manager.py", "scheduler/block_pool.py", "runtime/inputs.py",
                           "runtime/generator_runner.py"}


def _block_id_names(tree: ast.AST) -> set[str]:
    """Names bound to block ids: loop targets over anything named `*block_id*`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.comprehension, ast.For)) and _names_block_ids(node.iter, set()):
            names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return names


def _names_block_ids(node: ast.AST, bound: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and ("block_id" in n.id or n.id in bound)
               or isinstance(n, ast.Attribute) and "block_id" in n.attr for n in ast.walk(node))


def test_block_ids_are_computed_with_only_in_the_kv_manager_and_the_runners() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = _block_id_names(tree)
        for node in ast.walk(tree):
            arithmetic = isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult,
                                                                               ast.FloorDiv))
            if arithmetic and isinstance(node, ast.BinOp) \
                    and (_names_block_ids(node.left, bound) or _names_block_ids(node.right, bound)) \
                    and where not in _BLOCK_ARITHMETIC_HOMES:
                found.append(f"{where}:{node.lineno}")
    assert found == []
    # what the check finds: the merge that used to offset lane l's ids by l x blocks_per_lane
    sample = ast.parse("rows = tuple(base + b for b in row.block_ids)")
    assert any(isinstance(n, ast.BinOp) and _names_block_ids(n, _block_id_names(sample))
               for n in ast.walk(sample))


def test_no_source_file_is_much_over_300_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 310}
    assert long == {}


def test_only_triton_imports_the_composition_room() -> None:
    outside = [f"{m} -> {d}" for m, deps in _imports().items() if _part(m) not in ("assembly", "triton")
               for d in deps if _part(d) == "assembly"]
    assert outside == []
