"""Histogram buckets, vLLM's, so its dashboards and alerts read ours unchanged; they reach requests
of hours (7680 s) and prompts of the whole context."""

from __future__ import annotations

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
INTER_TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                       10.0, 20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


def token_count_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's build_1_2_5_buckets)."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return out
            out.append(float(value))
        exponent += 1


def iteration_token_buckets(max_num_batched_tokens: int) -> list[float]:
    """1, 8, 16, 32, ... powers of two up to the first that holds a full step's tokens."""
    out = [1.0, 8.0]
    while out[-1] < max_num_batched_tokens:
        out.append(out[-1] * 2)
    return out
