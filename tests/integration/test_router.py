"""Two servers behind vLLM's router (a real `vllm-router`, cache-aware policy), as
`make serve-cluster N=2` runs them: requests with distinct prefixes spread over both servers,
requests sharing a long prefix follow it to the server that holds it and hit its prefix cache
(exact `vllm:prefix_cache_hits_total`), and a server killed mid-run is routed around with no
request left hanging. The tests share one cluster and run in order; the last one kills a server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.integration.clients import idle_scrape, scrape, series, wait_for_metrics
from tests.integration.cluster import RoutedCluster, start_cluster, stop_cluster
from tests.integration.test_scheduling import document

pytestmark = pytest.mark.integration

MODEL = "SmolLM2-135M-Instruct"
BLOCK = 16
TIMEOUT_S = 120
TOKENS = 96
"""Tokens of each stream in the killed-server test: still running when the server is killed."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoutedCluster]:
    proc, cluster = start_cluster(tmp_path_factory.mktemp("cluster"), 2, "cache_aware", "dtype=float32",
                                  "max_num_seqs=4")
    try:
        yield cluster
    finally:
        stop_cluster(proc)


@pytest.fixture(scope="module")
def render(tokenizer: Any) -> Callable[[str], list[int]]:
    """The prompt ids the OpenAI front sends for one user message."""
    def ids(content: str) -> list[int]:
        out = tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                            add_generation_prompt=True, tokenize=True)
        return list(out["input_ids"] if hasattr(out, "keys") else out)
    return ids


@dataclass(frozen=True)
class Reply:
    status: int
    finish_reason: str | None
    """None when the response ended without one (a stream cut short)."""
    completion_tokens: int


class Stream:
    """A streamed chat completion read one event at a time, so a test can act while it runs."""

    def __init__(self, client: httpx.Client, url: str, content: str, max_tokens: int) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": True,
                "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        self._cm = client.stream("POST", f"{url}/chat/completions", json=body)
        self._response = self._cm.__enter__()
        self._lines = self._response.iter_lines()
        self.finish_reason: str | None = None
        self.completion_tokens = 0

    def first_event(self) -> None:
        """Returns once the first token has streamed: the request is in a server's engine."""
        assert self._response.status_code == 200
        self._next()

    def _next(self) -> bool:
        for line in self._lines:
            if line == "data: [DONE]":
                return False
            if line.startswith("data: "):
                event = json.loads(line[len("data: "):])
                for choice in event.get("choices", []):
                    self.finish_reason = choice.get("finish_reason") or self.finish_reason
                if event.get("usage"):
                    self.completion_tokens = event["usage"]["completion_tokens"]
                return True
        return False

    def finish(self) -> Reply:
        try:
            while self._next():
                pass
        except httpx.HTTPError:  # the connection broke: the reply ends here
            pass
        finally:
            self._cm.__exit__(None, None, None)
        return Reply(self._response.status_code, self.finish_reason, self.completion_tokens)


def chat(client: httpx.Client, url: str, content: str, max_tokens: int) -> Reply:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}
    r = client.post(f"{url}/chat/completions", json=body)
    if r.status_code != 200:
        return Reply(r.status_code, None, 0)
    data = r.json()
    return Reply(200, data["choices"][0]["finish_reason"], data["usage"]["completion_tokens"])


def chat_concurrently(url: str, contents: list[str], max_tokens: int) -> list[Reply]:
    """All at once, so each is routed while the others are in flight."""
    with httpx.Client(timeout=TIMEOUT_S) as client, ThreadPoolExecutor(len(contents)) as pool:
        return list(pool.map(lambda content: chat(client, url, content, max_tokens), contents))


