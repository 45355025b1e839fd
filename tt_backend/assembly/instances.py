"""One Triton model instance of N on a Tenstorrent machine: its own chips, its own mesh.

A generator that is not single-execute runs one data-parallel rank per process (the serving design:
per-rank submeshes assigned through TT_VISIBLE_DEVICES), and Triton's stub processes are those
ranks: `instance_group [ { count: N, kind: KIND_CPU } ]` in config.pbtxt. Before ttnn builds its
cluster, instance k of N

    TT_VISIBLE_DEVICES ─▶ its k-th share of the PCIe devices (devices/tt/visible_devices.py),
                          of the user's TT_VISIBLE_DEVICES when one is set
    MESH_DEVICE        ─▶ the machine's mesh split N ways (mesh_options.submesh_shape: T3K 1x8 / 2 =
                          1x4), which must be exactly the chips it sees; unset: all its chips, one row

so every instance opens a disjoint set of chips, and the KV cache, decode batch and lanes of each
are sized on its own mesh. One instance (count 1) changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path

from tt_backend.config import EngineConfig
from tt_backend.devices.tt.mesh import tt_device_count
from tt_backend.devices.tt.visible_devices import (
    TT_VISIBLE_DEVICES_ENV,
    VisibleShare,
    instance_share,
    parse_visible,
    pcie_devices,
)
from tt_backend.mesh_options import MeshOptions, submesh_shape

logger = logging.getLogger(__name__)

INSPECTOR_ENV = "TT_METAL_INSPECTOR_RPC_SERVER_ADDRESS"
INSPECTOR_DEFAULT = "localhost:50051"


def instance_environment(index: int, environ: Mapping[str, str], cwd: Path) -> dict[str, str]:
    """What else instance `index` keeps to itself, as the Tenstorrent vLLM plugin gives each DP rank
    (vllm_tt_plugin/utils/dp_discovery.py `standard_dp_rank_environments`): its own tt-metal log
    folder (under TT_METAL_LOGS_PATH, else the working directory), its own JIT cache folders where
    TT_CACHE_PATH / TT_METAL_CACHE are set (concurrent writers stay apart), and its own Inspector
    port (the base port + index; 0 keeps the runtime's pick)."""
    host, _, port_text = environ.get(INSPECTOR_ENV, INSPECTOR_DEFAULT).partition(":")
    port = int(port_text or 50051)
    out = {"TT_METAL_LOGS_PATH": str(Path(environ.get("TT_METAL_LOGS_PATH") or cwd) / f"instance_{index}"),
           INSPECTOR_ENV: f"{host}:{port + index if port else 0}"}
    out.update({key: str(Path(environ[key]) / f"instance_{index}")
                for key in ("TT_CACHE_PATH", "TT_METAL_CACHE") if environ.get(key)})
    return out


def instance_mesh(machine: tuple[int, int], count: int) -> tuple[int, int]:
    """Each of `count` instances' mesh of the machine's mesh `machine`; a ValueError naming the count
    and MESH_DEVICE when they do not split it into equal meshes."""
    try:
        return submesh_shape(machine, count)
    except ValueError:
        rows, cols = machine
        raise ValueError(f"instance_group count {count} does not split MESH_DEVICE={rows}x{cols} into "
                         f"equal meshes, one per instance; set the count in config.pbtxt to a divisor of "
                         f"its rows ({rows}) or columns ({cols})") from None


def place_instance(config: EngineConfig, index: int, count: int,
                   environ: MutableMapping[str, str] | None = None,
                   machine: tuple[str, ...] | None = None,
                   visible_chips: Callable[[], int] = tt_device_count) -> EngineConfig:
    """Give instance `index` of `count` its chips (sets TT_VISIBLE_DEVICES in `environ`, the process's
    environment by default) and return the config with its mesh. `machine`: the PCIe devices
    (default: this host's, `pcie_devices`); `visible_chips`: the chips ttnn sees once the variable
    is set (0: none, or no ttnn; the load then says why). device=cpu/cuda, and auto on a machine
    without a Tenstorrent device, are returned unchanged."""
    env = os.environ if environ is None else environ
    user = env.get(TT_VISIBLE_DEVICES_ENV)
    if config.device not in ("tt", "auto"):
        return config
    if count == 1:
        if user is not None:
            logger.info("tt: TT_VISIBLE_DEVICES=%s (set by the user): ttnn opens only those chips", user)
        return config
    pool = parse_visible(user) if user is not None else (pcie_devices() if machine is None else machine)
    if config.device == "auto" and not pool:
        return config  # no Tenstorrent device to share: the torch engine, one per instance
    share = instance_share(index, count, user, pool)
    machine_mesh = MeshOptions.shape_from(config.mesh_device)
    mesh = None if machine_mesh is None else instance_mesh(machine_mesh, count)
    env.update({TT_VISIBLE_DEVICES_ENV: share.value, **instance_environment(index, env, Path.cwd())})
    if machine_mesh is None or mesh is None:
        logger.info("tt: model instance %d of %d: TT_VISIBLE_DEVICES=%s, %s; its chips as one row "
                    "(MESH_DEVICE unset)", index, count, share.value, _pool_text(share))
        return config
    logger.info("tt: model instance %d of %d: TT_VISIBLE_DEVICES=%s, %s; a %s mesh (MESH_DEVICE=%s / %d)",
                index, count, share.value, _pool_text(share), _shape(mesh), _shape(machine_mesh), count)
    (rows, cols), (sub_rows, sub_cols) = machine_mesh, mesh
    seen = visible_chips()
    if seen and seen != sub_rows * sub_cols:
        raise ValueError(
            f"model instance {index} of instance_group count {count} sees {seen} chip(s) with "
            f"TT_VISIBLE_DEVICES={share.value} ({_pool_text(share)}), but MESH_DEVICE={rows}x{cols} split "
            f"{count} ways gives each instance a {sub_rows}x{sub_cols} mesh of {sub_rows * sub_cols}; set "
            "MESH_DEVICE to the whole machine's mesh (or unset it: each instance opens its chips as one "
            "row), or change the count")
    return dataclasses.replace(config, mesh_device=f"{sub_rows}x{sub_cols}")


def _shape(shape: tuple[int, int]) -> str:
    return f"{shape[0]}x{shape[1]}"


def _pool_text(share: VisibleShare) -> str:
    if share.source == "user":
        return f"its share of TT_VISIBLE_DEVICES={','.join(share.pool)} (set by the user)"
    return f"its share of the machine's {len(share.pool)} PCIe devices {','.join(share.pool)}"
