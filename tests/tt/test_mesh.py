"""The mesh opens from the options and closes in tt-metal's order, on mock n150 and T3K."""

from tests.tt.mock_device import run_scenario

OPTIONS = {"device": "tt", "block_size": "32", "trace_region_size": "20000000", "tt.l1_small_size": "24576",
           "worker_l1_size": "1344544", "tt.dispatch_core_axis": "row", "num_command_queues": "2"}


def test_n150_opens_and_closes_with_the_options() -> None:
    seen = run_scenario("mesh", "n150", params={**OPTIONS, "MESH_DEVICE": "N150"})
    assert (seen["num_devices"], seen["shape"], seen["fabric_open"]) == (1, [1, 1], "DISABLED")
    assert seen["events"] == ["synchronize", "mesh"]
    assert (seen["fabric_closed"], seen["reopens"]) == ("DISABLED", True)


def test_t3k_opens_as_1x8_with_its_fabric_and_resets_it_on_close() -> None:
    seen = run_scenario("mesh", "t3k", params={**OPTIONS, "tt.mesh_device": "1x8",
                                               "fabric_config": "FABRIC_1D_RING"})
    assert (seen["num_devices"], seen["shape"], seen["fabric_open"]) == (8, [1, 8], "FABRIC_1D_RING")
    assert seen["events"] == ["synchronize", "mesh", "fabric"]
    assert (seen["fabric_closed"], seen["reopens"]) == ("DISABLED", True)


def test_t3k_fabric_auto_is_1d() -> None:
    seen = run_scenario("mesh", "t3k", params={"device": "tt", "block_size": "64", "MESH_DEVICE": "T3K"})
    assert (seen["num_devices"], seen["fabric_open"], seen["fabric_closed"]) == (8, "FABRIC_1D", "DISABLED")


def test_a_failed_open_resets_the_fabric() -> None:
    # ttnn refuses column dispatch with two command queues on this 1-row-harvested Wormhole. It
    # leaves its devices initialised after that failure (a later fabric change in the same process
    # is refused: "devices are still open"), so this scenario does not reopen.
    seen = run_scenario("open_fails", "t3k", reopen=False,
                        params={"device": "tt", "block_size": "32", "MESH_DEVICE": "T3K",
                                "dispatch_core_axis": "col", "num_command_queues": "2"})
    assert seen["error"] == "RuntimeError"
    assert "No more available dispatch cores" in seen["full"]
    assert seen["fabric_after"] == "DISABLED"


def test_a_mesh_larger_than_the_machine_fails_naming_mesh_device() -> None:
    seen = run_scenario("open_fails", "n150",
                        params={"device": "tt", "block_size": "32", "MESH_DEVICE": "T3K"})
    assert seen["error"] == "ValueError"
    assert seen["message"] == ("MESH_DEVICE=1x8 needs 8 chips, but ttnn sees 1; set MESH_DEVICE (option "
                               "mesh_device) to the mesh of this machine")
    assert (seen["fabric_after"], seen["reopens"]) == ("DISABLED", True)


def test_auto_chooses_tt_when_ttnn_reports_a_device() -> None:
    assert run_scenario("auto", "n150", params={}) == {"uses_tt": True, "device_count": 1}
    assert run_scenario("auto", "t3k", params={"device": "cpu"}) == {"uses_tt": False, "device_count": 8}
