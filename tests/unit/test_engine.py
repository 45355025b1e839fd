"""The engine without Triton: greedy fp32 output equals HF generate, also under KV pressure."""

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import CHAT_PROMPTS
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.engine.outputs import RequestOutput
from tt_backend.engine.stats import EngineStats
from tt_backend.sampling.params import SamplingParams

MAX_TOKENS = 40


def run(config: EngineConfig, prompts: list[list[int]], params: SamplingParams,
        min_preemptions: int = 0, queue_before_start: bool = False) -> list[list[RequestOutput]]:
    """Serve every prompt to the end; check that no KV block is left behind."""
    requests = [(ids, params) for ids in prompts]
    return serve(build_engine(config), requests, min_preemptions, queue_before_start)


def generate(engine: LLMEngine, requests: list[tuple[list[int], SamplingParams]], prefix: str = "r",
             then: Callable[[], None] | None = None) -> list[list[RequestOutput]]:
    """Add the requests (ids `prefix0`, `prefix1`, ...), call `then`, and wait for every output."""
    outputs: list[list[RequestOutput]] = [[] for _ in requests]
    done = threading.Semaphore(0)

    def collect(i: int) -> Any:
        def on_output(out: RequestOutput) -> None:
            outputs[i].append(out)
            if out.finished:
                done.release()
        return on_output

    for i, (ids, params) in enumerate(requests):
        engine.add_request(f"{prefix}{i}", ids, params, collect(i))
    if then is not None:
        then()
    for _ in requests:
        assert done.acquire(timeout=120)
    return outputs


def serve(engine: LLMEngine, requests: list[tuple[list[int], SamplingParams]], min_preemptions: int = 0,
          queue_before_start: bool = False) -> list[list[RequestOutput]]:
    """With `queue_before_start`, every request is queued before the engine thread starts, so
    runs of different settings batch them the same way."""
    if not queue_before_start:
        engine.start()
    try:
        outputs = generate(engine, requests, then=engine.start if queue_before_start else None)
    finally:
        engine.shutdown()
    assert all(lane.pool.num_free == lane.pool.num_blocks for lane in engine.scheduler.lanes)
    assert sum(lane.stats.preemptions for lane in engine.scheduler.lanes) >= min_preemptions
    return outputs


@pytest.mark.parametrize("kv_blocks, kernels", [(None, "auto"), (8, "auto"), (None, "torch")])
def test_batched_greedy_matches_hf(kv_blocks: int | None, kernels: Any, chat_ids: Any, hf_greedy: Any,
                                   tokenizer: Any) -> None:
    # 8 blocks of 16 hold one 128-token request but not all four: requests get preempted
    # and recomputed, and their outputs must not change. The model runs on the native CPU
    # kernels (auto, where they build) or on torch ops only.
    config = EngineConfig(dtype="float32", max_model_len=128, num_kv_blocks=kv_blocks, cpu_kernels=kernels)
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    outputs = run(config, prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                  min_preemptions=1 if kv_blocks else 0)
    for ids, outs in zip(prompts, outputs, strict=True):
        expected = hf_greedy(tuple(ids), MAX_TOKENS)
        assert [t for o in outs for t in o.new_token_ids] == expected
        assert "".join(o.text for o in outs) == tokenizer.decode(expected, skip_special_tokens=True)
        assert outs[-1].finish_reason == ("stop" if len(expected) < MAX_TOKENS else "length")
        assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]


def test_seeded_sampling_is_reproducible_and_batch_independent(chat_ids: Any) -> None:
    config = EngineConfig(dtype="float32", max_model_len=256)
    prompt = chat_ids(CHAT_PROMPTS[0])
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, seed=1234, max_tokens=16)
    alone = run(config, [prompt], params)[0]
    crowd = run(config, [prompt, chat_ids(CHAT_PROMPTS[1]), chat_ids(CHAT_PROMPTS[2])], params)[0]
    assert [t for o in alone for t in o.new_token_ids] == [t for o in crowd for t in o.new_token_ids]


def test_validation_names_the_problem(chat_ids: Any) -> None:
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=64))
    with pytest.raises(ValueError, match=r"the prompt is empty \(0 tokens\)"):
        engine.validate([], SamplingParams())
    with pytest.raises(ValueError, match=r"input_ids hold 49152, outside the vocabulary \[0, 49152\)"):
        engine.validate([1, 49152], SamplingParams())
    message = r"the prompt \(60 tokens\) plus max_tokens \(5\) exceeds max_model_len \(64\)"
    with pytest.raises(ValueError, match=message):
        engine.validate([1] * 60, SamplingParams(max_tokens=5))


def test_min_tokens_keeps_eos_out_until_reached(chat_ids: Any, tokenizer: Any) -> None:
    config = EngineConfig(dtype="float32", max_model_len=256)
    prompt = chat_ids("Say OK.")
    short = run(config, [prompt], SamplingParams(temperature=0, max_tokens=40))[0]
    natural = [t for o in short for t in o.new_token_ids]
    assert natural[-1] == tokenizer.eos_token_id and len(natural) < 20
    longer = run(config, [prompt], SamplingParams(temperature=0, max_tokens=40, min_tokens=20))[0]
    ids = [t for o in longer for t in o.new_token_ids]
    assert len(ids) >= 20 and tokenizer.eos_token_id not in ids[:19]
    assert ids[: len(natural) - 1] == natural[:-1]  # identical until EOS would have come


def test_two_lanes_match_hf_and_report_per_lane(chat_ids: Any, hf_greedy: Any) -> None:
    config = EngineConfig(dtype="float32", max_model_len=128, max_num_seqs=2, data_parallel_size=2)
    engine = build_engine(config)
    reports: list[EngineStats] = []
    engine.set_stats_listener(reports.append)
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    outputs = serve(engine, [(ids, params) for ids in prompts], queue_before_start=True)
    for ids, outs in zip(prompts, outputs, strict=True):
        assert [t for o in outs for t in o.new_token_ids] == hf_greedy(tuple(ids), MAX_TOKENS)
    finished = {lane: sum(len(r.finished) for r in reports if r.lane == lane) for lane in (0, 1)}
    assert finished == {0: 2, 1: 2}  # least-loaded: requests 0 and 2 in lane 0, 1 and 3 in lane 1
    for lane in (0, 1):
        generated = sum(r.generation_tokens for r in reports if r.lane == lane)
        assert generated == sum(len(hf_greedy(tuple(prompts[i]), MAX_TOKENS)) for i in (lane, lane + 2))
    # Both lanes took part in the same steps: one prefill step for all four, then shared decodes.
    assert [r.step_mode for r in reports if r.lane == 0][:2] == ["prefill", "decode"]
    assert [r.step_mode for r in reports if r.lane == 1][:2] == ["prefill", "decode"]
