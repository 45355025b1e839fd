"""Prometheus metrics on Triton's metrics port, through pb_utils.MetricFamily.

vLLM's names and meanings, labelled by `model` (Triton's model), `model_name` (the served model,
the label vLLM's dashboards and the Gateway API inference extension filter on) and `lane`, plus
this design's own (`tt:` prefix). Rules: every family exists from startup at 0; a counter has
exactly one series per model and lane (and its own label, such as `finished_reason` or `mode`),
with no aggregate series; the EOS token counts as a generated token; cached blocks that no
request references count as free in `vllm:kv_cache_usage_perc`. `vllm:time_per_output_token_seconds`
and `vllm:inter_token_latency_seconds` observe every interval between a request's tokens, as vLLM
does; `vllm:request_time_per_output_token_seconds` a request's mean. Only the response thread
calls `update` (pb_utils metric updates from several threads crashed tritonserver 2.51).
"""

from __future__ import annotations

import time
from typing import Any

import triton_python_backend_utils as pb_utils

from tt_backend.contract.modes import FinishReason, StepMode
from tt_backend.engine.stats import CacheInfo, EngineStats, FinishedRequestStats
from tt_backend.triton.metric_buckets import (
    INTER_TOKEN_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    iteration_token_buckets,
    token_count_buckets,
)

SUCCESS_REASONS = tuple(reason.value for reason in FinishReason if reason is not FinishReason.ERROR)
Series = dict[tuple[str, str], Any]
"""A family's metrics by (lane, value of the family's own label or "")."""


