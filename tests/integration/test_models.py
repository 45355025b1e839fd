"""Through tritonserver: a model bundle from EXTRA_MODELS_DIR serves (builtins switched off),
broken bundles are skipped with a warning, and a rejected option fails the load with its
message in Triton's log."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.clients import grpc_stream
from tests.integration.conftest import ROOT, Server, failed_load, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration
BUNDLES = ROOT / "tests" / "bundles"


@pytest.fixture(scope="module")
def bundle_server(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Server]:
    # The default model's weights, declared as the bundle's architecture.
    weights = tmp_path_factory.mktemp("bundle_model")
    for item in model_dir.iterdir():
        if item.name != "config.json":
            os.symlink(item, weights / item.name)
    config = (model_dir / "config.json").read_text(encoding="utf-8")
    (weights / "config.json").write_text(config.replace('"LlamaForCausalLM"', '"BundleLlamaForCausalLM"'),
                                         encoding="utf-8")
    proc, srv = start_server(tmp_path_factory.mktemp("triton_bundle") / "server.log",
                             "dtype=float32", f"model={weights}",
                             env={"EXTRA_MODELS_DIR": str(BUNDLES), "TT_VLLM_BUILTIN_MODELS": "0"})
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


def test_bundle_serves_with_builtins_off(bundle_server: Server, chat_ids: Any, hf_greedy: Any) -> None:
    ids = chat_ids("What is the capital of France?")
    result = grpc_stream(bundle_server.grpc, "tt_llm", {
        "input_ids": np.array(ids, dtype=np.int32), "max_tokens": np.array([24], dtype=np.int32),
        "exclude_input_in_output": np.array([True])})
    assert result.error is None and result.ids() == hf_greedy(tuple(ids), 24)
    log = bundle_server.log_text()
    assert "engine: BundleLlamaForCausalLM (BundleLlama)" in log
    assert f"skipping model bundle {BUNDLES / 'broken_import'}: ModuleNotFoundError" in log
    assert f"skipping model bundle {BUNDLES / 'broken_metadata'}: KeyError" in log


def test_tensor_parallel_size_fails_the_load_with_its_message(tmp_path: Path) -> None:
    log = failed_load(tmp_path / "server.log", "tensor_parallel_size=2")
    assert "tensor_parallel_size=2 is not supported" in log
    assert "set MESH_DEVICE (the mesh_device option or the env MESH_DEVICE, e.g. N300, T3K or 1x8) " \
        "instead of tensor_parallel_size" in log
    assert "failed to load 'tt_llm'" in log
