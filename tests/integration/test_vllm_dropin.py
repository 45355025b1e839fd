"""Through tritonserver, as a vLLM user arrives: a vllm_backend model.json of common vLLM engine
arguments (config.pbtxt's parameters over it) whose log names each argument's effect, serving a
checkpoint in a folder named with dots; the `openai` SDK sees that exact name in /v1/models and
chats with it, and the metrics' model_name label carries it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from openai import NotFoundError, OpenAI

from tests.integration.clients import idle_scrape
from tests.integration.conftest import Server, free_ports, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration
NAME = "My.Model-1.5"


@pytest.fixture(scope="module")
def dropin(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("dropin")
    (root / NAME).symlink_to(model_dir)  # the default model's converted checkpoint, in a dotted folder
    arguments = {"model": str(root / NAME), "disable_log_requests": True, "gpu_memory_utilization": 0.3,
                 "enforce_eager": True, "disable_log_stats": False, "dtype": "float", "max_model_len": 1024,
                 "max_num_seqs": 8, "seed": 0, "enable_prefix_caching": True, "trust_remote_code": False,
                 "swap_space": 4, "kv_cache_dtype": "auto", "tensor_parallel_size": 1}
    (root / "model.json").write_text(json.dumps(arguments), encoding="utf-8")
    proc, srv = start_server(root / "server.log", "max_num_seqs=4", openai_port=free_ports(1)[0],
                             model_json=root / "model.json")
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


def test_model_json_loads_and_the_log_names_each_arguments_effect(dropin: Server) -> None:
    log = dropin.log_text()
    source = "model_repository/tt_llm/1/model.json"
    expected = [
        f"{source}: model -> model=",
        f"{source}: disable_log_requests=True has no effect here: request logging is not configurable",
        f"{source}: gpu_memory_utilization -> kv_cache_memory_fraction=0.3 (the KV cache takes this fraction",
        f"{source}: enforce_eager -> trace_mode=none (true: trace_mode=none",
        f"{source}: disable_log_stats=False has no effect here: no periodic stats log",
        f"{source}: dtype -> dtype=float32 (weights and activations in this dtype",
        f"{source}: max_model_len -> max_model_len=1024 (",
        f"{source}: max_num_seqs -> max_num_seqs=8 (",
        f"{source}: seed -> seed=0 (",
        f"{source}: enable_prefix_caching -> enable_prefix_caching=true (",
        f"{source}: trust_remote_code=False has no effect here: no checkpoint code runs",
        f"{source}: swap_space=4 has no effect here: a preempted request is recomputed",
        f"{source}: kv_cache_dtype='auto': as here (the KV cache is kept in the model's dtype",
        f"{source}: tensor_parallel_size -> tensor_parallel_size=1 (",
        f"{source}: max_num_seqs=8 is overridden by config.pbtxt's parameter (config.pbtxt wins)",
    ]
    assert [line for line in expected if line not in log] == []
    # and the options took effect: fp32, eager, the fraction, config.pbtxt's max_num_seqs
    assert "0.3 of the rest" in log
    assert "max_model_len=1024, 1 lane(s) of" in log and "trace_mode=none" in log and " in float32" in log
    assert "(ceiling 256 blocks per lane: max_num_seqs x max_model_len)" in log  # 4 x 1024 / 16
    assert f"as '{NAME}' (the OpenAI front's `model`, the metrics' model_name)" in log


def test_the_sdk_sees_the_dotted_folder_name_whole(dropin: Server) -> None:
    assert dropin.openai is not None
    client = OpenAI(base_url=dropin.openai, api_key="unused", max_retries=0, timeout=300)
    models = client.models.list().data
    assert [m.id for m in models] == [NAME]
    assert models[0].model_extra == {"root": NAME, "parent": None, "max_model_len": 1024}
    assert client.models.retrieve(NAME).id == NAME
    with pytest.raises(NotFoundError):
        client.models.retrieve("My")
    reply = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=4, temperature=0)
    assert reply.model == NAME and reply.usage is not None and reply.usage.completion_tokens >= 1
    with pytest.raises(NotFoundError):  # the old cut name is no alias
        client.chat.completions.create(model="My", messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
    front_metrics = requests.get(f"{dropin.openai.removesuffix('/v1')}/metrics", timeout=10).text
    assert f'model_name="{NAME}"' in front_metrics
    values = idle_scrape(dropin.metrics)
    success = [k for k in values if k.startswith("vllm:request_success_total{")]
    assert success and all(f'model_name="{NAME}"' in k for k in success)
    assert sum(values[k] for k in success) == 1
