"""Prometheus metrics on Triton's metrics port, through pb_utils.MetricFamily.

vLLM's names, labelled by `model` and `lane`, plus this design's own (`tt:` prefix). Rules:
every family exists from startup at 0; a counter has exactly one series per model and lane (and
its own label, such as `finished_reason` or `mode`), with no aggregate series; the EOS token
counts as a generated token; cached blocks that no request references count as free in
`vllm:kv_cache_usage_perc`. Only the response thread calls `update` (pb_utils metric updates
from several threads crashed tritonserver 2.51).
"""

from __future__ import annotations

from typing import Any

import triton_python_backend_utils as pb_utils

from tt_backend.contract.modes import FinishReason, StepMode
from tt_backend.engine.stats import EngineStats

LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0]
SUCCESS_REASONS = tuple(reason.value for reason in FinishReason if reason is not FinishReason.ERROR)


class EngineMetrics:
    def __init__(self, model_name: str, num_lanes: int = 1) -> None:
        self._families: list[Any] = []  # kept alive for as long as their metrics
        counter, gauge, histogram = (pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE,
                                     pb_utils.MetricFamily.HISTOGRAM)
        lanes = [str(i) for i in range(num_lanes)]

        def metrics(name: str, description: str, kind: Any, extra: dict[str, list[str]] | None = None,
                    buckets: list[float] | None = None) -> dict[tuple[str, str], Any]:
            family = pb_utils.MetricFamily(name=name, description=description, kind=kind)
            self._families.append(family)
            out = {}
            for lane in lanes:
                (key, values), = (extra or {"": [""]}).items()
                for value in values:
                    labels = {"model": model_name, "lane": lane, **({key: value} if key else {})}
                    kwargs = {"buckets": buckets} if buckets is not None else {}
                    out[(lane, value)] = family.Metric(labels=labels, **kwargs)
            return out

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
                            buckets=LATENCY_BUCKETS)
        self.tpot = metrics("vllm:time_per_output_token_seconds",
                            "Mean interval between a request's tokens", histogram, buckets=LATENCY_BUCKETS)
        self.e2e = metrics("vllm:e2e_request_latency_seconds", "Arrival to finish", histogram,
                           buckets=LATENCY_BUCKETS)
        self.queue = metrics("vllm:request_queue_time_seconds", "Arrival to first admission", histogram,
                             buckets=LATENCY_BUCKETS)
        self.steps = metrics("tt:steps_total", "Engine steps by mode", counter,
                             {"mode": [mode.value for mode in StepMode]})
        self.eager_steps = metrics("tt:eager_steps_total", "Steps executed eagerly", counter)
        self.trace_replays = metrics("tt:trace_replays_total", "Steps executed by replaying a trace",
                                     counter)
        self.host_sampling = metrics("tt:host_sampling_fallbacks_total",
                                     "Steps whose batch sampled on the host", counter)
        self.decode_drains = metrics("tt:async_decode_drains_total",
                                     "Drains of the async decode pipeline", counter)
        self.engine_failures = metrics("tt:engine_failures_total", "Engine thread failures", counter)
        self.parked = metrics("tt:num_requests_parked", "Waiting requests parked while their grammar "
                              "compiles (counted in vllm:num_requests_waiting too)", gauge)
        self.grammar_compile = metrics("tt:grammar_compile_seconds", "Structured-output grammar compile "
                                       "time", histogram, buckets=LATENCY_BUCKETS)
        self.grammar_cache_hits = metrics("tt:grammar_cache_hits_total", "Structured-output requests "
                                          "whose grammar was compiled already", counter)

    def update(self, stats: EngineStats) -> None:
        """Counters and histograms first, the gauges last: a scrape taken while this runs and
        seeing the new gauges (say, nothing running) then also sees every count of the report
        that set them. With the gauges first, a scrape in between saw an idle engine whose last
        step's counts were missing."""
        lane = str(stats.lane)
        for counter, value in ((self.prompt_tokens, stats.prompt_tokens),
                               (self.generation_tokens, stats.generation_tokens),
                               (self.preemptions, stats.preemptions),
                               (self.cache_queries, stats.prefix_cache_queries),
                               (self.cache_hits, stats.prefix_cache_hits)):
            if value:
                counter[(lane, "")].increment(value)
        if stats.step_mode is not None:
            self.steps[(lane, stats.step_mode.value)].increment(1)
        for counter, value in ((self.eager_steps, stats.eager_steps),
                               (self.trace_replays, stats.traced_steps),
                               (self.decode_drains, stats.decode_drains),
                               (self.host_sampling, stats.host_sampling_steps),
                               (self.grammar_cache_hits, stats.grammar_cache_hits)):
            if value:
                counter[(lane, "")].increment(value)
        for compiled in stats.grammar_compile_seconds:
            self.grammar_compile[(lane, "")].observe(compiled)
        for done in stats.finished:
            if done.reason is FinishReason.ERROR:
                self.failures[(lane, "")].increment(1)
            else:
                self.success[(lane, done.reason.value)].increment(1)
            self.e2e[(lane, "")].observe(done.e2e_s)
            for histogram, seconds in ((self.ttft, done.ttft_s), (self.queue, done.queue_time_s),
                                       (self.tpot, done.time_per_output_token_s)):
                if seconds is not None:
                    histogram[(lane, "")].observe(seconds)
        self.running[(lane, "")].set(stats.num_running)
        self.waiting[(lane, "")].set(stats.num_waiting)
        self.parked[(lane, "")].set(stats.num_parked)
        self.kv_usage[(lane, "")].set(stats.kv_cache_usage)

    def engine_failed(self, lane: int = 0) -> None:
        self.engine_failures[(str(lane), "")].increment(1)

