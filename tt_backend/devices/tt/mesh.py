"""The Tenstorrent mesh: ttnn imported lazily, a mesh device opened from `MeshOptions`, and closed
in tt-metal's order.

    set_fabric_config(fabric) ─▶ open_mesh_device(shape, l1_small_size, trace_region_size,
                                 num_command_queues, dispatch_core_config, worker_l1_size)
    ... the generator splits it into its data-parallel submeshes (create_submeshes) ...
    close: synchronize ─▶ close each submesh ─▶ close the mesh ─▶ set_fabric_config(DISABLED)

ttnn is typed `Any` here: it is absent on most machines (no wheel for Python 3.11), so nothing
imports it at module level and mypy never needs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from typing import Any

from tt_backend.contract.modes import TraceMode
from tt_backend.mesh_options import MeshOptions, check_fits, submesh_shape

logger = logging.getLogger(__name__)

TTNN_MISSING = ("device=tt needs ttnn, tt-metal's Python package (pip install ttnn, Python 3.10 or "
                "3.12; see the README's Tenstorrent section), and it does not import here")


def import_ttnn() -> Any:
    """The ttnn module, or a ValueError that says how to get it."""
    try:
        return importlib.import_module("ttnn")
    except ImportError as exc:
        raise ValueError(f"{TTNN_MISSING}: {exc}") from None


def tt_device_count() -> int:
    """The Tenstorrent chips ttnn reports; 0 when ttnn is not installed or sees none (device=auto)."""
    if importlib.util.find_spec("ttnn") is None:
        return 0
    try:
        return int(import_ttnn().get_num_devices())
    except Exception as exc:  # noqa: BLE001 (auto falls back to torch; say why)
        logger.info("device=auto: ttnn is installed but reports no device (%s: %s)", type(exc).__name__, exc)
        return 0


def planned_shape(ttnn: Any, options: MeshOptions) -> tuple[int, int]:
    """The mesh `TTMesh.open` will open for `options`, checked against the chips ttnn sees (the
    KV shape per chip depends on it, so the load asks before it opens anything)."""
    available = int(ttnn.get_num_devices())
    if available < 1:
        raise ValueError("device=tt: ttnn reports no Tenstorrent device")
    shape = options.shape or (1, available)
    check_fits(shape, available)
    submesh_shape(shape, options.data_parallel)
    return shape


def cluster_type(ttnn: Any) -> str | None:
    """ttnn's ClusterType name for this machine (what the plugin picks the auto fabric by); None
    where this ttnn cannot say."""
    try:
        return str(ttnn.cluster.get_cluster_type().name)
    except Exception:  # noqa: BLE001 (older ttnn: no cluster query; the fabric goes by the mesh)
        return None


TT_MAX_USERS_PER_ROW = 32
"""Decode users per row of a submesh: tt_transformers decodes one tile row (32 users) per device
row; its ModelArgs takes a larger max_batch_size only split over the mesh's rows."""


def check_decode_batch(max_num_seqs: int, submesh: tuple[int, int]) -> None:
    """max_num_seqs is each submesh's decode batch: at most 32 users per row of the submesh."""
    rows, most = submesh[0], TT_MAX_USERS_PER_ROW * submesh[0]
    if max_num_seqs > most or (max_num_seqs > TT_MAX_USERS_PER_ROW and max_num_seqs % rows):
        raise ValueError(f"max_num_seqs={max_num_seqs} on a {rows}x{submesh[1]} submesh: tt-metal decodes at "
                         f"most {TT_MAX_USERS_PER_ROW} users per mesh row (more only as a multiple of the "
                         f"rows); set max_num_seqs to at most {most}")


class TTMesh:
    """An open mesh device. The generator may split it into submeshes; `close` closes those first."""

    default_trace_mode = TraceMode.DECODE_ONLY
    """What `trace_mode=auto` traces on a mesh: decode, which the tt-metal generator captures as one
    ttnn trace at its fixed batch (`decode_forward(enable_trace=...)`); its prefill runs eager."""

    def __init__(self, ttnn: Any, mesh: Any, shape: tuple[int, int], fabric: str) -> None:
        self.ttnn = ttnn
        self.mesh = mesh
        self.shape = shape
        self.fabric = fabric
        self.events: list[str] = []
        """What close did, in order (tests read it)."""
        self.submeshes_closed_by_generator = False
        """tt-metal's Generator.__del__ closes its submeshes when it runs data parallel (its
        workaround for tt-metal #19052): then close leaves them alone."""
        self._closed = False

    @classmethod
    def open(cls, options: MeshOptions) -> TTMesh:
        """Check the options against the chips ttnn sees, set the fabric, open the mesh. A failure
        after the fabric is set resets it before the error propagates."""
        ttnn = import_ttnn()
        shape = planned_shape(ttnn, options)
        rows, cols = shape
        fabric = options.fabric_for(rows * cols, cluster_type(ttnn))
        kwargs: dict[str, Any] = {"trace_region_size": options.trace_region_size,
                                  "num_command_queues": options.num_command_queues}
        if options.l1_small_size is not None:
            kwargs["l1_small_size"] = options.l1_small_size
        if options.worker_l1_size is not None:
            kwargs["worker_l1_size"] = options.worker_l1_size
        if options.dispatch_core_axis != "auto":
            axis = getattr(ttnn.DispatchCoreAxis, options.dispatch_core_axis.upper())
            kwargs["dispatch_core_config"] = ttnn.DispatchCoreConfig(axis=axis)
        if fabric != "DISABLED":
            ttnn.set_fabric_config(getattr(ttnn.FabricConfig, fabric))
        try:
            mesh = ttnn.open_mesh_device(ttnn.MeshShape(rows, cols), **kwargs)
        except BaseException:
            if fabric != "DISABLED":
                ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)
            raise
        logger.info("tt: opened a %dx%d mesh of %d chip(s) (fabric %s, %s)", rows, cols,
                    mesh.get_num_devices(), fabric, ", ".join(f"{k}={v}" for k, v in kwargs.items()))
        return cls(ttnn, mesh, shape, fabric)

    @property
    def num_devices(self) -> int:
        return int(self.mesh.get_num_devices())

    def submeshes(self) -> list[Any]:
        """The submeshes split from this mesh so far (the generator's data-parallel lanes)."""
        return list(self.mesh.get_submeshes())

    def synchronize(self) -> None:
        self.ttnn.synchronize_device(self.mesh)

    def close(self) -> None:
        """Synchronize, close the submeshes, the mesh, then reset the fabric. Idempotent; each step
        runs even when an earlier one failed, and the first failure is raised at the end."""
        if self._closed:
            return
        self._closed = True
        ttnn = self.ttnn
        steps: list[tuple[str, Any]] = [("synchronize", self.synchronize)]
        if not self.submeshes_closed_by_generator:
            steps += [(f"submesh{i}", lambda s=sub: ttnn.close_mesh_device(s))
                      for i, sub in enumerate(self.submeshes())]
        steps.append(("mesh", lambda: ttnn.close_mesh_device(self.mesh)))
        if self.fabric != "DISABLED":
            steps.append(("fabric", lambda: ttnn.set_fabric_config(ttnn.FabricConfig.DISABLED)))
        first: BaseException | None = None
        for name, step in steps:
            try:
                step()
                self.events.append(name)
            except Exception as exc:  # keep closing: later steps must still run
                logger.warning("tt: closing the mesh, %s failed: %r", name, exc)
                self.events.append(f"{name}:failed")
                first = first or exc
        self.mesh = None  # the handle is closed; nothing may use it
        if first is not None:
            raise first
