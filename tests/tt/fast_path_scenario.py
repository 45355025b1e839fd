"""The `fast_path` scenario of scenarios.py: requests with their own sampling parameters (device
sampling, a logprobs request that needs the host, an abort mid-stream) through the engine on the
mesh, with async decode on or off; returns their tokens and what each step did: where it sampled,
how many decode steps ran ahead, the bytes the reads copied, and what was left held at the end."""

from __future__ import annotations

import threading
from typing import Any

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.params import SamplingParams


def fast_path(params: dict[str, str], requests: list[dict[str, Any]],
              concurrent: bool = True) -> dict[str, Any]:
    """Each request: {"prompt": ids, "sampling": SamplingParams fields, "abort_after": n tokens
    (optional)}."""
    llm = build_engine(EngineConfig.from_parameters(params))
    runner: Any = llm.runner
    steps: list[list[Any]] = []  # [mode, "device" | "host", rows] per synchronous step
    launched = [0]
    run_and_sample, launch = runner.run_and_sample, runner.launch

    def recording_run(plan: Any, sampling: Any) -> Any:
        steps.append([plan.mode.value, "host" if sampling.host is not None else "device", len(plan.rows)])
        return run_and_sample(plan, sampling)

    def recording_launch(plan: Any, sampling: Any, after: int | None = None) -> int:
        launched[0] += 1
        return launch(plan, sampling, after)
    runner.run_and_sample, runner.launch = recording_run, recording_launch

    outputs: list[list[int]] = [[] for _ in requests]
    reasons: list[str | None] = [None] * len(requests)
    logprobs: list[int] = [0] * len(requests)
    errors: list[str] = []
    done = [threading.Event() for _ in requests]

    def collect(i: int, abort_after: int | None) -> Any:
        def on_output(out: RequestOutput) -> None:
            outputs[i].extend(out.new_token_ids)
            logprobs[i] += len(out.logprobs or ())
            if out.error is not None:
                errors.append(out.error)
            if abort_after is not None and len(outputs[i]) >= abort_after and not out.finished:
                llm.abort(f"r{i}")
            if out.finished or out.error is not None:
                reasons[i] = None if out.finish_reason is None else out.finish_reason.value
                done[i].set()
        return on_output

    llm.start()
    try:
        for i, request in enumerate(requests):
            chosen = SamplingParams(**request["sampling"])
            llm.add_request(f"r{i}", request["prompt"], chosen, collect(i, request.get("abort_after")))
            if not concurrent:
                assert done[i].wait(timeout=600), f"request r{i} did not finish"
        for i, event in enumerate(done):
            assert event.wait(timeout=600), f"request r{i} did not finish"
        assert not errors, errors[0]
        generator = runner.generator  # before shutdown drops it
        seen = {"decode_calls": generator.decode_calls, "prefill_calls": len(generator.prefill_calls)}
        lanes = llm.scheduler.lanes
        held = {"blocks_held": sum(lane.pool.num_blocks - lane.pool.num_free for lane in lanes),
                "requests_held": len(llm.scheduler.requests), "reads_pending": runner.drain()}
    finally:
        llm.shutdown()
    return {"tokens": outputs, "reasons": reasons, "logprobs": logprobs, "steps": steps,
            "launched": launched[0], "host_sampling_steps": llm.pipeline.host_sampling_steps,
            "decode_drains": llm.pipeline.decode_drains, "bytes_read": runner.reads.bytes_read,
            "reads": runner.reads.reads, "lanes": runner.lanes, **seen, **held,
            "cleanup": runner.cleanup_log.events}
