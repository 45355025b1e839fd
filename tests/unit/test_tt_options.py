"""The Tenstorrent options, validated before any device opens (no ttnn needed), and device=tt on
a machine without ttnn."""

import importlib.util
import re

import pytest

from tt_backend.assembly import build_engine, uses_tt
from tt_backend.config import EngineConfig
from tt_backend.mesh_options import (
    MESH_SHAPES,
    MeshOptions,
    auto_fabric,
    check_fits,
    parse_mesh_device,
    submesh_shape,
)

HAS_TTNN = importlib.util.find_spec("ttnn") is not None


@pytest.mark.parametrize("value, shape", [
    # tt-metal's names
    ("N150", (1, 1)), ("N300", (1, 2)), ("N150x4", (1, 4)), ("T3K", (1, 8)), ("TG", (8, 4)),
    ("P100", (1, 1)), ("P150", (1, 1)), ("P300", (1, 2)), ("P150x4", (1, 4)), ("P150x8", (1, 8)),
    ("BHGLX", (8, 4)),
    # the vLLM plugin's
    ("P150x2", (1, 2)), ("P300x2", (1, 4)), ("BH-Galaxy", (8, 4)),
    # any case, spaces around
    ("n300", (1, 2)), ("t3k", (1, 8)), ("bh-galaxy", (8, 4)), (" p300x2 ", (1, 4)),
    # ROWSxCOLS
    ("1x8", (1, 8)), ("2X4", (2, 4)), (" 4x2 ", (4, 2)),
    # the plugin's tuple form (and what its ast.literal_eval also takes)
    ("(4,8)", (4, 8)), ("(1, 8)", (1, 8)), (" ( 2 , 4 ) ", (2, 4)), ("[4, 8]", (4, 8)), ("4,8", (4, 8)),
])
def test_mesh_names_and_shapes(value: str, shape: tuple[int, int]) -> None:
    assert parse_mesh_device(value) == shape


def test_every_mesh_name_is_tested() -> None:
    assert list(MESH_SHAPES) == ["N150", "N300", "N150x4", "T3K", "TG", "P100", "P150", "P150x2", "P300",
                                 "P150x4", "P300x2", "P150x8", "BHGLX", "BH-Galaxy"]


@pytest.mark.parametrize("value", ["T4K", "0x8", "1x", "8", "1x8x2", "", "(0,8)", "(4,8", "4,8)", "(4,8]",
                                   "(1x8)", "(1,2,3)", "()", "BH Galaxy"])
def test_a_bad_mesh_names_mesh_device(value: str) -> None:
    named = re.escape(f"MESH_DEVICE={value!r} (option mesh_device) is neither")
    with pytest.raises(ValueError, match=named):
        parse_mesh_device(value)


def test_the_bad_mesh_message_lists_every_form() -> None:
    with pytest.raises(ValueError) as err:
        parse_mesh_device("T4K")
    assert str(err.value) == (
        "MESH_DEVICE='T4K' (option mesh_device) is neither a mesh name (N150, N300, N150x4, T3K, TG, P100, "
        "P150, P150x2, P300, P150x4, P300x2, P150x8, BHGLX, BH-Galaxy) nor a shape: ROWSxCOLS such as 1x8, "
        "or (ROWS,COLS) such as (4,8)")


def test_a_mesh_larger_than_the_machine_names_mesh_device() -> None:
    check_fits((1, 8), 8)
    with pytest.raises(ValueError) as err:
        check_fits((1, 8), 1)
    assert str(err.value) == ("MESH_DEVICE=1x8 needs 8 chips, but ttnn sees 1; set MESH_DEVICE (option "
                              "mesh_device) to the mesh of this machine")


def test_submeshes_split_columns_then_rows() -> None:
    assert submesh_shape((1, 8), 2) == (1, 4)
    assert submesh_shape((8, 4), 4) == (8, 1)
    assert submesh_shape((8, 4), 8) == (1, 4)
    with pytest.raises(ValueError, match="data_parallel_size=3 does not split the mesh MESH_DEVICE=1x8"):
        submesh_shape((1, 8), 3)


