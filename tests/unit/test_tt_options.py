"""The Tenstorrent options, validated before any device opens (no ttnn needed), and device=tt on
a machine without ttnn."""

import importlib.util
import logging

import pytest

from tt_backend.assembly import build_engine, uses_tt
from tt_backend.config import EngineConfig
from tt_backend.mesh_options import MeshOptions, parse_mesh_device, submesh_shape
from tt_backend.models.tt_capabilities import generator_capabilities

HAS_TTNN = importlib.util.find_spec("ttnn") is not None


@pytest.mark.parametrize("value, shape", [
    ("N150", (1, 1)), ("n300", (1, 2)), ("T3K", (1, 8)), ("TG", (8, 4)), ("P150x8", (1, 8)),
    ("BHGLX", (8, 4)), ("1x8", (1, 8)), ("2X4", (2, 4)), (" 4x2 ", (4, 2)),
])
def test_mesh_names_and_shapes(value: str, shape: tuple[int, int]) -> None:
    assert parse_mesh_device(value) == shape


@pytest.mark.parametrize("value", ["T4K", "0x8", "1x", "8", "1x8x2", ""])
def test_a_bad_mesh_names_mesh_device(value: str) -> None:
    with pytest.raises(ValueError, match=rf"MESH_DEVICE={value!r} \(option mesh_device\) is neither"):
        parse_mesh_device(value)


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
    ({"device": "tt"},
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


def test_fabric_auto_is_1d_on_more_than_one_chip() -> None:
    options = EngineConfig().mesh_options(None)
    assert (options.fabric_for(1), options.fabric_for(8)) == ("DISABLED", "FABRIC_1D")
    assert EngineConfig(fabric_config="FABRIC_2D").mesh_options(None).fabric_for(1) == "FABRIC_2D"


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


class _Generator:
    model_capabilities = {"supports_prefix_caching": True, "supports_flux_capacitor": True}

    @classmethod
    def initialize_vllm_model(cls, hf_config: object, mesh_device: object, max_batch_size: int,
                              max_seq_len: int, tt_data_parallel: int = 1) -> None: ...

    def prefill_forward(self, *args: object, **kwargs: object) -> None: ...

    def prefill_forward_text(self, tokens: object, page_table: object, kv_cache: object,
                             prompt_lens: object, start_pos: object = None) -> None: ...

    def decode_forward(self, tokens: object, start_pos: object, sampling_params: object = None) -> None: ...


class _NoStartPosGenerator(_Generator):
    def prefill_forward_text(self, tokens: object, page_table: object, kv_cache: object,
                             prompt_lens: object) -> None: ...


class _PlainGenerator:
    @classmethod
    def initialize_vllm_model(cls, hf_config: object, mesh_device: object, max_batch_size: int,
                              max_seq_len: int) -> None: ...


def test_generator_capabilities_map_onto_ours(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        caps = generator_capabilities(_Generator, 32)
    assert (caps.prefix_caching, caps.single_execute, caps.device_sampling) == (True, True, True)
    assert (caps.chunked_prefill, caps.async_decode, caps.batched_prefill, caps.max_prefill_batch) == \
        (False, False, True, 32)
    assert "unknown key 'supports_flux_capacitor'=True ignored" in caplog.text
    # prefix caching declared, but a prefill that cannot start past the cached prefix: off
    assert not generator_capabilities(_NoStartPosGenerator, 32).prefix_caching
    plain = generator_capabilities(_PlainGenerator, 8)
    assert (plain.prefix_caching, plain.single_execute, plain.device_sampling) == (False, False, False)
