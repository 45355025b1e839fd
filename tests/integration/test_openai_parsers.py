"""The front's tool-call parsers (--tool-call-parser) and reasoning parsers (--reasoning-parser)
over the session's tritonserver, with the `openai` SDK. The default model (SmolLM2-135M) is made to
write each format with a regex (structured outputs); the SDK gets the exact calls, streamed in
more than one arguments fragment, and the same calls whole; a forced `<think>...</think>answer`
comes back as reasoning_content and content, streamed and not."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from openai import OpenAI

from tests.integration.conftest import ROOT, Server, free_ports

pytestmark = pytest.mark.integration
MODEL = "SmolLM2-135M-Instruct"
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {key: {"type": "string", "maxLength": 12}}, "required": [key],
    "additionalProperties": False}}} for name, key in (("get_weather", "city"), ("get_time", "zone"))]
FRONTS = {
    "llama3_json": ("--tool-call-parser=llama3_json",),
    "mistral": ("--tool-call-parser=mistral",),
    "pythonic": ("--tool-call-parser=pythonic",),
    "deepseek_r1": ("--tool-call-parser=hermes", "--reasoning-parser=deepseek_r1"),
    "qwen3": ("--tool-call-parser=llama3_json", "--reasoning-parser=qwen3"),
}
"""Fronts started over the one session server, beside its own (`hermes`: auto's choice for
SmolLM2's template, which takes no tools)."""


def exactly(text: str) -> str:
    """A regex matching `text` alone (only the metacharacters escaped, as the grammar compiler takes them)."""
    return re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\1", text).replace("\n", "\\n")


def start_front(server: Server, log: Path, flags: tuple[str, ...]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_ports(1)[0]
    args = [sys.executable, "-m", "tt_backend.openai_front", "--host", "127.0.0.1", "--port", str(port),
            "--triton-url", server.grpc, "--max-model-len", "8192", *flags]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def fronts(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, OpenAI]]:
    folder = Path(tmp_path_factory.mktemp("parser_fronts"))
    started = {name: (*start_front(server, folder / f"{name}.log", flags), folder / f"{name}.log")
               for name, flags in FRONTS.items()}
    try:
        deadline = time.monotonic() + 120
        for proc, url, log in started.values():
            while True:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                with contextlib.suppress(requests.RequestException):
                    if requests.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                time.sleep(0.3)
        urls = {"hermes": server.openai, **{name: f"{url}/v1" for name, (_, url, _) in started.items()}}
        yield {name: OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300)
               for name, url in urls.items()}
    finally:
        for proc, _, _ in started.values():
            proc.terminate()
            proc.wait(timeout=30)


def forced(client: OpenAI, text: str | None, stream: bool, **extra: Any) -> Any:
    """A chat completion with the tools, its output forced to `text` (None: free)."""
    body = {**({"structured_outputs": {"regex": exactly(text)}} if text is not None else {}),
            **extra.pop("extra_body", {})}
    return client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS,  # type: ignore[arg-type]
                                          temperature=0, max_tokens=120, stream=stream, extra_body=body,
                                          **extra)


def streamed(client: OpenAI, text: str | None, **extra: Any) -> dict[str, Any]:
    """A forced output streamed: its content, reasoning, calls added up, and how they came."""
    chunks = list(forced(client, text, True, **extra))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls: dict[int, dict[str, Any]] = {}
    fragments = 0
    for call in (t for d in deltas for t in (d.tool_calls or [])):
        if call.id is not None:
            assert call.index == len(calls) and call.type == "function" and call.function is not None
            calls[call.index] = {"id": call.id, "name": call.function.name, "arguments": ""}
        assert call.function is not None
        calls[call.index]["arguments"] += call.function.arguments or ""
        fragments += bool(call.function.arguments)
    return {"content": "".join(d.content or "" for d in deltas),
            "reasoning": "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas),
            "calls": [(c["name"], json.loads(c["arguments"])) for c in calls.values()],
            "fragments": fragments, "finish": [c.choices[0].finish_reason for c in chunks if c.choices][-1]}


def whole(client: OpenAI, text: str, **extra: Any) -> dict[str, Any]:
    choice = forced(client, text, False, **extra).choices[0]
    message = choice.message
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
    reasoning = (message.model_extra or {}).get("reasoning_content") or ""
    return {"content": message.content or "", "reasoning": reasoning, "calls": calls,
            "finish": choice.finish_reason}