def test_tt_options_parse_bare_prefixed_and_as_mesh_device() -> None:
    cfg = EngineConfig.from_parameters({
        "device": "tt", "block_size": "64", "MESH_DEVICE": "T3K", "tt.fabric_config": "FABRIC_1D_RING",
        "trace_region_size": "220000000", "tt.worker_l1_size": "1344544", "l1_small_size": "24576",
        "tt.dispatch_core_axis": "col", "num_command_queues": "2", "data_parallel_size": "2"})
    assert (cfg.mesh_device, cfg.fabric_config, cfg.trace_region_size) == ("T3K", "FABRIC_1D_RING", 220000000)
    assert (cfg.worker_l1_size, cfg.l1_small_size, cfg.dispatch_core_axis) == (1344544, 24576, "col")
    options = cfg.mesh_options(MeshOptions.shape_from(cfg.mesh_device))
    assert options == MeshOptions((1, 8), "FABRIC_1D_RING", 220000000, 24576, 1344544, "col", 2, 2)
    assert EngineConfig.from_parameters({"tt.mesh_device": "1x2"}).mesh_device == "1x2"


@pytest.mark.parametrize("params, message", [
    ({"fabric_config": "FABRIC_3D"}, "fabric_config='FABRIC_3D' is not one of auto, DISABLED, FABRIC_1D"),
    ({"dispatch_core_axis": "diag"}, "dispatch_core_axis='diag' is not one of auto, row, col"),
    ({"num_command_queues": "3"}, "num_command_queues must be 1 or 2, got 3"),
    ({"trace_region_size": "-1"}, "trace_region_size must be >= 0, got -1"),
    ({"l1_small_size": "-5"}, "l1_small_size must be >= 0, got -5"),
    ({"worker_l1_size": "0"}, "worker_l1_size must be >= 1 (bytes), got 0"),
    ({"trace_region_size": "big"}, "trace_region_size='big' is not an integer"),
    ({"MESH_DEVICE": "T4K"}, "MESH_DEVICE='T4K' (option mesh_device) is neither a mesh name"),
    ({"mesh_device": "1x8", "data_parallel_size": "3"},
     "data_parallel_size=3 does not split the mesh MESH_DEVICE=1x8"),
    ({"device": "cpu", "mesh_device": "N150"},
     "mesh_device='N150' is a Tenstorrent mesh option, but device='cpu'; set device=tt (or auto)"),
    ({"device": "cuda", "fabric_config": "FABRIC_1D"},
     "fabric_config='FABRIC_1D' is a Tenstorrent mesh option"),
    ({"device": "cpu", "tt.num_command_queues": "2"}, "num_command_queues=2 is a Tenstorrent mesh option"),
    ({"device": "tt", "block_size": "16"},
     "block_size=16 on a Tenstorrent device: the paged KV cache is laid out in 32x32 tiles"),
    ({"device": "tt", "block_size": "48"}, "block_size must be a multiple of 32"),
    ({"device": "gpu"}, "device='gpu' is not one of auto, cpu, cuda, tt"),
    ({"device": "tt", "block_size": "32", "tensor_parallel_size": "2"},
     "tensor_parallel_size=2 is not supported: tensor parallelism comes from the mesh shape; "
     "set MESH_DEVICE"),
    ({"pipeline_parallel_size": "2"},
     "set MESH_DEVICE (the mesh_device option or the env MESH_DEVICE, e.g. T3K"),
])
def test_bad_tt_options_name_the_option(params: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as err:
        EngineConfig.from_parameters(params)
    assert message in str(err.value)


def test_mesh_device_falls_back_to_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESH_DEVICE", "N300")
    assert MeshOptions.shape_from("") == (1, 2)
    assert MeshOptions.shape_from("T3K") == (1, 8)
    monkeypatch.delenv("MESH_DEVICE")
    assert MeshOptions.shape_from("") is None


@pytest.mark.parametrize("mesh, cluster, fabric", [
    # ttnn not asked: by the mesh alone, a 32-chip mesh taken for a Wormhole Galaxy
    ("N150", None, "DISABLED"), ("P150", None, "DISABLED"), ("N300", None, "FABRIC_1D"),
    ("P300x2", None, "FABRIC_1D"), ("T3K", None, "FABRIC_1D"), ("P150x8", None, "FABRIC_1D"),
    ("TG", None, "FABRIC_1D_RING"), ("BHGLX", None, "FABRIC_1D_RING"), ("(4,8)", None, "FABRIC_1D_RING"),
    ("8x4", None, "FABRIC_1D_RING"),
    # ttnn's ClusterType, as the vLLM plugin picks: the Galaxy's fabric on any mesh of more than one chip
    ("TG", "GALAXY", "FABRIC_1D_RING"), ("(4,8)", "GALAXY", "FABRIC_1D_RING"),
    ("T3K", "GALAXY", "FABRIC_1D_RING"),
    ("BHGLX", "BLACKHOLE_GALAXY", "FABRIC_2D_TORUS_XY"), ("(4,8)", "BLACKHOLE_GALAXY", "FABRIC_2D_TORUS_XY"),
    ("BH-Galaxy", "BLACKHOLE_GALAXY", "FABRIC_2D_TORUS_XY"),
    ("P150x8", "BLACKHOLE_GALAXY", "FABRIC_2D_TORUS_XY"),
    ("N150", "GALAXY", "DISABLED"), ("N150", "BLACKHOLE_GALAXY", "DISABLED"),
    ("T3K", "T3K", "FABRIC_1D"), ("P150x8", "P150_X8", "FABRIC_1D"), ("N300", "N300", "FABRIC_1D"),
])
def test_fabric_auto_per_mesh(mesh: str, cluster: str | None, fabric: str) -> None:
    rows, cols = parse_mesh_device(mesh)
    assert auto_fabric(rows * cols, cluster) == fabric
    options = EngineConfig(mesh_device=mesh).mesh_options(parse_mesh_device(mesh))
    assert options.fabric_for(rows * cols, cluster) == fabric


def test_an_explicit_fabric_is_kept() -> None:
    assert EngineConfig(fabric_config="FABRIC_2D").mesh_options(None).fabric_for(1) == "FABRIC_2D"
    options = EngineConfig(fabric_config="FABRIC_2D_TORUS_XY", mesh_device="TG").mesh_options((8, 4))
    assert options.fabric_for(32, "GALAXY") == "FABRIC_2D_TORUS_XY"
    assert EngineConfig(fabric_config="FABRIC_1D").mesh_options((8, 4)).fabric_for(32) == "FABRIC_1D"
    torus_x = EngineConfig.from_parameters({"fabric_config": "FABRIC_2D_TORUS_X"})
    assert torus_x.fabric_config == "FABRIC_2D_TORUS_X"


@pytest.mark.skipif(HAS_TTNN, reason="ttnn is installed here")
def test_device_tt_without_ttnn_fails_clearly() -> None:
    needs = r"device=tt needs ttnn, tt-metal's Python package \(pip install ttnn, Python 3.10 or 3.12; see "
    with pytest.raises(ValueError, match=needs + r"the README's Tenstorrent section\), and it does not"):
        build_engine(EngineConfig(device="tt", block_size=32))


@pytest.mark.skipif(HAS_TTNN, reason="ttnn is installed here")
def test_device_auto_without_ttnn_stays_on_torch() -> None:
    assert not uses_tt(EngineConfig())
    assert uses_tt(EngineConfig(device="tt", block_size=32))
    assert not uses_tt(EngineConfig(device="cpu"))
