"""Through tritonserver: every metric family exists, and after a known workload the scraped
counters move by exactly the expected amounts."""

from __future__ import annotations

import json
import random
import re
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
            "vllm:mm_cache_queries_total", "vllm:mm_cache_hits_total",
            "vllm:time_to_first_token_seconds_count", "vllm:time_per_output_token_seconds_count",
            "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count",
            "tt:eager_steps_total", "tt:trace_replays_total", "tt:host_sampling_fallbacks_total",
            "tt:async_decode_drains_total", "tt:engine_failures_total", "tt:request_failures_total",
            "tt:num_requests_parked", "tt:grammar_compile_seconds_count", "tt:grammar_cache_hits_total",
            "vllm:inter_token_latency_seconds_count", "vllm:request_time_per_output_token_seconds_count",
            "vllm:request_prefill_time_seconds_count", "vllm:request_decode_time_seconds_count",
            "vllm:request_inference_time_seconds_count", "vllm:request_prompt_tokens_count",
            "vllm:request_generation_tokens_count", "vllm:iteration_tokens_total_count"]


def test_every_family_has_one_series_per_model_and_lane(server: Server) -> None:
    metrics = scrape(server.metrics)
    for name in FAMILIES:
        assert series(name) in metrics, name
        assert sum(1 for k in metrics if k.split("{")[0] == name) == 1, f"{name}: extra series"
    for reason in ("stop", "length", "abort"):
        assert series("vllm:request_success_total", finished_reason=reason) in metrics
    for mode in ("prefill", "decode", "empty"):
        assert series("tt:steps_total", mode=mode) in metrics
    # Info metrics: the KV cache as sized at load, and no LoRA adapter. kv_cache_memory_bytes=auto
    # (the default) logs the blocks it chose; at most the ceiling, 32 seats x 512 blocks of 16 tokens.
    sized = re.findall(r"kv cache: kv_cache_memory_bytes=auto: .* -> (\d+) blocks of 16 per lane",
                       server.log_text())
    assert len(sized) == 1, "the server logs its KV sizing once"
    blocks = int(sized[0])
    assert 512 <= blocks <= 32 * 512
    cache = {k: v for k, v in metrics.items() if k.startswith("vllm:cache_config_info{")}
    assert cache == {series("vllm:cache_config_info", block_size="16", cache_dtype="float32",
                            enable_prefix_caching="True", num_gpu_blocks=str(blocks)): 1}
    lora = [k for k in metrics if k.startswith("vllm:lora_requests_info{")]
    assert lora == [series("vllm:lora_requests_info", max_lora="0", running_lora_adapters="",
                           waiting_lora_adapters="")]
    # Histograms reach long requests: a prompt of the whole context (8192), a request of two hours.
    assert max(bounds(metrics, "vllm:request_prompt_tokens_bucket")) == 5000
    assert max(bounds(metrics, "vllm:e2e_request_latency_seconds_bucket")) == 7680
    assert max(bounds(metrics, "vllm:time_to_first_token_seconds_bucket")) == 2560


def bounds(metrics: dict[str, float], name: str) -> list[float]:
    """The finite upper bounds (`le`) of a histogram's buckets."""
    found = [re.search(r'le="([^"]+)"', key) for key in metrics if key.startswith(name + "{")]
    return [float(m.group(1)) for m in found if m is not None and m.group(1) != "+Inf"]


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
        series("vllm:request_prefill_time_seconds_count"): 2,
        series("vllm:request_decode_time_seconds_count"): 2,
        series("vllm:request_inference_time_seconds_count"): 2,
        # per token after each request's first, as vLLM observes it; the request's mean once
        series("vllm:time_per_output_token_seconds_count"): 12,
        series("vllm:inter_token_latency_seconds_count"): 12,
        series("vllm:request_time_per_output_token_seconds_count"): 2,
        series("vllm:request_prompt_tokens_count"): 2,
        series("vllm:request_prompt_tokens_sum"): 2 * n_prompt,
        series("vllm:request_generation_tokens_sum"): 14,
        # one observation per step: the tokens it computed (the second prompt without its hits)
        series("vllm:iteration_tokens_total_count"): 14,
        series("vllm:iteration_tokens_total_sum"): 2 * n_prompt - (n_prompt - 1) // 16 * 16 + 12,
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
