"""device=tt through tritonserver with tt_llm's instance_group count 2 (serve.sh --instances 2) on a
mock T3K, over the contract generator that is not single-execute: each stub process places itself
(tt_backend/assembly/instances.py) on its half of the machine, TT_VISIBLE_DEVICES 0,1 and 2,3 with
a 1x4 mesh each, both load at once, and the prompts stream HF fp32 greedy's tokens."""

import sys
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import CHAT_PROMPTS
from tests.integration.clients import grpc_stream
from tests.integration.conftest import start_server, stop_server, wait_ready
from tests.tt.mock_device import mock_env
from tests.tt.test_engine_tt import VARIANTS

MAX_TOKENS = 24
SETTINGS = ("device=tt", f"extra_models_dir={VARIANTS / 'per_instance'}", "mesh_device=T3K",
            "max_model_len=512", "max_num_seqs=4", "max_num_batched_tokens=512", "num_kv_blocks=64")


def test_two_instances_each_on_half_a_t3k_stream_hf_greedy_tokens(tmp_path: Path, chat_ids: Any,
                                                                  hf_greedy: Any) -> None:
    env = {**mock_env("t3k"), "VENV": sys.prefix}
    proc, srv = start_server(tmp_path / "server.log", *SETTINGS, env=env, instances=2)
    try:
        wait_ready(proc, srv)
        for prompt in CHAT_PROMPTS[:2]:
            ids = chat_ids(prompt)
            result = grpc_stream(srv.grpc, "tt_llm", {
                "input_ids": np.array(ids, dtype=np.int32),
                "max_tokens": np.array([MAX_TOKENS], dtype=np.int32),
                "stream": np.array([True])}, timeout=300)
            assert result.error is None
            assert result.ids() == hf_greedy(tuple(ids), MAX_TOKENS)
    finally:
        stop_server(proc)
    log = srv.log_text()
    for k, visible in enumerate(("0,1", "2,3")):
        assert (f"tt: model instance {k} of 2: TT_VISIBLE_DEVICES={visible}, its share of the machine's 4 "
                "PCIe devices 0,1,2,3; a 1x4 mesh (MESH_DEVICE=1x8 / 2)") in log
    assert log.count("on a 1x4 mesh, 1 lane(s)") == 2
