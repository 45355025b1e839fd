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

# tt-metal's mesh names (its demos and vLLM plugin read them from the env MESH_DEVICE): rows x cols.
MESH_SHAPES: dict[str, tuple[int, int]] = {
    "N150": (1, 1),
    "N300": (1, 2),
    "N150x4": (1, 4),
    "T3K": (1, 8),
    "TG": (8, 4),
    "P150": (1, 1),
    "P300": (1, 2),
    "P150x4": (1, 4),
    "P150x8": (1, 8),
    "BHGLX": (8, 4),
}

FabricName = Literal["auto", "DISABLED", "FABRIC_1D", "FABRIC_1D_RING", "FABRIC_2D"]
DispatchCoreAxisName = Literal["auto", "row", "col"]

_SHAPE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_mesh_device(value: str) -> tuple[int, int]:
    """A mesh name (`T3K`, case-insensitive) or an explicit `ROWSxCOLS` (`1x8`) as (rows, cols)."""
    by_upper = {name.upper(): shape for name, shape in MESH_SHAPES.items()}
    if value.strip().upper() in by_upper:
        return by_upper[value.strip().upper()]
    match = _SHAPE.match(value)
    if match is None or int(match[1]) < 1 or int(match[2]) < 1:
        raise ValueError(f"MESH_DEVICE={value!r} (option mesh_device) is neither a mesh name "
                         f"({', '.join(MESH_SHAPES)}) nor a shape ROWSxCOLS such as 1x8")
    return int(match[1]), int(match[2])


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

    def fabric_for(self, num_devices: int) -> str:
        """The ttnn FabricConfig member to set: auto is FABRIC_1D on more than one chip."""
        if self.fabric == "auto":
            return "FABRIC_1D" if num_devices > 1 else "DISABLED"
        return self.fabric