PARIS = {"city": "Paris"}
CASES = {
    "hermes": ('Checking. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
               '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>',
               "Checking. ", [("get_weather", PARIS), ("get_time", {"zone": "CET"})]),
    "llama3_json": ('{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [("get_weather", PARIS)]),
    "mistral": ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                '{"name": "get_time", "arguments": {"zone": "CET"}}]', "",
                [("get_weather", PARIS), ("get_time", {"zone": "CET"})]),
    "pythonic": ('[get_weather(city="Paris"), get_time(zone=\'CET\')]', "",
                 [("get_weather", PARIS), ("get_time", {"zone": "CET"})]),
}


@pytest.mark.parametrize("parser", list(CASES))
def test_each_format_comes_back_as_tool_calls_streamed_and_whole(fronts: dict[str, OpenAI],
                                                                 parser: str) -> None:
    text, content, calls = CASES[parser]
    with ThreadPoolExecutor(2) as pool:  # both at once: the engine batches them
        got = list(pool.map(lambda f: f(fronts[parser], text), (streamed, whole)))
    for result in got:
        assert (result["content"], result["calls"], result["finish"]) == (content, calls, "tool_calls")
    assert got[0]["fragments"] > len(calls)  # each call's arguments in more than one piece


def test_auto_chose_hermes_for_a_template_without_tools(server: Server) -> None:
    assert "tool calls: hermes (auto: the chat template takes no tools" in server.log_text()


def test_tool_choice_none_and_a_call_the_parser_does_not_read(fronts: dict[str, OpenAI]) -> None:
    text = CASES["hermes"][0]
    off = whole(fronts["hermes"], text, tool_choice="none")
    assert (off["content"], off["calls"], off["finish"]) == (text, [], "stop")
    other = whole(fronts["mistral"], text)  # the Hermes format, read by the Mistral parser
    assert (other["content"], other["calls"]) == (text, [])


def test_required_and_named_stream_their_arguments(fronts: dict[str, OpenAI]) -> None:
    client = fronts["mistral"]  # any front: the forced modes do not depend on the parser
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", temperature=0,  # type: ignore
        max_tokens=80, stream=True))
    calls = [t for c in chunks if c.choices for t in (c.choices[0].delta.tool_calls or [])]
    assert calls[0].function is not None and calls[0].function.name in ("get_weather", "get_time")
    assert len(calls) > 2 and chunks[-1].choices[0].finish_reason == "tool_calls"
    named = {"type": "function", "function": {"name": "get_time"}}
    result = streamed(client, None, tool_choice=named)
    assert [name for name, _ in result["calls"]] == ["get_time"] and result["finish"] == "stop"
    assert set(result["calls"][0][1]) == {"zone"} and result["fragments"] > 1


@pytest.mark.parametrize("parser", ["deepseek_r1", "qwen3"])
def test_think_goes_to_reasoning_content(fronts: dict[str, OpenAI], parser: str) -> None:
    text = "<think>The user asks about Paris.</think>It is sunny in Paris."
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda f: f(fronts[parser], text), (streamed, whole)))
    for result in got:
        assert (result["reasoning"], result["content"]) == ("The user asks about Paris.",
                                                            "It is sunny in Paris.")
        assert result["calls"] == [] and result["finish"] == "stop"


def test_reasoning_and_a_call_and_qwen3_without_thinking(fronts: dict[str, OpenAI]) -> None:
    text = '<think>Weather: a tool.</think>{"name": "get_weather", "parameters": {"city": "Paris"}}'
    result = streamed(fronts["qwen3"], text)
    assert (result["reasoning"], result["content"], result["calls"]) == (
        "Weather: a tool.", "", [("get_weather", PARIS)])
    plain = "<think>x</think>It is sunny."
    off = whole(fronts["qwen3"], plain, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert (off["reasoning"], off["content"]) == ("", plain)
    no_tag = whole(fronts["deepseek_r1"], "The template opened it.</think>Sunny.")  # deepseek_r1's rule
    assert (no_tag["reasoning"], no_tag["content"]) == ("The template opened it.", "Sunny.")
