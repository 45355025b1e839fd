"""The Tenstorrent mesh options as values: mesh names and shapes, fabric and dispatch choices.

Plain Python (no ttnn), so `config/options.py` validates them before any device opens and on machines
without ttnn. The ttnn side (opening the mesh with these values) is `devices/tt/mesh.py`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

MESH_DEVICE_ENV = "MESH_DEVICE"

# The names MESH_DEVICE takes, as rows x cols. tt-metal's: its demos' MESH_DEVICE tables and
# models/tt_transformers/tt/model_config.py `determine_device_name` (Wormhole N150, N300, N150x4,
# T3K, TG; Blackhole P100, P150, P300, P150x4, P150x8, BHGLX). The Tenstorrent vLLM plugin's too
# (vllm_tt_plugin/utils/dp_discovery.py `_MESH_GRID_PRESETS`, worker.py): P150x2 (two P150 cards),
# P300x2 (two P300 cards of two chips each) and BH-Galaxy, which opens like TG.
MESH_SHAPES: dict[str, tuple[int, int]] = {
    "N150": (1, 1),
    "N300": (1, 2),
    "N150x4": (1, 4),
    "T3K": (1, 8),
    "TG": (8, 4),
    "P100": (1, 1),
    "P150": (1, 1),
    "P150x2": (1, 2),
    "P300": (1, 2),
    "P150x4": (1, 4),
    "P300x2": (1, 4),
    "P150x8": (1, 8),
    "BHGLX": (8, 4),
    "BH-Galaxy": (8, 4),
}

FabricName = Literal["auto", "DISABLED", "FABRIC_1D", "FABRIC_1D_RING", "FABRIC_2D", "FABRIC_2D_TORUS_X",
                     "FABRIC_2D_TORUS_Y", "FABRIC_2D_TORUS_XY"]
DispatchCoreAxisName = Literal["auto", "row", "col"]

# fabric_config=auto on a mesh of more than one chip, by ttnn's ClusterType name, as the vLLM plugin
# picks it (vllm_tt_plugin/worker.py `get_fabric_config`): a Wormhole Galaxy's chips form a ring; a
# Blackhole Galaxy needs a 2D torus (its column-axis collectives have no wraparound on a 1D fabric).
GALAXY_FABRICS: dict[str, str] = {"GALAXY": "FABRIC_1D_RING", "BLACKHOLE_GALAXY": "FABRIC_2D_TORUS_XY"}
GALAXY_CHIPS = 32

_SHAPE = re.compile(r"^\s*(\d+)\s*(?:[xX]|,)\s*(\d+)\s*$")
# Inside brackets, the vLLM plugin's tuple form: "(4,8)", "(1, 8)". The plugin reads MESH_DEVICE with
# ast.literal_eval, so a list "[4, 8]" and a bare "4,8" pass there too, and here.
_PAIR = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*$")


def parse_mesh_device(value: str) -> tuple[int, int]:
    """A mesh name (`T3K`, case-insensitive), `ROWSxCOLS` (`1x8`) or `(ROWS,COLS)` (`(4,8)`) as
    (rows, cols)."""
    by_upper = {name.upper(): shape for name, shape in MESH_SHAPES.items()}
    text = value.strip()
    if text.upper() in by_upper:
        return by_upper[text.upper()]
    bracketed = len(text) > 1 and text[0] + text[-1] in ("()", "[]")
    match = _PAIR.match(text[1:-1]) if bracketed else _SHAPE.match(text)
    if match is None or int(match[1]) < 1 or int(match[2]) < 1:
        raise ValueError(f"MESH_DEVICE={value!r} (option mesh_device) is neither a mesh name "
                         f"({', '.join(MESH_SHAPES)}) nor a shape: ROWSxCOLS such as 1x8, or "
                         "(ROWS,COLS) such as (4,8)")
    return int(match[1]), int(match[2])


def check_fits(shape: tuple[int, int], available: int) -> None:
    """A ValueError naming MESH_DEVICE when the mesh needs more chips than ttnn sees."""
    rows, cols = shape
    if rows * cols > available:
        raise ValueError(f"MESH_DEVICE={rows}x{cols} needs {rows * cols} chips, but ttnn sees "
                         f"{available}; set MESH_DEVICE (option mesh_device) to the mesh of this machine")


def auto_fabric(num_devices: int, cluster: str | None) -> str:
    """What fabric_config=auto sets: DISABLED on one chip; on more, the Galaxy's fabric when
    `cluster` (ttnn's ClusterType name) is a Galaxy, else FABRIC_1D. With no cluster given, a
    mesh of 32 chips (TG, BHGLX, 8x4, (4,8)) is taken for a Wormhole Galaxy: FABRIC_1D_RING."""
    if num_devices <= 1:
        return "DISABLED"
    if cluster is None:
        cluster = "GALAXY" if num_devices == GALAXY_CHIPS else ""
    return GALAXY_FABRICS.get(cluster, "FABRIC_1D")


def submesh_shape(shape: tuple[int, int], data_parallel: int) -> tuple[int, int]:
    """The shape of each of `data_parallel` equal submeshes of a mesh: the columns split first
    (1x8 / 2 = 1x4; TG 8x4 / 4 = 8x1), else the rows."""
    rows, cols = shape
    if cols % data_parallel == 0:
        return rows, cols // data_parallel
    if rows % data_parallel == 0:
        return rows // data_parallel, cols
    raise ValueError(f"data_parallel_size={data_parallel} does not split the mesh MESH_DEVICE={rows}x{cols} "
                     "into equal submeshes; choose a data_parallel_size that divides its rows or columns")


@dataclass(frozen=True)
class MeshOptions:
    """What opens a mesh: all validated here, before ttnn is imported."""

    shape: tuple[int, int] | None
    """None: every chip ttnn sees, as one row."""
    fabric: FabricName
    trace_region_size: int
    l1_small_size: int | None
    worker_l1_size: int | None
    dispatch_core_axis: DispatchCoreAxisName
    num_command_queues: int
    data_parallel: int

    def __post_init__(self) -> None:
        for name in ("trace_region_size", "l1_small_size"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if self.worker_l1_size is not None and self.worker_l1_size < 1:
            raise ValueError(f"worker_l1_size must be >= 1 (bytes), got {self.worker_l1_size}")
        if self.num_command_queues not in (1, 2):
            raise ValueError(f"num_command_queues must be 1 or 2, got {self.num_command_queues}")
        if self.shape is not None:
            submesh_shape(self.shape, self.data_parallel)

    @staticmethod
    def shape_from(option: str) -> tuple[int, int] | None:
        """The option's mesh, else the env MESH_DEVICE's, else None (every chip)."""
        value = option or os.environ.get(MESH_DEVICE_ENV, "")
        return parse_mesh_device(value) if value else None

    def fabric_for(self, num_devices: int, cluster: str | None = None) -> str:
        """The ttnn FabricConfig member to set on a mesh of `num_devices` chips of the machine
        `cluster` (ttnn's ClusterType name; None: not asked of ttnn): auto is `auto_fabric`'s."""
        if self.fabric == "auto":
            return auto_fabric(num_devices, cluster)
        return self.fabric
