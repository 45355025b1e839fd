"""device=tt through tritonserver (scripts/serve.sh with the .venv-tt interpreter) on a mock n150
with the contract generator bundle (tt-metal's generator API, its preconditions checked, HF on the
host for the numbers: mock read-backs are zeros): the four chat prompts stream through tt_llm with
HF fp32 greedy's tokens, a prompt reusing cached blocks too, and tensor_parallel_size=2 fails the
load naming MESH_DEVICE."""

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import CHAT_PROMPTS
from tests.integration.clients import grpc_stream
from tests.integration.conftest import Server, failed_load, start_server, stop_server, wait_ready
from tests.tt.mock_device import BUNDLES, mock_env
from tests.tt.test_engine_tt import CONTEXT

MAX_TOKENS = 40
SETTINGS = ("device=tt", f"extra_models_dir={BUNDLES}", "max_model_len=512",
            "max_num_seqs=4", "max_num_batched_tokens=512", "num_kv_blocks=64")


def _env() -> dict[str, str]:
    return {**mock_env("n150"), "VENV": sys.prefix}  # serve.sh runs this venv's stub and packages


@pytest.fixture(scope="module")
def tt_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, srv = start_server(tmp_path_factory.mktemp("triton-tt") / "server.log", *SETTINGS, env=_env())
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)
    log = srv.log_text()
    assert "engine: TTLlamaForCausalLM on a 1x1 Tenstorrent mesh" in log
    assert "successfully unloaded 'tt_llm'" in log


@pytest.mark.parametrize("prompt", CHAT_PROMPTS)
def test_tritonserver_streams_hf_greedy_tokens_from_the_mesh(tt_server: Server, prompt: str, chat_ids: Any,
                                                              hf_greedy: Any) -> None:
    ids = chat_ids(prompt)
    result = grpc_stream(tt_server.grpc, "tt_llm", {
        "input_ids": np.array(ids, dtype=np.int32),
        "max_tokens": np.array([MAX_TOKENS], dtype=np.int32),
        "stream": np.array([True])}, timeout=300)
    assert result.error is None
    assert result.ids() == hf_greedy(tuple(ids), MAX_TOKENS)
    assert len(result.responses) > 1  # streamed


def test_a_prompt_reusing_cached_blocks_streams_hf_greedy_tokens(tt_server: Server, chat_ids: Any,
                                                                hf_greedy: Any) -> None:
    # the second shares 4 whole blocks with the first: a prefix-cache hit, prefilled from start_pos
    # 128 over every token (the contract generator fails the request on anything else)
    for question in ("Which river runs through Paris?", "Name two museums in the city."):
        ids = chat_ids(CONTEXT + " Question: " + question)
        result = grpc_stream(tt_server.grpc, "tt_llm", {
            "input_ids": np.array(ids, dtype=np.int32), "max_tokens": np.array([MAX_TOKENS], dtype=np.int32),
            "stream": np.array([True])}, timeout=300)
        assert result.error is None
        assert result.ids() == hf_greedy(tuple(ids), MAX_TOKENS)


def test_tensor_parallel_size_fails_the_tt_load_naming_mesh_device(tmp_path: Path) -> None:
    log = failed_load(tmp_path / "server.log", *SETTINGS, "tensor_parallel_size=2", env=_env(), timeout=300)
    assert "tensor_parallel_size=2 is not supported: tensor parallelism comes from the mesh shape; set " \
        "MESH_DEVICE" in log
    assert "failed to load 'tt_llm'" in log
