"""The tool-call and reasoning parsers over streams cut every way: character by character, in
chunks of a few characters, and whole. Whatever the cut, the streamed deltas add up to the
non-streamed answer, tags split across chunks are found, and arguments arrive in pieces."""

from __future__ import annotations

import asyncio
import json
import string
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tt_backend.openai_front.events import collect, events
from tt_backend.openai_front.output import OutputParsing, Reading, output_parsing
from tt_backend.openai_front.reasoning import ReasoningParser
from tt_backend.openai_front.requests import GenerateCall
from tt_backend.openai_front.responses import Envelope
from tt_backend.openai_front.tool_calls import Tools
from tt_backend.openai_front.tool_parsers import FORMATS, Named, Required, ToolFormat, choose_format
from tt_backend.openai_front.tool_parsers.partial_json import PartialJson
from tt_backend.openai_front.triton_stream import Delta

WEATHER = {"city": "Paris", "days": [1, 2], "metric": True, "note": 'say "hi"\\ é'}
CUTS = (1, 3, 7, 10_000)
"""Chunk sizes: character by character, small chunks, whole."""


def read(fmt: ToolFormat | None, text: str, step: int, reasoning: bool = False) -> dict[str, Any]:
    """The output `text` fed `step` characters at a time: what the stream sends, added up."""
    reader = Reading(fmt, reasoning).reader()
    pieces = [reader.feed(text[i:i + step]) for i in range(0, len(text), step)] + [reader.finish()]
    calls: dict[int, dict[str, Any]] = {}
    fragments = 0
    for delta in (d for p in pieces for d in p.tool_calls):
        if "id" in delta:
            assert delta["index"] == len(calls) and delta["type"] == "function"
            calls[delta["index"]] = {"id": delta["id"], "type": "function",
                                     "function": {"name": delta["function"]["name"], "arguments": ""}}
        calls[delta["index"]]["function"]["arguments"] += delta["function"]["arguments"]
        fragments += bool(delta["function"]["arguments"])
    assert list(calls.values()) == reader.tool_calls  # the deltas add up to the non-streamed calls
    return {"reasoning": "".join(p.reasoning for p in pieces), "content": "".join(p.content for p in pieces),
            "calls": [(c["function"]["name"], c["function"]["arguments"]) for c in calls.values()],
            "fragments": fragments, "first": pieces[0]}


def same_every_cut(fmt: ToolFormat | None, text: str, reasoning: bool = False) -> dict[str, Any]:
    results = [read(fmt, text, step, reasoning) for step in CUTS]
    for result in results[1:]:
        assert {k: result[k] for k in ("reasoning", "content", "calls")} == {
            k: results[-1][k] for k in ("reasoning", "content", "calls")}
    assert results[0]["fragments"] > 1 or not results[0]["calls"]  # char by char: arguments in pieces
    return results[-1]


