"""One lane per Triton model instance on a mock T3K (assembly/instances.py): two processes, placed
as two instances of instance_group count 2 would be, open disjoint halves of the machine at the
same time (TT_VISIBLE_DEVICES 0,1 and 2,3; the mock cluster honours it as UMD does on hardware, a
PCIe chip bringing its N300 card's remote chip) and each serves HF greedy's tokens with the
contract generator that is not single-execute. Which chips each opened is read from the cluster
descriptor ttnn serializes (the chips' unique ids), since ttnn numbers a process's chips from 0.

Hardware-only: that the halves are real 1x4 lines on the T3K's ethernet (the mock fabric moves no
data), and that concurrent instances' kernels, firmware and fabric never touch the other's chips."""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import yaml

from tests.conftest import CHAT_PROMPTS
from tests.tt.mock_device import CLUSTERS, KIT, run_scenario
from tests.tt.test_engine_tt import MAX_TOKENS, TT, VARIANTS

PER_INSTANCE = {**TT, "extra_models_dir": str(VARIANTS / "per_instance")}


def _unique_ids(*chips: int) -> list[int]:
    described = yaml.safe_load((KIT / CLUSTERS["t3k"]).read_text())
    return sorted(int(described["chip_unique_ids"][chip]) for chip in chips)


def test_two_instances_open_disjoint_halves_of_a_t3k_at_once_and_serve(chat_ids: Any, hf_greedy: Any) -> None:
    prompts = [chat_ids(p) for p in CHAT_PROMPTS[:2]]
    params = {**PER_INSTANCE, "mesh_device": "T3K"}
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run_scenario, "instance", "t3k", timeout=900, params=params, index=k, count=2,
                            prompts=[prompts[k]], max_tokens=MAX_TOKENS) for k in range(2)]
        seen = [run.result() for run in runs]
    assert [(s["visible"], s["mesh_device"], s["num_devices"]) for s in seen] == [("0,1", "1x4", 4),
                                                                                ("2,3", "1x4", 4)]
    # PCIe chips 0,1 with their boards' remote chips 4,5; then 2,3 with 6,7 (t3k_1row.yaml's boards)
    assert [s["chips"] for s in seen] == [_unique_ids(0, 1, 4, 5), _unique_ids(2, 3, 6, 7)]
    for k, s in enumerate(seen):
        assert s["tokens"] == [hf_greedy(tuple(prompts[k]), MAX_TOKENS)]
        assert s["lanes"] == 1 and s["cleanup"][-1] == "device"


def test_data_parallel_lanes_of_a_generator_that_is_not_single_execute_point_at_instances() -> None:
    seen = run_scenario("load_fails", "t3k", timeout=600, engine=False,
                        params={**PER_INSTANCE, "mesh_device": "T3K", "data_parallel_size": "2"})
    assert seen["error"] == "ValueError"
    assert "`instance_group [ { count: 2, kind: KIND_CPU } ]` and data_parallel_size=1" in seen["message"]
