"""python -m tt_backend.tt_doctor [--mesh-device MESH] [--fabric-config NAME] [--model PATH]
                                [--extra-models-dir DIR]

Gathers this machine's facts (the Python, what ttnn reports, the env) and prints one line per check;
exit 0 when nothing device=tt needs is missing, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import sys
import typing
from collections.abc import Sequence
from pathlib import Path

from tt_backend.devices.tt.mesh import cluster_type, import_ttnn
from tt_backend.mesh_options import MESH_DEVICE_ENV, FabricName, MeshOptions
from tt_backend.models.registry import build_registry
from tt_backend.tt_doctor.checks import (
    Check,
    TTNNFacts,
    check_checkpoint,
    check_chips,
    check_fabric,
    check_hf_model,
    check_python,
    check_ttnn,
    is_builtin,
    mesh_shape,
)
from tt_backend.tt_doctor.generators import check_generator, check_models_package


def ttnn_facts() -> TTNNFacts:
    """Ask ttnn; every failure is recorded, none raised."""
    try:
        ttnn = import_ttnn()
    except ValueError as exc:
        return TTNNFacts(error=str(exc))
    try:
        version = importlib.metadata.version("ttnn")
    except importlib.metadata.PackageNotFoundError:  # a source build: no wheel metadata
        version = "(no wheel metadata: a source build?)"
    version += f" ({Path(ttnn.__file__).parent})"
    fabrics = tuple(getattr(getattr(ttnn, "FabricConfig", None), "__members__", {}))
    try:
        chips = int(ttnn.get_num_devices())
    except Exception as exc:  # noqa: BLE001 (the driver's failure is the finding)
        return TTNNFacts(version=version, chips_error=f"{type(exc).__name__}: {exc}", fabrics=fabrics)
    return TTNNFacts(version=version, chips=chips, cluster=cluster_type(ttnn) if chips else None,
                     fabrics=fabrics)


def run(args: argparse.Namespace) -> list[Check]:
    facts = ttnn_facts()
    checks = [check_python(sys.version_info[:3]), check_ttnn(facts), check_chips(facts)]
    mesh_check, shape = mesh_shape(args.mesh_device, facts)
    # only the fabric is read: the other sizes are the engine's, not checked here
    options = MeshOptions(shape, args.fabric_config, trace_region_size=0, l1_small_size=None,
                          worker_l1_size=None, dispatch_core_axis="auto", num_command_queues=1,
                          data_parallel=1)
    checks += [mesh_check, check_fabric(options, shape, facts)]
    registry = build_registry("tt", extra_models_dir=args.extra_models_dir, builtin=True)
    entries = [registry.entry(arch) for arch in registry.names()]
    builtins = [e.arch for e in entries if is_builtin(e)]
    models = check_models_package()
    if models.status == "missing" and len(builtins) < len(entries):
        models = dataclasses.replace(models, status="warn")  # the bundles serve without it
    checks.append(models)
    builtins_import = models.status == "ok"
    checks += [check_generator(e) for e in entries if builtins_import or not is_builtin(e)]
    if builtins and not builtins_import:
        checks.append(Check(models.status, "builtin TT classes", f"{', '.join(builtins)}: not checked, "
                            "tt-metal's generator_vllm does not import"))
    checks.append(check_hf_model(os.environ, args.model))
    if args.model:
        checks.append(check_checkpoint(args.model, registry, builtins_import))
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tt_backend.tt_doctor",
                                     description="What this machine has, and lacks, for device=tt.")
    parser.add_argument("--mesh-device", default=os.environ.get(MESH_DEVICE_ENV, ""),
                        help="the mesh to check (default: the env MESH_DEVICE)")
    parser.add_argument("--fabric-config", default="auto", choices=typing.get_args(FabricName),
                        help="the fabric_config option to check (default: auto)")
    parser.add_argument("--model", default="", help="an HF checkpoint folder whose architecture to check")
    parser.add_argument("--extra-models-dir", default=os.environ.get("EXTRA_MODELS_DIR", ""),
                        help="a folder of model bundles (default: the env EXTRA_MODELS_DIR)")
    checks = run(parser.parse_args(argv))
    for check in checks:
        print(check.line())
    missing = sum(check.status == "missing" for check in checks)
    print("device=tt: everything it needs is here" if not missing else
          f"device=tt: {missing} thing(s) missing, each named above with what to do")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