class EngineMetrics:
    def __init__(self, model: str, model_name: str, num_lanes: int, cache: CacheInfo, max_model_len: int,
                 max_num_batched_tokens: int, first_lane: int = 0) -> None:
        """`first_lane`: this model instance's first lane label (instance k of several, each of
        num_lanes lanes, labels its lanes k*num_lanes...), so instances never share a series."""
        self._first_lane = first_lane
        self._families: list[Any] = []  # kept alive for as long as their metrics
        counter, gauge, histogram = (pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE,
                                     pb_utils.MetricFamily.HISTOGRAM)
        lanes = [str(first_lane + i) for i in range(num_lanes)]
        base = {"model": model, "model_name": model_name}

        def metrics(name: str, description: str, kind: Any, extra: dict[str, list[str]] | None = None,
                    buckets: list[float] | None = None, info: dict[str, str] | None = None) -> Series:
            family = pb_utils.MetricFamily(name=name, description=description, kind=kind)
            self._families.append(family)
            out = {}
            for lane in lanes:
                (key, values), = (extra or {"": [""]}).items()
                for value in values:
                    labels = {**base, "lane": lane, **({key: value} if key else {}), **(info or {})}
                    kwargs = {"buckets": buckets} if buckets is not None else {}
                    out[(lane, value)] = family.Metric(labels=labels, **kwargs)
            return out

        tokens = token_count_buckets(max_model_len)
        self.running = metrics("vllm:num_requests_running", "Requests running on the device", gauge)
        self.waiting = metrics("vllm:num_requests_waiting", "Requests waiting to be admitted", gauge)
        self.kv_usage = metrics("vllm:kv_cache_usage_perc", "Fraction of KV blocks in use (0-1)", gauge)
        self.prompt_tokens = metrics("vllm:prompt_tokens_total", "Prompt tokens prefilled", counter)
        self.generation_tokens = metrics("vllm:generation_tokens_total", "Tokens generated", counter)
        self.preemptions = metrics("vllm:num_preemptions_total", "Preemptions by recompute", counter)
        self.cache_queries = metrics("vllm:prefix_cache_queries_total",
                                     "Prompt tokens looked up in the prefix cache", counter)
        self.cache_hits = metrics("vllm:prefix_cache_hits_total",
                                  "Prompt tokens found in the prefix cache", counter)
        self.success = metrics("vllm:request_success_total", "Finished requests by reason", counter,
                               {"finished_reason": list(SUCCESS_REASONS)})
        self.failures = metrics("tt:request_failures_total", "Requests ended by an error", counter)
        self.ttft = metrics("vllm:time_to_first_token_seconds", "Arrival to first token", histogram,
                            buckets=TTFT_BUCKETS)
        self.tpot = metrics("vllm:time_per_output_token_seconds",
                            "Interval between a request's consecutive tokens", histogram,
                            buckets=INTER_TOKEN_BUCKETS)
        self.itl = metrics("vllm:inter_token_latency_seconds", "Interval between a request's consecutive "
                           "tokens", histogram, buckets=INTER_TOKEN_BUCKETS)
        self.request_tpot = metrics("vllm:request_time_per_output_token_seconds",
                                    "Mean interval between a request's tokens", histogram,
                                    buckets=INTER_TOKEN_BUCKETS)
        self.e2e = metrics("vllm:e2e_request_latency_seconds", "Arrival to finish", histogram,
                           buckets=REQUEST_LATENCY_BUCKETS)
        self.queue = metrics("vllm:request_queue_time_seconds", "Arrival to first scheduled", histogram,
                             buckets=REQUEST_LATENCY_BUCKETS)
        self.prefill_time = metrics("vllm:request_prefill_time_seconds", "First scheduled to first token",
                                    histogram, buckets=REQUEST_LATENCY_BUCKETS)
        self.decode_time = metrics("vllm:request_decode_time_seconds", "First to last token", histogram,
                                   buckets=REQUEST_LATENCY_BUCKETS)
        self.inference_time = metrics("vllm:request_inference_time_seconds",
                                      "First scheduled to last token", histogram,
                                      buckets=REQUEST_LATENCY_BUCKETS)
        self.request_prompt = metrics("vllm:request_prompt_tokens", "Prompt tokens of a finished request",
                                      histogram, buckets=tokens)
        self.request_generation = metrics("vllm:request_generation_tokens",
                                          "Tokens generated for a finished request", histogram,
                                          buckets=tokens)
        self.iteration_tokens = metrics("vllm:iteration_tokens_total", "Tokens computed in one engine step",
                                        histogram, buckets=iteration_token_buckets(max_num_batched_tokens))
        self.steps = metrics("tt:steps_total", "Engine steps by mode", counter,
                             {"mode": [mode.value for mode in StepMode]})
        self.eager_steps = metrics("tt:eager_steps_total", "Steps executed eagerly", counter)
        self.trace_replays = metrics("tt:trace_replays_total", "Steps executed by replaying a trace",
                                     counter)
        self.host_sampling = metrics("tt:host_sampling_fallbacks_total",
                                     "Steps whose batch sampled on the host", counter)
        self.decode_drains = metrics("tt:async_decode_drains_total",
                                     "Drains of the async decode pipeline", counter)
        self.mm_cache_queries = metrics("vllm:mm_cache_queries_total", "Images whose encoder output a "
                                        "prefill asked for", counter)
        self.mm_cache_hits = metrics("vllm:mm_cache_hits_total", "Images whose encoder output was read "
                                     "from the encoder cache", counter)
        self.engine_failures = metrics("tt:engine_failures_total", "Engine thread failures", counter)
        self.parked = metrics("tt:num_requests_parked", "Waiting requests parked while their grammar "
                              "compiles (counted in vllm:num_requests_waiting too)", gauge)
        self.grammar_compile = metrics("tt:grammar_compile_seconds", "Structured-output grammar compile "
                                       "time", histogram, buckets=TTFT_BUCKETS)
        self.grammar_cache_hits = metrics("tt:grammar_cache_hits_total", "Structured-output requests "
                                          "whose grammar was compiled already", counter)
        # Info metrics: the value is 1 (the cache) or when it was set (LoRA, as vLLM's); the labels
        # carry the information. No LoRA adapters: the inference extension reads that none run.
        cache_info = {"block_size": str(cache.block_size), "num_gpu_blocks": str(cache.num_blocks),
                      "cache_dtype": cache.dtype, "enable_prefix_caching": str(cache.prefix_caching)}
        for metric in metrics("vllm:cache_config_info", "KV cache configuration", gauge,
                              info=cache_info).values():
            metric.set(1)
        lora_info = {"max_lora": "0", "running_lora_adapters": "", "waiting_lora_adapters": ""}
        for metric in metrics("vllm:lora_requests_info", "Running and waiting LoRA adapters", gauge,
                              info=lora_info).values():
            metric.set(time.time())

    def update(self, stats: EngineStats) -> None:
        """Counters and histograms first, the gauges last: a scrape taken while this runs and
        seeing the new gauges (say, nothing running) then also sees every count of the report
        that set them. With the gauges first, a scrape in between saw an idle engine whose last
        step's counts were missing."""
        lane = str(self._first_lane + stats.lane)
        for counter, value in ((self.prompt_tokens, stats.prompt_tokens),
                               (self.generation_tokens, stats.generation_tokens),
                               (self.preemptions, stats.preemptions),
                               (self.cache_queries, stats.prefix_cache_queries),
                               (self.cache_hits, stats.prefix_cache_hits)):
            if value:
                counter[(lane, "")].increment(value)
        if stats.step_mode is not None:
            self.steps[(lane, stats.step_mode.value)].increment(1)
        if stats.step_tokens is not None:
            self.iteration_tokens[(lane, "")].observe(stats.step_tokens)
        for counter, value in ((self.eager_steps, stats.eager_steps),
                               (self.trace_replays, stats.traced_steps),
                               (self.decode_drains, stats.decode_drains),
                               (self.host_sampling, stats.host_sampling_steps),
                               (self.grammar_cache_hits, stats.grammar_cache_hits),
                               (self.mm_cache_queries, stats.mm_cache_queries),
                               (self.mm_cache_hits, stats.mm_cache_hits)):
            if value:
                counter[(lane, "")].increment(value)
        for compiled in stats.grammar_compile_seconds:
            self.grammar_compile[(lane, "")].observe(compiled)
        for seconds in stats.inter_token_latencies:
            self.tpot[(lane, "")].observe(seconds)
            self.itl[(lane, "")].observe(seconds)
        for done in stats.finished:
            self._finished(lane, done)
        # The queue gauges last: a scrape that sees this report's running and waiting (0 once idle) sees
        # the rest of it too (a scrape between the sets saw running 0 beside the last step's KV usage).
        self.kv_usage[(lane, "")].set(stats.kv_cache_usage)
        self.parked[(lane, "")].set(stats.num_parked)
        self.waiting[(lane, "")].set(stats.num_waiting)
        self.running[(lane, "")].set(stats.num_running)

    def _finished(self, lane: str, done: FinishedRequestStats) -> None:
        if done.reason is FinishReason.ERROR:
            self.failures[(lane, "")].increment(1)
        else:
            self.success[(lane, done.reason.value)].increment(1)
        self.e2e[(lane, "")].observe(done.e2e_s)
        self.request_prompt[(lane, "")].observe(done.num_prompt_tokens)
        self.request_generation[(lane, "")].observe(done.num_generation_tokens)
        for histogram, seconds in ((self.ttft, done.ttft_s), (self.queue, done.queue_time_s),
                                   (self.request_tpot, done.time_per_output_token_s),
                                   (self.prefill_time, done.prefill_time_s),
                                   (self.decode_time, done.decode_time_s),
                                   (self.inference_time, done.inference_time_s)):
            if seconds is not None:
                histogram[(lane, "")].observe(seconds)

    def engine_failed(self, lane: int = 0) -> None:
        self.engine_failures[(str(self._first_lane + lane), "")].increment(1)
