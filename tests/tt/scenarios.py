"""Scenarios the Tenstorrent tier runs, one per subprocess (see mock_device.py): each opens ttnn's
mock devices through the backend's own code and prints what it observed as one JSON line.

    python tests/tt/scenarios.py NAME '{"params": {...}}'
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import ttnn

from tt_backend.assembly import build_engine, uses_tt
from tt_backend.config import EngineConfig
from tt_backend.devices.tt.mesh import TTMesh, tt_device_count
from tt_backend.mesh_options import MeshOptions
from tt_backend.models.tt_loader import load_tt_model

MARK = "SCENARIO-RESULT "


def _config(params: dict[str, str]) -> EngineConfig:
    return EngineConfig.from_parameters(params)


def _open(config: EngineConfig) -> TTMesh:
    return TTMesh.open(config.mesh_options(MeshOptions.shape_from(config.mesh_device)))


def _fabric() -> str:
    return str(ttnn.get_fabric_config()).removeprefix("FabricConfig.")


def _reopens() -> bool:
    """Whether a plain mesh opens and closes again (nothing was left open)."""
    mesh = _open(EngineConfig(device="tt", block_size=32))
    mesh.close()
    return mesh.events[-1] in ("mesh", "fabric")


def mesh(params: dict[str, str]) -> dict[str, Any]:
    opened = _open(_config(params))
    seen = {"num_devices": opened.num_devices, "shape": list(opened.mesh.shape), "fabric_open": _fabric()}
    opened.close()
    return {**seen, "events": opened.events, "fabric_closed": _fabric(), "reopens": _reopens()}


def open_fails(params: dict[str, str], reopen: bool = True) -> dict[str, Any]:
    try:
        _open(_config(params))
    except (RuntimeError, ValueError) as exc:
        return {"error": type(exc).__name__, "message": str(exc).splitlines()[0] if str(exc) else "",
                "full": str(exc)[:2000], "fabric_after": _fabric(), "reopens": _reopens() if reopen else None}
    return {"error": None}


def load(params: dict[str, str]) -> dict[str, Any]:
    loaded = load_tt_model(_config(params))
    generator, kv = loaded.generator, loaded.kv
    first_k = kv.lane(0)[0][0]
    seen = {
        "architecture": loaded.architecture, "generator": type(generator).__name__,
        "single_execute": loaded.capabilities.single_execute,
        "prefix_caching": loaded.capabilities.prefix_caching,
        "submeshes": [list(s.shape) for s in generator.submeshes],
        "mesh_submeshes": len(loaded.mesh.submeshes()),
        "lanes": len(kv.caches), "layers": [len(region) for region in kv.caches],
        "kv_shape": list(first_k.shape), "kv_dtype": str(first_k.dtype), "kv_layout": str(first_k.layout),
        "kv_buffer": str(first_k.memory_config().buffer_type),
        "kv_devices": [region[0][0].device().get_num_devices() for region in kv.caches],
        "num_kv_blocks": loaded.config.num_kv_blocks, "max_num_seqs": generator.max_batch_size,
    }
    loaded.close()
    return {**seen, "cleanup": loaded.cleanup_log.events, "mesh_events": loaded.mesh.events,
            "fabric_closed": _fabric(), "reopens": _reopens()}


def load_fails(params: dict[str, str], engine: bool = True) -> dict[str, Any]:
    """The error of building the engine (or, with engine=False, of the load path alone)."""
    try:
        build_engine(_config(params)) if engine else load_tt_model(_config(params))
    except (ValueError, RuntimeError) as exc:
        return {"error": type(exc).__name__, "message": str(exc), "fabric_after": _fabric(),
                "reopens": _reopens()}
    return {"error": None}


def engine(params: dict[str, str], prompts: list[list[int]], max_tokens: int, concurrent: bool = False,
           sampling: dict[str, Any] | None = None) -> dict[str, Any]:
    """Serve the prompts through the engine on the mesh (greedy, or with `sampling`'s parameters,
    e.g. a temperature and a seed), one after another or all at once; return their token ids, what
    the contract generator saw and what the scheduler counted."""
    import threading

    from tt_backend.engine.outputs import RequestOutput
    from tt_backend.sampling.params import SamplingParams

    llm = build_engine(_config(params))
    runner: Any = llm.runner
    start_decode, rows_seen = runner.start_decode, [0]

    def counting_decode(rows: list[Any], *args: Any) -> Any:
        rows_seen[0] = max(rows_seen[0], len(rows))
        return start_decode(rows, *args)
    runner.start_decode = counting_decode
    outputs: list[list[int]] = [[] for _ in prompts]
    errors: list[str] = []
    done = [threading.Event() for _ in prompts]

    def collect(i: int) -> Any:
        def on_output(out: RequestOutput) -> None:
            outputs[i].extend(out.new_token_ids)
            if out.error is not None:
                errors.append(out.error)
            if out.finished or out.error is not None:
                done[i].set()
        return on_output

    chosen = SamplingParams(max_tokens=max_tokens, **(sampling or {"temperature": 0.0}))
    llm.start()
    try:
        for i, ids in enumerate(prompts):
            llm.add_request(f"r{i}", ids, chosen, collect(i))
            if not concurrent:
                assert done[i].wait(timeout=600), f"request r{i} did not finish"
        for i, event in enumerate(done):
            assert event.wait(timeout=600), f"request r{i} did not finish"
        assert not errors, errors[0]
        generator = runner.generator  # before shutdown drops it
        seen = {"rows_per_submesh": list(generator.rows_per_submesh), "warmups": generator.warmups,
                "prefill_calls": generator.prefill_calls, "decode_calls": generator.decode_calls}
        lanes = llm.scheduler.lanes
        counted = {"preemptions": sum(lane.stats.preemptions for lane in lanes),
                   "prefix_cache_hits": sum(lane.stats.prefix_cache_hits for lane in lanes)}
    finally:
        llm.shutdown()
    return {"tokens": outputs, "max_decode_rows": rows_seen[0], "eager_steps": runner.eager_steps,
            "lanes": runner.lanes, **seen, **counted, "traced_steps": runner.traced_steps,
            "cleanup": runner.cleanup_log.events, "fabric_closed": _fabric(), "reopens": _reopens(),
            "cache_dtype": llm.cache_info.dtype}


def paged_ops(params: dict[str, str]) -> dict[str, Any]:
    """The paged ops at every shape the generator runner plans for this config, on the cache the
    load path allocated: decode at the fixed capacity with the full page-table width (live rows at
    the last position, padding rows at -1), and paged_fill_cache at every tile-padded prompt length
    up to max_model_len, from the first block and from a cached prefix of one block."""
    import torch
    from paged_ops import decode_step, fill_row  # tests/tt/paged_ops.py, beside this script

    loaded = load_tt_model(_config(params))
    try:
        config, kv = loaded.config, loaded.kv
        assert config.max_model_len is not None and config.num_kv_blocks is not None
        g, device, caches = kv.geometry, loaded.generator.submeshes[0], kv.lane(0)
        heads = loaded.generator.num_heads
        width = -(-config.max_model_len // config.block_size)
        capacity = config.max_num_seqs
        table = torch.arange(capacity * width).reshape(capacity, width) % config.num_kv_blocks
        positions = torch.full((capacity,), config.max_model_len - 1)
        positions[capacity // 2:] = -1
        out = decode_step(ttnn, device, caches, table, positions, heads, g.num_kv_heads, g.head_dim)
        lengths = list(range(32, config.max_model_len + 1, 32))
        for length in lengths:
            fill_row(ttnn, device, caches, table[:1], length, g.num_kv_heads, g.head_dim)
            if length + config.block_size <= config.max_model_len:
                fill_row(ttnn, device, caches, table[:1, 1:], length, g.num_kv_heads, g.head_dim)
        ttnn.synchronize_device(device)
        seen = {"decode": [capacity, width], "sdpa_out": list(out.shape), "prefill_lengths": lengths}
    finally:
        loaded.close()
    return seen


def config_fails(params: dict[str, str]) -> dict[str, Any]:
    try:
        _config(params)
    except ValueError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"error": None}


def auto(params: dict[str, str]) -> dict[str, Any]:
    return {"uses_tt": uses_tt(_config(params)), "device_count": tt_device_count()}


def instance(params: dict[str, str], index: int, count: int, prompts: list[list[int]],
             max_tokens: int) -> dict[str, Any]:
    """Model instance `index` of `count`, placed as the Triton model places it (TT_VISIBLE_DEVICES
    and its mesh, set after ttnn was imported and before it built its cluster), then serving the
    prompts; with the unique ids of the chips its cluster holds (tt-umd's cluster descriptor)."""
    import os
    from pathlib import Path

    import yaml

    from tt_backend.assembly import place_instance

    placed = place_instance(_config(params), index, count)
    described = yaml.safe_load(Path(ttnn.cluster.serialize_cluster_descriptor()).read_text())
    seen = {"visible": os.environ.get("TT_VISIBLE_DEVICES"), "mesh_device": placed.mesh_device,
            "num_devices": int(ttnn.get_num_devices()),
            "chips": sorted(int(v) for v in described["chip_unique_ids"].values())}
    return {**seen, **engine({**params, "mesh_device": placed.mesh_device}, prompts, max_tokens)}


from fast_path_scenario import fast_path  # noqa: E402  (tests/tt/, beside this script)
from image_scenario import engine_images  # noqa: E402

SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    f.__name__: f for f in (mesh, open_fails, load, load_fails, engine, paged_ops, config_fails, auto,
                            instance, fast_path, engine_images)}

if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](**json.loads(sys.argv[2]))
    print(MARK + json.dumps(result), flush=True)
