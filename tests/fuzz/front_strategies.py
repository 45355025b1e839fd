"""Strategies for OpenAI bodies to the front's /v1/chat/completions and /v1/completions (the fields
of tt_backend/openai_front/requests.py). A body starts valid (max_tokens 1-4, at most one output
constraint); a hostile one then has one or two fields, the messages, the whole body or its
content type made hostile."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.fuzz import sampling_values as sv
from tests.fuzz.json_text import VOCAB, Json, bulk_ints, hostile_value, lit, obj, odd_text, unknown_field
from tests.fuzz.request import BODY, FuzzRequest
from tests.fuzz.triton_strategies import VALID_PERCENT

ST = st.SearchStrategy
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                         "parameters": CITY}}
SAME = ("temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
        "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids",
        "skip_special_tokens", "include_stop_str_in_output", "bad_words", "allowed_token_ids")
IGNORED: dict[str, ST[Json]] = {
    "user": st.just('"u-1"'), "metadata": st.just('{"k": "v"}'), "store": st.just("false"),
    "service_tier": st.just('"auto"'), "parallel_tool_calls": st.just("true"),
    "no_stop_trim": st.just("false"), "include_reasoning": st.just("true")}
CHAT_FIELDS = ("messages", "tools", "tool_choice", "response_format", "logprobs", "top_logprobs",
               "max_completion_tokens", "stream", "stream_options", "n", "model", "max_tokens", "functions",
               "function_call", "suffix", "best_of", "continue_final_message", "separate_reasoning",
               "return_hidden_states", "structured_outputs", *SAME, *IGNORED)
COMPLETION_FIELDS = ("prompt", "echo", "logprobs", "stream", "stream_options", "n", "model", "max_tokens",
                     "suffix", "best_of", "top_logprobs", "structured_outputs", *SAME, *IGNORED)
CONTENT_TYPES = (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                 "application/json; charset=latin-1", "application/xml", "*/*", "APPLICATION/JSON")
ODD_BODIES: tuple[bytes, ...] = (
    b"", b" ", b"null", b"[]", b"[1, 2]", b'"x"', b"NaN", b"{", b"{not json", b"\xff", b'{"model": "\xff"}',
    b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), b'{"a":' * 100000 + b"1" + b"}" * 100000,
    b'{"prompt": "' + b"word " * (1 << 20) + b'"}', b"{}" + b"\x00", b"\x00" * 64,
)


def message(role: str, content: str) -> Json:
    return obj([("role", lit(role)), ("content", lit(content))])


@st.composite
def valid_messages(draw: st.DrawFn) -> Json:
    turns: list[Json] = []
    if draw(st.booleans()):
        turns.append(message(draw(st.sampled_from(("system", "developer"))), draw(odd_text(30))))
    if draw(st.booleans()):
        turns += [message("user", draw(odd_text(20))), message("assistant", draw(odd_text(20)))]
    content = draw(odd_text(60))
    if draw(st.integers(0, 3)) == 0:  # text parts
        turns.append(obj([("role", '"user"'), ("content", lit([{"type": "text", "text": content}]))]))
    else:
        turns.append(message("user", content))
    return "[" + ",".join(turns) + "]"


@st.composite
def valid_constraint(draw: st.DrawFn, chat: bool) -> dict[str, Json]:
    """At most one output constraint: structured_outputs, response_format or tools."""
    kinds = ("none", "structured", "response_format", "tools") if chat else ("none", "structured")
    kind = draw(st.sampled_from(kinds))
    if kind == "structured":
        return {"structured_outputs": draw(sv.VALID_STRUCTURED)}
    if kind == "response_format":
        return {"response_format": draw(st.sampled_from((
            lit({"type": "text"}), lit({"type": "json_object"}),
            lit({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}))))}
    if kind == "tools":
        choice = draw(st.sampled_from((None, "auto", "none", "required",
                                       {"type": "function", "function": {"name": "get_weather"}})))
        fields = {"tools": lit([TOOL])}
        if choice is not None:
            fields["tool_choice"] = lit(choice)
        return fields
    return {}


@st.composite
def valid_body(draw: st.DrawFn, chat: bool, model: str) -> tuple[dict[str, Json], int]:
    max_tokens = draw(st.integers(1, 4))
    fields: dict[str, Json] = {"model": lit(model)}
    if chat:
        fields["messages"] = draw(valid_messages())
        fields[draw(st.sampled_from(("max_tokens", "max_completion_tokens")))] = str(max_tokens)
    else:
        fields["prompt"] = draw(st.one_of(
            odd_text(60).map(lit), st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=16).map(lit),
            odd_text(20).map(lambda t: lit([t])), st.lists(st.integers(0, VOCAB - 1), min_size=1).map(
                lambda ids: lit([ids[:16]]))))
        fields["max_tokens"] = str(max_tokens)
        if draw(st.booleans()):
            fields["echo"] = draw(st.sampled_from(("true", "false")))
    for name in draw(st.lists(st.sampled_from(SAME), max_size=4, unique=True)):
        fields[name] = draw(sv.VALID[name])
    fields.update(draw(valid_constraint(chat)))
    if {"structured_outputs", "response_format", "tools"} & set(fields):  # a grammar may need a token
        fields.pop("allowed_token_ids", None)                              # the list leaves out
    if draw(st.booleans()):
        fields["stream"] = "true"
        if draw(st.booleans()):
            fields["stream_options"] = lit({"include_usage": draw(st.booleans())})
    if draw(st.integers(0, 3)) == 0:
        if chat:
            fields["logprobs"] = "true"
            fields["top_logprobs"] = str(draw(st.integers(0, 5)))
        else:
            fields["logprobs"] = str(draw(st.integers(0, 5)))
    for name in draw(st.lists(st.sampled_from(sorted(IGNORED)), max_size=2, unique=True)):
        fields[name] = draw(IGNORED[name])
    if draw(st.integers(0, 9)) == 0:
        fields["n"] = "1"
    return fields, max_tokens


ODD_MESSAGES: ST[Json] = st.one_of(st.sampled_from((
    "[]", "{}", '"hi"', "[5]", "[null]", "[[]]", lit([{"content": "x"}]), lit([{"role": "user"}]),
    lit([{"role": "root", "content": "x"}]), lit([{"role": 5, "content": "x"}]),
    lit([{"role": "user", "content": 5}]),
    lit([{"role": "user", "content": None}]), lit([{"role": "user", "content": {"text": "x"}}]),
    lit([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]),
    lit([{"role": "user", "content": [{"type": "text", "text": 5}]}]),
    lit([{"role": "user", "content": ["x"]}]),
    lit([{"role": "user", "content": "\ud800"}]), lit([{"role": "user", "content": "a\udc80b"}]),
    lit([{"role": "user", "content": "\u0000"}]), lit([{"role": "user", "content": "\x14"}]),
    lit([{"role": "user", "content": "x", "name": 5}]),
    lit([{"role": "assistant", "tool_calls": "x"}]),
    lit([{"role": "assistant", "tool_calls": [{"function": 5}]}]),
    lit([{"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function":
                                                                 {"name": "f", "arguments": "{"}}]}]),
    lit([{"role": "assistant", "tool_calls": [{}]}, {"role": "user", "content": "x"}]),
    lit([{"role": "tool", "content": "x", "tool_call_id": 5}]), lit([{"role": "tool", "content": "x"}]),
    lit([{"role": "user", "content": "x", "extra": {"deep": [1]}}]),
    lit([{"role": "user", "content": "{{ raise_exception('x') }}"}]),
    lit([{"role": "user", "content": "x"}] * 1000), lit([{"role": "user", "content": "word " * 9000}]),
    lit([{"role": "user", "content": "\U0001F600" * 100_000}]),
    '[{"role":"user","content":"x","content":5}]',
)), hostile_value())
ODD_TOOLS: ST[Json] = st.sampled_from((
    "[]", "{}", "[5]", lit([{"type": "function"}]), lit([{"type": "function", "function": {"name": 5}}]),
    lit([{"type": "function", "function": {"name": "f", "parameters": "x"}}]), lit([TOOL, TOOL]),
    lit([{"type": "retrieval"}]), lit([{"type": "function", "function": {"name": "f", "parameters":
                                                                        {"type": "nonsense"}}}]),
    lit([{"type": "function", "function": {"name": "\ud800"}}]),
    lit([{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/x"}}}]),
))
ODD_CHOICES: ST[Json] = st.sampled_from((
    '"maybe"', "5", "{}", lit({"type": "function"}), lit({"type": "function", "function": {"name": "nope"}}),
    lit({"type": "function", "function": {"name": 5}}), '"required"', '"none"',
))
ODD_RESPONSE_FORMAT: ST[Json] = st.sampled_from((
    '"json"', "5", "{}", lit({"type": "xml"}), lit({"type": "json_schema"}), lit({"type": "json_schema",
                                                                                "json_schema": 5}),
    lit({"type": "json_schema", "json_schema": {"schema": "x"}}),
    lit({"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}),
    lit({"type": "json_schema", "json_schema": {"schema": {"type": "object", "required": ["a"],
                                                           "properties": {"a": {"$ref": "#"}}}}}),
    '{"type":"json_schema","json_schema":{"schema":{"type":"integer","minimum":NaN}}}',
))
ODD_PROMPTS: ST[Json] = st.one_of(st.sampled_from((
    '""', "[]", "[[]]", '["a","b"]', "[1.5]", "[true]", '[1,"a"]', str([VOCAB]), "[-1]", str([2**63]),
    str([2**64]),
    '"\\ud800"', '["\\ud800"]', '"\\u0000"', '"\\u0014"', '["\\u0016"]', lit("word " * 9000),
    lit([[1, 2], [3]]), lit([[]]), "null", "5", lit([1] * 9000),
)), bulk_ints(0, VOCAB).map(lit), hostile_value())


def hostile_field(draw: st.DrawFn, fields: dict[str, Json], chat: bool) -> str:
    names = CHAT_FIELDS if chat else COMPLETION_FIELDS
    name = draw(unknown_field() if draw(st.integers(0, 9)) == 0 else st.sampled_from(names))
    special = {"messages": ODD_MESSAGES, "tools": ODD_TOOLS, "tool_choice": ODD_CHOICES,
               "response_format": ODD_RESPONSE_FORMAT, "prompt": ODD_PROMPTS}
    if name in special:
        value = draw(special[name])
    elif name in sv.EDGE:
        value = draw(st.one_of(sv.EDGE[name], hostile_value()))
    else:
        value = draw(hostile_value())
    if name in ("max_tokens", "max_completion_tokens") and value == "null" and chat:
        value = "0"  # null would fill what the context has left: a long (valid) generation
    fields[name] = value
    return name


@st.composite
def front_request(draw: st.DrawFn, chat: bool, model: str) -> FuzzRequest:
    valid = draw(st.integers(0, 99)) >= 100 - VALID_PERCENT
    fields, max_tokens = draw(valid_body(chat, model))
    hostile: list[str] = []
    content_type: str | None = "application/json"
    body: bytes | None = None
    if not valid:
        surfaces = ("field", "field", "field", "field", "body", "type")
        for surface in draw(st.lists(st.sampled_from(surfaces), min_size=1, max_size=2)):
            if surface == "field":
                hostile.append(hostile_field(draw, fields, chat))
            elif surface == "body":
                body = draw(st.sampled_from(ODD_BODIES))
                hostile.append(BODY)
            else:
                content_type = draw(st.sampled_from(CONTENT_TYPES))
                hostile.append("content-type")
    if body is None:
        body = obj(fields.items()).encode()
    return FuzzRequest("chat" if chat else "completions", tuple(dict.fromkeys(hostile)), body=body,
                       content_type=content_type, max_tokens=None if hostile else max_tokens)
