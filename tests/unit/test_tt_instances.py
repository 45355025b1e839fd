"""One Triton model instance of N on a Tenstorrent machine: which instance a stub is, the chips it
gets (TT_VISIBLE_DEVICES, a user's value respected) and its mesh, and the refusals that name
instance_group count, the chips and MESH_DEVICE. No ttnn: the chip counts are given."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tt_backend.assembly import place_instance
from tt_backend.assembly.instances import instance_environment
from tt_backend.config import EngineConfig
from tt_backend.devices.tt.visible_devices import TT_VISIBLE_DEVICES_ENV, instance_share, pcie_devices
from tt_backend.models.capabilities import ModelCapabilities, check_lanes
from tt_backend.triton.model_instance import InstancePosition, instance_position

T3K_YAML = Path(__file__).resolve().parents[1] / "tt" / "mock_kit" / "t3k_1row.yaml"
T3K_PCIE = ("0", "1", "2", "3")


def _groups(*groups: tuple[str, int]) -> dict[str, object]:
    return {"name": "tt_llm",
            "instance_group": [{"name": n, "count": c, "kind": "KIND_CPU"} for n, c in groups]}


def test_instance_position_counts_over_every_group_in_order() -> None:
    config = _groups(("tt_llm_0", 2), ("tt_llm_1", 2))
    names = ("tt_llm_0_0", "tt_llm_0_1", "tt_llm_1_0", "tt_llm_1_1")
    assert [instance_position(name, config) for name in names] == [InstancePosition(k, 4) for k in range(4)]
    assert instance_position("chips_1", _groups(("chips", 2))) == InstancePosition(1, 2)
    assert instance_position("tt_llm_0_0", {"name": "tt_llm"}) == InstancePosition(0, 1)


def test_an_instance_name_matching_no_group_is_refused_naming_the_groups() -> None:
    with pytest.raises(ValueError) as err:
        instance_position("tt_llm_0_2", _groups(("tt_llm_0", 2)))
    assert str(err.value) == ("model instance 'tt_llm_0_2' matches none of the instance groups in the "
                              "model's config: tt_llm_0 (count 2)")


def test_pcie_devices_from_dev_tenstorrent_and_from_a_mock_cluster(tmp_path: Path) -> None:
    for name in ("0", "2", "3", "by-id"):
        (tmp_path / name).mkdir()
    assert pcie_devices(tmp_path, environ={}) == ("0", "1", "2")
    assert pcie_devices(tmp_path / "absent", environ={}) == ()
    assert pcie_devices(environ={"TT_METAL_MOCK_CLUSTER_DESC_PATH": str(T3K_YAML)}) == T3K_PCIE


def test_the_machine_splits_by_pcie_devices_and_a_user_list_by_its_entries() -> None:
    assert [instance_share(k, 2, None, T3K_PCIE).value for k in range(2)] == ["0,1", "2,3"]
    assert [instance_share(k, 4, None, T3K_PCIE).value for k in range(4)] == ["0", "1", "2", "3"]
    user = instance_share(1, 2, " 2, 0000:05:00.0 ,3,1", T3K_PCIE)
    assert (user.value, user.pool, user.source) == ("3,1", ("2", "0000:05:00.0", "3", "1"), "user")


def test_a_count_that_does_not_split_the_pcie_devices_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        instance_share(0, 3, None, T3K_PCIE)
    assert str(err.value) == (
        "instance_group count 3 cannot split the 4 PCIe device(s) of this machine (0,1,2,3) evenly: each "
        "instance opens whole PCIe devices (a remote chip comes with its PCIe chip); set the count in "
        "config.pbtxt to one of 1, 2, 4")
    with pytest.raises(ValueError, match=r"TT_VISIBLE_DEVICES='' \(set for the server\) leave no "):
        instance_share(0, 2, "", T3K_PCIE)


def _tt(**options: object) -> EngineConfig:
    return EngineConfig(device="tt", block_size=32, **options)  # type: ignore[arg-type]


def test_each_instance_gets_its_chips_and_its_share_of_the_mesh(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "tt_backend")
    placed = []
    for k in range(2):
        env: dict[str, str] = {}
        config = place_instance(_tt(mesh_device="T3K"), k, 2, env, T3K_PCIE, visible_chips=lambda: 4)
        placed.append((env[TT_VISIBLE_DEVICES_ENV], config.mesh_device))
    assert placed == [("0,1", "1x4"), ("2,3", "1x4")]
    assert ("tt: model instance 1 of 2: TT_VISIBLE_DEVICES=2,3, its share of the machine's 4 PCIe devices "
            "0,1,2,3; a 1x4 mesh (MESH_DEVICE=1x8 / 2)") in caplog.text
    env = {"TT_METAL_LOGS_PATH": "/logs"}
    unset = place_instance(_tt(), 3, 4, env, T3K_PCIE, visible_chips=lambda: 2)
    assert unset.mesh_device == ""
    assert env == {TT_VISIBLE_DEVICES_ENV: "3", "TT_METAL_LOGS_PATH": "/logs/instance_3",
                   "TT_METAL_INSPECTOR_RPC_SERVER_ADDRESS": "localhost:50054"}


def test_each_instance_has_its_own_logs_caches_and_inspector_port() -> None:
    assert instance_environment(1, {}, Path("/srv")) == {
        "TT_METAL_LOGS_PATH": "/srv/instance_1", "TT_METAL_INSPECTOR_RPC_SERVER_ADDRESS": "localhost:50052"}
    given = {"TT_METAL_CACHE": "/c", "TT_CACHE_PATH": "/w",
             "TT_METAL_INSPECTOR_RPC_SERVER_ADDRESS": "0.0.0.0:0"}
    assert instance_environment(2, given, Path("/srv")) == {
        "TT_METAL_LOGS_PATH": "/srv/instance_2", "TT_METAL_INSPECTOR_RPC_SERVER_ADDRESS": "0.0.0.0:0",
        "TT_METAL_CACHE": "/c/instance_2", "TT_CACHE_PATH": "/w/instance_2"}


def test_a_users_tt_visible_devices_is_the_pool_and_named_in_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "tt_backend")
    env = {TT_VISIBLE_DEVICES_ENV: "2,3"}
    config = place_instance(_tt(mesh_device="1x4"), 1, 2, env, T3K_PCIE,
                            visible_chips=lambda: 2)
    assert (env[TT_VISIBLE_DEVICES_ENV], config.mesh_device) == ("3", "1x2")
    assert "its share of TT_VISIBLE_DEVICES=2,3 (set by the user)" in caplog.text
    single = {TT_VISIBLE_DEVICES_ENV: "1"}
    assert place_instance(_tt(mesh_device="N300"), 0, 1, single, T3K_PCIE).mesh_device == "N300"
    assert single == {TT_VISIBLE_DEVICES_ENV: "1"}
    assert "tt: TT_VISIBLE_DEVICES=1 (set by the user): ttnn opens only those chips" in caplog.text


def test_one_instance_and_the_torch_devices_are_left_alone() -> None:
    env: dict[str, str] = {}
    assert place_instance(_tt(mesh_device="T3K"), 0, 1, env, T3K_PCIE).mesh_device == "T3K"
    assert place_instance(EngineConfig(device="cpu"), 1, 2, env, T3K_PCIE) == EngineConfig(device="cpu")
    assert place_instance(EngineConfig(device="auto"), 1, 2, env, ()) == EngineConfig(device="auto")
    assert env == {}


def test_instances_that_do_not_split_mesh_device_or_see_other_chips_are_refused() -> None:
    with pytest.raises(ValueError) as err:
        place_instance(_tt(mesh_device="T3K"), 0, 3, {TT_VISIBLE_DEVICES_ENV: "0,1,2"}, T3K_PCIE)
    assert str(err.value) == ("instance_group count 3 does not split MESH_DEVICE=1x8 into equal meshes, one "
                              "per instance; set the count in config.pbtxt to a divisor of its rows (1) or "
                              "columns (8)")
    with pytest.raises(ValueError) as err:
        place_instance(_tt(mesh_device="N300"), 1, 2, {}, T3K_PCIE, visible_chips=lambda: 4)
    assert str(err.value) == (
        "model instance 1 of instance_group count 2 sees 4 chip(s) with TT_VISIBLE_DEVICES=2,3 (its share of "
        "the machine's 4 PCIe devices 0,1,2,3), but MESH_DEVICE=1x2 split 2 ways gives each instance a 1x1 "
        "mesh of 1; set MESH_DEVICE to the whole machine's mesh (or unset it: each instance opens its chips "
        "as one row), or change the count")


def test_check_lanes_points_at_the_instance_group_snippet() -> None:
    with pytest.raises(ValueError) as err:
        check_lanes("TTLlamaForCausalLM", ModelCapabilities(single_execute=False), 4)
    assert str(err.value) == (
        "data_parallel_size=4: TTLlamaForCausalLM does not declare single-execute, so its lanes cannot share "
        "one program; serve it as 4 Triton model instances of one lane each: in config.pbtxt set "
        "`instance_group [ { count: 4, kind: KIND_CPU } ]` and data_parallel_size=1; each instance then "
        "opens its 1/4 of the chips (TT_VISIBLE_DEVICES) as a 1/4 of MESH_DEVICE's mesh "
        "(README, Tenstorrent)")