def args(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def test_hermes_content_then_parallel_calls() -> None:
    text = ('Let me check. <tool_call>\n{"name": "get_weather", "arguments": ' + json.dumps(WEATHER)
            + '}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    result = same_every_cut(FORMATS["hermes"](), text)
    assert result["content"] == "Let me check. "
    assert result["calls"] == [("get_weather", args(WEATHER)), ("get_time", "{}")]


def test_hermes_text_without_a_call_streams_and_a_broken_call_is_content() -> None:
    plain = read(FORMATS["hermes"](), "a <b and <tool_ca", 3)
    assert plain["content"] == "a <b and <tool_ca" and plain["calls"] == []
    assert plain["first"].content == "a "  # sent at once, but for a "<" that may begin a call
    for text in ("<tool_call>{not json</tool_call>", "<tool_call>[1, 2]</tool_call>", "x <tool_call>"):
        assert same_every_cut(FORMATS["hermes"](), text) == {**read(FORMATS["hermes"](), text, 10_000),
                                                           "content": text}


def test_a_call_cut_short_keeps_what_was_streamed() -> None:
    result = same_every_cut(FORMATS["hermes"](), '<tool_call>{"name": "f", "arguments": {"a": "xy')
    assert result["calls"] == [("f", '{"a": "xy')] and result["content"] == ""


def test_llama3_json_with_and_without_python_tag() -> None:
    one = same_every_cut(FORMATS["llama3_json"](),
                         '{"name": "get_weather", "parameters": ' + json.dumps(WEATHER) + "}")
    assert one["calls"] == [("get_weather", args(WEATHER))] and one["content"] == ""
    two = same_every_cut(FORMATS["llama3_json"](), '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; '
                         '{"name": "b", "arguments": {"y": [null]}}')
    assert two["calls"] == [("a", '{"x": 1}'), ("b", '{"y": [null]}')]
    prose = read(FORMATS["llama3_json"](), "The weather is {sunny}.", 1)
    assert prose["content"] == "The weather is {sunny}." and prose["calls"] == []
    assert prose["first"].content == "T"  # decided at the first letter: no call can follow
    assert same_every_cut(FORMATS["llama3_json"](), '{"answer": 42}')["content"] == '{"answer": 42}'


def test_mistral_list_and_v11_forms_with_nine_letter_ids() -> None:
    listed = same_every_cut(FORMATS["mistral"](), '[TOOL_CALLS] [{"name": "get_weather", "arguments": '
                            + json.dumps(WEATHER) + '}, {"name": "get_time", "arguments": {"zone": "UTC"}}]')
    assert listed["calls"] == [("get_weather", args(WEATHER)), ("get_time", '{"zone": "UTC"}')]
    v11 = same_every_cut(FORMATS["mistral"](), 'Sure.[TOOL_CALLS]get_weather[ARGS]' + json.dumps(WEATHER)
                         + '[TOOL_CALLS]get_time{"zone": "UTC"}')
    assert v11["content"] == "Sure." and v11["calls"] == listed["calls"]
    reader = Reading(FORMATS["mistral"](), False).reader()
    reader.feed('[TOOL_CALLS][{"name": "f", "arguments": {}}]')
    call_id = reader.tool_calls[0]["id"]
    assert len(call_id) == 9 and set(call_id) <= set(string.ascii_letters + string.digits)


def test_pythonic_calls_become_json_arguments() -> None:
    text = ('[get_weather(city="Par\\"is", note=\'it\\\'s\', days=[1, -2], deep={"k": None}, metric=True), '
            "get_time()]")
    result = same_every_cut(FORMATS["pythonic"](), text)
    assert result["calls"] == [
        ("get_weather", args({"city": 'Par"is', "note": "it's", "days": [1, -2], "deep": {"k": None},
                              "metric": True})), ("get_time", "{}")]
    assert same_every_cut(FORMATS["pythonic"](), "[1] is a footnote")["content"] == "[1] is a footnote"


def test_required_and_named_read_the_constrained_output() -> None:
    required = same_every_cut(Required(), '[{"name": "get_time", "parameters": {}}, '
                              '{"name": "get_weather", "parameters": ' + json.dumps(WEATHER) + "}]")
    assert required["calls"] == [("get_time", "{}"), ("get_weather", args(WEATHER))]
    named = same_every_cut(Named("get_weather"), json.dumps(WEATHER, indent=2))
    assert named["calls"] == [("get_weather", args(WEATHER))]


@pytest.mark.parametrize(("text", "reasoning", "content"), [
    ("<think>In France.</think>The capital is Paris.", "In France.", "The capital is Paris."),
    ("\n<think>\nhm\n</think>\n\nParis.", "\nhm\n", "\n\nParis."),
    ("The template opened it.</think>Paris.", "The template opened it.", "Paris."),  # deepseek_r1's rule
    ("<think>cut short while thinking", "cut short while thinking", ""),
    ("No tags at all.", "No tags at all.", ""),  # vLLM: no </think>, all reasoning
    ("<thi", "<thi", ""),
])
def test_reasoning_split_every_cut(text: str, reasoning: str, content: str) -> None:
    result = same_every_cut(None, text, reasoning=True)
    assert (result["reasoning"], result["content"]) == (reasoning, content)


def test_reasoning_then_tool_calls() -> None:
    text = ('<think>I need the weather.</think>\n<tool_call>{"name": "get_weather", '
            '"arguments": {"city": "Oslo"}}')
    result = same_every_cut(FORMATS["hermes"](), text, reasoning=True)
    assert (result["reasoning"], result["content"]) == ("I need the weather.", "\n")
    assert result["calls"] == [("get_weather", '{"city": "Oslo"}')]


def test_qwen3_without_thinking_is_all_content() -> None:
    call = GenerateCall((1,), {}, False, False, None)
    for name in ("qwen3", "deepseek_r1"):
        parsing = OutputParsing(reasoning=ReasoningParser(name))
        assert parsing.prepare(call, {})[1] == Reading(None, True)
        off = parsing.prepare(call, {"chat_template_kwargs": {"enable_thinking": False}})[1]
        assert off == (None if name == "qwen3" else Reading(None, True))
    with pytest.raises(ValueError, match="reasoning parser 'r1'"):
        ReasoningParser("r1")  # type: ignore[arg-type]


def test_the_call_reads_its_tool_choice_format_and_keeps_special_tokens() -> None:
    hermes = FORMATS["hermes"]()
    parsing = OutputParsing(hermes, keep_special_tokens=True)
    weather = {"name": "get_weather", "parameters": {"type": "object"}}
    auto = GenerateCall((1,), {}, False, False, None, tools=Tools("auto", (weather,)))
    prepared, reading = parsing.prepare(auto, {})
    assert reading == Reading(hermes, False) and prepared.sampling == {"skip_special_tokens": False}
    assert parsing.prepare(auto.__class__((1,), {"skip_special_tokens": True}, False, False, None,
                                          tools=auto.tools), {})[0].sampling == {"skip_special_tokens": True}
    named = GenerateCall((1,), {}, False, False, None, tools=Tools("named", (weather,), "get_weather"))
    prepared, reading = parsing.prepare(named, {})
    assert prepared.sampling == {} and reading is not None and reading.finish_reason == "stop"
    assert isinstance(reading.tools, Named) and reading.tools.function == "get_weather"
    assert OutputParsing().prepare(auto, {}) == (auto, None)  # no parser: calls stay content


@pytest.mark.parametrize(("template", "chosen"), [
    ("{% for t in tools %}<tool_call>{% endfor %}", "hermes"),
    ("{{ tools }}[TOOL_CALLS]", "mistral"),
    ("{{ tools }}<|python_tag|>", "llama3_json"),
    ('{{ tools }} {"name": function name, "parameters": dictionary of argument name and its value}',
     "llama3_json"),
    ("{{ tools }} [func_name1(params_name1=params_value1)]", "pythonic"),
    ("{{ messages }}", "hermes"),  # takes no tools: they go in the system message, in Hermes' format
    ("{{ tools }} <call>", None),
])
def test_auto_reads_the_format_from_the_chat_template(template: str, chosen: str | None) -> None:
    fmt, why = choose_format("auto", template, "tools" in template)
    assert (fmt.name if fmt is not None else None) == chosen and why.split(" ")[0] == (chosen or "off")
    assert choose_format("pythonic", template, True)[0].__class__ is FORMATS["pythonic"]
    assert choose_format("none", template, True)[0] is None
    with pytest.raises(ValueError, match="--tool-call-parser 'xml'"):
        choose_format("xml", template, True)


def test_output_parsing_keeps_special_markers_and_says_why() -> None:
    parsing, line = output_parsing("auto", "qwen3", "{{ tools }}[TOOL_CALLS]", {"[TOOL_CALLS]", "</s>"})
    assert parsing.keep_special_tokens and parsing.reasoning == ReasoningParser("qwen3")
    assert line == ("tool calls: mistral (auto: the chat template holds '[TOOL_CALLS]') (special tokens "
                    "kept); reasoning: qwen3")


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False,
                    allow_infinity=False) | st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                 max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(st.lists(JSON, max_size=3) | st.dictionaries(st.text(max_size=4), JSON, max_size=3), st.booleans())
def test_partial_json_text_only_grows(value: Any, indent: bool) -> None:
    """At every cut of any JSON text (of an object or a list, as calls are), what PartialJson calls
    certain is a prefix of the whole."""
    raw = json.dumps(value, indent=2 if indent else None, ensure_ascii=bool(indent))
    whole = json.dumps(json.loads(raw), ensure_ascii=False)
    seen = ""
    for cut in range(1, len(raw) + 1):
        partial = PartialJson.read(raw[:cut])
        text = (partial.text() if partial is not None else None) or ""
        assert whole.startswith(text) and text.startswith(seen), (raw[:cut], text)
        seen = text
    assert seen == whole


def test_the_front_streams_calls_as_openai_deltas_and_answers_the_same_whole() -> None:
    """events() and collect() over one output: the first delta of a call holds its id, type and
    name; its arguments follow in pieces; reasoning streams as reasoning_content; the finish reason
    is tool_calls; the non-streamed message holds the same."""
    text = '<think>Weather needed.</think><tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
    parts = [text[i:i + 4] for i in range(0, len(text), 4)]
    deltas = [Delta(p, 1, 9 if i == 0 else None, "stop" if i == len(parts) - 1 else None)
              for i, p in enumerate(parts)]
    tools = Tools("auto", ({"name": "get_weather", "parameters": {"type": "object"}},))
    call = GenerateCall((1,), {}, True, False, None, tools=tools)
    reading = OutputParsing(FORMATS["hermes"](), ReasoningParser("deepseek_r1")).prepare(call, {})[1]

    async def rest() -> AsyncIterator[Delta]:
        for delta in deltas[1:]:
            yield delta

    async def run() -> tuple[list[str], Any]:
        envelope = Envelope("m", True)
        sent = [line async for line in events(envelope, call, "", [deltas[0]], [rest()], reading)]
        choice = await collect(True, call, deltas[0], rest(), 0, reading)
        return sent, envelope.completion([choice])

    sent, whole = asyncio.run(run())
    assert sent[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(line.removeprefix("data: ")) for line in sent[:-1]]
    choices = [c["choices"][0] for c in chunks]
    assert choices[0]["delta"]["role"] == "assistant"
    assert "".join(c["delta"].get("reasoning_content", "") for c in choices) == "Weather needed."
    assert "".join(c["delta"].get("content") or "" for c in choices) == ""
    calls = [d for c in choices for d in c["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["type"] == "function"
    assert calls[0]["id"].startswith("call_") and {d["index"] for d in calls} == {0}
    assert all(set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in calls[1:])
    arguments = "".join(d["function"]["arguments"] for d in calls)
    assert arguments == '{"city": "Paris"}' and len(calls) > 2
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["tool_calls"]
    message = whole["choices"][0]["message"]
    assert message["reasoning_content"] == "Weather needed." and message["content"] is None
    assert [c["function"] for c in message["tool_calls"]] == [{"name": "get_weather", "arguments": arguments}]
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
