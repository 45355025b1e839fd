"""`/metrics` on the front's port: tritonserver's Prometheus text, fetched on each scrape.

Tools built for vLLM (its router, aiperf, dashboards) scrape `<server>/metrics` on the API port; the
engine's `vllm:*` series live on tritonserver's metrics port. Passing them through per scrape keeps
one source of truth (no second registry to drift) and costs one loopback request per scrape.
"""

from __future__ import annotations

import asyncio

import httpx

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class MetricsUnavailable(Exception):
    """tritonserver's metrics could not be fetched; the message says why (the front answers 503)."""


def check_url(url: str) -> None:
    """Refuses, at start-up, a `--triton-metrics-url` that no scrape could fetch."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"--triton-metrics-url {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"--triton-metrics-url {url!r}: expected http(s)://host:port/metrics")


class TritonMetrics:
    """Fetches `url` per scrape, within `timeout_s` from connecting to the last byte (a scrape must
    fail fast, well inside Prometheus' own 10 s). Proxies from the environment are not used: the URL
    is tritonserver's, normally next door, and an HTTP_PROXY meant for the internet must not carry it."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._client = httpx.AsyncClient(timeout=timeout_s, trust_env=False, follow_redirects=False)

    async def scrape(self) -> bytes:
        """tritonserver's metrics text, as it sent it."""
        try:
            async with asyncio.timeout(self.timeout_s):
                reply = await self._client.get(self.url)
        except (TimeoutError, httpx.TimeoutException):
            raise MetricsUnavailable(f"tritonserver's metrics at {self.url} did not answer within "
                                     f"{self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise MetricsUnavailable(f"tritonserver's metrics at {self.url} could not be fetched: "
                                     f"{type(exc).__name__}: {exc}") from None
        if reply.status_code != 200:
            raise MetricsUnavailable(f"tritonserver's metrics at {self.url} answered HTTP "
                                     f"{reply.status_code}")
        return reply.content

    async def aclose(self) -> None:
        await self._client.aclose()
