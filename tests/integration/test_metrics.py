"""Through tritonserver: every metric family exists, and after a known workload the scraped
counters move by exactly the expected amounts."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from tests.integration.clients import (
    grpc_stream,
    http_generate,
    idle_scrape,
    scrape,
    series,
    wait_for_metrics,
)
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

FAMILIES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total",
            "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
            "vllm:time_to_first_token_seconds_count", "vllm:time_per_output_token_seconds_count",
            "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count",
            "tt:eager_steps_total", "tt:trace_replays_total", "tt:host_sampling_fallbacks_total",
            "tt:async_decode_drains_total", "tt:engine_failures_total", "tt:request_failures_total",
            "tt:num_requests_parked", "tt:grammar_compile_seconds_count", "tt:grammar_cache_hits_total"]


def test_every_family_has_one_series_per_model_and_lane(server: Server) -> None:
    metrics = scrape(server.metrics)
    for name in FAMILIES:
        assert series(name) in metrics, name
        assert sum(1 for k in metrics if k.split("{")[0] == name) == 1, f"{name}: extra series"
    for reason in ("stop", "length", "abort"):
        assert series("vllm:request_success_total", finished_reason=reason) in metrics
    for mode in ("prefill", "decode", "empty"):
        assert series("tt:steps_total", mode=mode) in metrics


def test_counters_after_a_known_workload(server: Server, tokenizer: Any, chat_ids: Any) -> None:
    # A prompt no earlier test sent, so the first request finds nothing in the prefix cache.
    words = " ".join(random.Random(42).choice(["alpha", "beta", "gamma", "delta"]) for _ in range(60))
    text = f"Unique prompt {random.randrange(10**9)}: {words}"
    n_prompt = len(tokenizer(text).input_ids)
    params = json.dumps({"temperature": 0, "max_tokens": 7, "ignore_eos": True})
    before = idle_scrape(server.metrics)
    for _ in range(2):  # the second finds the first one's full blocks cached
        response = http_generate(server.http, "tt_llm", {"text_input": text, "sampling_parameters": params})
        assert response["status"] == 200
    expected = {
        series("vllm:prompt_tokens_total"): 2 * n_prompt,
        series("vllm:generation_tokens_total"): 14,
        series("vllm:prefix_cache_queries_total"): 2 * n_prompt,
        # every full block of the prompt except the one holding its last token
        series("vllm:prefix_cache_hits_total"): (n_prompt - 1) // 16 * 16,
        series("vllm:request_success_total", finished_reason="length"): 2,
        series("vllm:request_success_total", finished_reason="stop"): 0,
        series("vllm:request_success_total", finished_reason="abort"): 0,
        series("vllm:time_to_first_token_seconds_count"): 2,
        series("vllm:e2e_request_latency_seconds_count"): 2,
        series("vllm:request_queue_time_seconds_count"): 2,
        series("vllm:time_per_output_token_seconds_count"): 2,
        series("tt:steps_total", mode="prefill"): 2,
        series("tt:steps_total", mode="decode"): 12,
        # trace_mode=auto (the default) is all on the CPU: prefill and decode steps replay traces
        series("tt:eager_steps_total"): 0,
        series("tt:trace_replays_total"): 14,
        # greedy requests sample inside the step: no host fallback
        series("tt:host_sampling_fallbacks_total"): 0,
        series("tt:request_failures_total"): 0,
        series("vllm:num_preemptions_total"): 0,
    }
    assert wait_for_metrics(server.metrics, expected, before) == expected

    # A request that ends on EOS: the EOS token counts as a generated token.
    ids = chat_ids("Say OK.")
    before = idle_scrape(server.metrics)
    stop = grpc_stream(server.grpc, "tt_llm", {"input_ids": np.array(ids, dtype=np.int32),
                                               "max_tokens": np.array([64], dtype=np.int32),
                                               "stream": np.array([True])})
    assert stop.error is None and stop.ids()[-1] == tokenizer.eos_token_id
    expected = {
        series("vllm:prompt_tokens_total"): len(ids),
        series("vllm:generation_tokens_total"): len(stop.ids()),
        series("vllm:request_success_total", finished_reason="stop"): 1,
        series("vllm:request_success_total", finished_reason="length"): 0,
    }
    assert wait_for_metrics(server.metrics, expected, before) == expected
    after = scrape(server.metrics)
    assert after[series("vllm:kv_cache_usage_perc")] == 0
    assert after[series("vllm:num_requests_running")] == 0