def test_distinct_prefixes_spread_and_shared_prefixes_stick(cluster: RoutedCluster,
                                                            render: Callable[[str], list[int]]) -> None:
    leaders = [document(40, seed=101 * (k + 1)) + " Reply with one word." for k in range(4)]
    metrics = cluster.metrics
    before = [idle_scrape(m) for m in metrics]
    # Routed while the others are in flight, distinct prefixes go to the less loaded server.
    assert chat_concurrently(cluster.router, leaders, 4) == [Reply(200, "length", 4)] * 4
    after = [idle_scrape(m) for m in metrics]
    key = series("vllm:request_success_total", finished_reason="length")
    served = [after[i][key] - before[i].get(key, 0) for i in (0, 1)]
    assert sum(served) == 4 and min(served) >= 1, served
    # One at a time, each follower goes to the server that holds its leader's prefix and hits it:
    # the blocks it shares with its leader (more than the chat template's, which every server has).
    for leader in leaders:
        follower = leader.removesuffix(" Reply with one word.") + " Now reply with two words."
        before = [idle_scrape(m) for m in metrics]
        with httpx.Client(timeout=TIMEOUT_S) as client:
            assert chat(client, cluster.router, follower, 4) == Reply(200, "length", 4)
        after = [idle_scrape(m) for m in metrics]
        took = [i for i in (0, 1) if after[i][key] > before[i].get(key, 0)]
        assert len(took) == 1
        hits_key = series("vllm:prefix_cache_hits_total")
        hits = after[took[0]][hits_key] - before[took[0]].get(hits_key, 0)
        want = min(_common_prefix(render(follower), render(leader)) // BLOCK,
                   (len(render(follower)) - 1) // BLOCK) * BLOCK
        assert want >= 20 * BLOCK and hits == want, (took, hits, want)


def test_a_server_killed_mid_run_is_routed_around(cluster: RoutedCluster) -> None:
    contents = [document(30, seed=77 * (k + 1)) for k in range(4)]
    metrics = cluster.metrics
    before = idle_scrape(metrics[0])
    clients = [httpx.Client(timeout=TIMEOUT_S) for _ in contents]
    with httpx.Client(timeout=TIMEOUT_S) as client, ThreadPoolExecutor(len(contents)) as pool:
        # Opened at once (each returns with its first token), so they spread over both servers.
        streams = list(pool.map(lambda c, text: Stream(c, cluster.router, text, TOKENS), clients, contents))
        for stream in streams:
            stream.first_event()
        running = _running_once_reported(metrics, len(streams))
        assert sum(running) == len(streams) and running[1] >= 1, running  # spread over both servers
        cluster.kill_server(1)
        # The streams on the survivor complete; those on the killed server end, cut short.
        replies = [stream.finish() for stream in streams]
        for c in clients:
            c.close()
        complete = [r for r in replies if r == Reply(200, "length", TOKENS)]
        assert sorted(replies, key=lambda r: r.finish_reason or "") == (
            [Reply(200, None, 0)] * (4 - len(complete)) + complete)
        assert len(complete) == 4 - running[1]
        # Every later request is served by the survivor, none hangs: follow-ups of every prefix
        # (the router last saw some of them on the killed server) and a new one.
        later = [content + " Again." for content in contents] + [document(20, seed=999)]
        assert [chat(client, cluster.router, content, 4) for content in later] == (
            [Reply(200, "length", 4)] * len(later))
    key = series("vllm:request_success_total", finished_reason="length")
    want = {key: len(complete) + len(later)}
    assert wait_for_metrics(metrics[0], want, before) == want


def _running_once_reported(metrics: list[str], streams: int, timeout: float = 10) -> list[float]:
    """Each server's running requests, scraped until the two account for every open stream. A client
    sees a step's tokens before the engine's report of that step sets the gauge, so a scrape taken
    as the first tokens arrive can still count a stream as waiting, or on neither server."""
    deadline = time.monotonic() + timeout
    while True:
        running = [scrape(m).get(series("vllm:num_requests_running"), 0.0) for m in metrics]
        if sum(running) == streams or time.monotonic() > deadline:
            return running
        time.sleep(0.02)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
