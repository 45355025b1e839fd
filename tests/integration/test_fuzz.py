"""Through tritonserver and the OpenAI front: over 2,000 distinct fuzzed requests (tests/fuzz:
hypothesis, derandomized, about 40% valid) sent 16 at a time to tt_llm, the ensemble and the
front, beside three greedy bystander streams. Every request ends with exactly one final response,
a valid result or a client error naming its hostile field; the bystanders give the tokens they
gave alone; afterwards the server is ready, was never restarted, and holds no request and no KV
block."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fuzz.runner import FuzzRun, fuzz
from tests.fuzz.server_watch import Endpoints
from tests.integration.conftest import Server

pytestmark = pytest.mark.integration

EXAMPLES = 2400
"""Requests drawn; about 300 of them are drawn twice (and sent once)."""
BYSTANDER_PROMPTS = ("Count from one to twenty.", "Describe the sea in one sentence.", "Name three colours.")


def test_no_request_harms_another(server: Server, chat_ids: Any, tmp_path: Path) -> None:
    assert server.openai is not None
    endpoints = Endpoints(server.grpc, server.http, server.metrics, server.openai, server.log_text)
    with FuzzRun(endpoints, [chat_ids(p) for p in BYSTANDER_PROMPTS]) as run:
        fuzz(run, EXAMPLES)
    report = run.report
    full = tmp_path / "fuzz_report.txt"
    report.write(full)
    print(report.summary())
    assert report.sent >= 2000 and 0.3 < report.valid / report.sent < 0.5, report.summary()
    assert report.bystander_runs >= 2 * len(BYSTANDER_PROMPTS), report.summary()  # streams all through
    harmless = report.ok
    assert harmless, f"{report.text()}\n(every violation and client error: {full})"
