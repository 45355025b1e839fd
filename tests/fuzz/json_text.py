"""JSON written out as text, so a request can hold what `json.dumps` never writes: the tokens NaN
and Infinity (which Python's `json.loads` accepts), numbers past every int and float limit (a
5,000-digit integer is past Python's 4,300-digit conversion limit), lone surrogate escapes,
duplicate keys, nesting deeper than the parser's recursion limit.

Bulk content (lists of 10,000 entries, 200 KB strings) is built from a drawn size and seed, so
one hypothesis choice stands for it, not 10,000."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable

from hypothesis import strategies as st

Json = str
"""A JSON text fragment."""

VOCAB = 49152
"""The vocabulary of the default model (SmolLM2-135M-Instruct), which the fuzzed server serves."""
ZERO_TOKEN_CHARS = "\x04\x06\x13\x14\x16\x1d"
"""The characters below U+3000 that the default model's tokenizer drops: a text of only these is
0 tokens (an empty prompt, a bad word or stop string that matches nothing)."""


def has_tokens(text: str) -> bool:
    return any(c not in ZERO_TOKEN_CHARS for c in text)


def lit(value: object) -> Json:
    """A plain value as JSON (str with lone surrogates becomes a \\udxxx escape)."""
    return json.dumps(value)


def obj(pairs: Iterable[tuple[str, Json]]) -> Json:
    return "{" + ",".join(f"{lit(k)}:{v}" for k, v in pairs) + "}"


def arr(items: Iterable[Json]) -> Json:
    return "[" + ",".join(items) + "]"


def digits(n: int, lead: str = "9") -> Json:
    """An integer of `n` digits, as text (str(int) refuses past 4,300 digits)."""
    return lead + "0" * (n - 1)


# Numbers at and past every limit: int64/uint64 edges, beyond float range, NaN and Infinity tokens.
ODD_NUMBERS: tuple[Json, ...] = (
    "0", "-0", "-0.0", "1", "-1", "2.5", "0.5", "1E2", "1e-7",
    str(2**31 - 1), str(2**31), str(2**32), str(2**63 - 1), str(2**63), str(2**64 - 1), str(2**64),
    str(-(2**63) - 1), str(-(2**31) - 1), digits(400), "-" + digits(400), digits(5000), digits(4301, "1"),
    "NaN", "Infinity", "-Infinity", "1e308", "1.7976931348623157e308", "1e309", "-1e309", "5e-324",
    "1e-400", "123456789012345678901234567890.5",
)
# Strings a field's parser may try to read as a number or boolean, and ones no encoder can take.
ODD_STRINGS: tuple[Json, ...] = (
    '""', '" "', '"\\ud800"', '"\\udfff"', '"a\\udc80b"', '"\\u0000"', '"\\u001b[31m"', '"\\u202e"',
    '"nan"', '"inf"', '"-inf"', '"1e999"', '"true"', '"True"', '"null"', '"3"', '" 3 "', '"-5"',
    '"\u0663"', '"\uff11\uff12"', '"0x10"', '"1_0"', '"2.0"', f'"{2**64}"', f'"{digits(5000)}"',
    '"\\n"', '"\U0001F600"', '"e\u0301"', '"\\u0014"', '"\\u0004\\u001d"',
)
ODD_CONTAINERS: tuple[Json, ...] = (
    "true", "false", "null", "[]", "{}", "[[]]", "[null]", "[NaN]", '{"a":1}', '{"":null}', '[1,"a",null]',
    '{"0":{"0":{"0":[]}}}', "[" * 900 + "]" * 900, "[" * 3000 + "]" * 3000, '{"a":' * 2000 + "1" + "}" * 2000,
)


def _bulk_ints(args: tuple[int, int, int, int]) -> list[int]:
    n, seed, low, high = args
    rng = random.Random(seed)
    return [rng.randrange(low, high) for _ in range(n)]


def bulk_ints(low: int = 0, high: int = VOCAB, sizes: tuple[int, int] = (1000, 10000)) -> st.SearchStrategy[
        list[int]]:
    """1,000-10,000 integers in [low, high), from one drawn size and seed."""
    return st.tuples(st.integers(*sizes), st.integers(0, 2**32), st.just(low), st.just(high)).map(_bulk_ints)


def _bulk_words(args: tuple[int, int]) -> list[str]:
    n, seed = args
    rng = random.Random(seed)
    return ["".join(rng.choice("abcdefghij \u00e9\u4e2d") for _ in range(rng.randrange(1, 9))).strip() or "w"
            for _ in range(n)]


def bulk_words(sizes: tuple[int, int] = (1000, 10000)) -> st.SearchStrategy[list[str]]:
    return st.tuples(st.integers(*sizes), st.integers(0, 2**32)).map(_bulk_words)


def long_string() -> st.SearchStrategy[Json]:
    """A 1 KB to 200 KB string of one repeated character (some multi-byte)."""
    return st.tuples(st.integers(1000, 200_000), st.sampled_from("x \u00e9\u4e2d\U0001F600")).map(
        lambda a: lit(a[1] * a[0]))


# Text a prompt or a message may hold: every category of code point (no surrogates, which UTF-8
# cannot encode), and sequences that break naive handling.
ODD_TEXT_PIECES = (
    "Hello", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", "\u202eevil",
    "e\u0301" * 20, "\U0001F469\u200d\U0001F469\u200d\U0001F467", "\x00", "\ufeff", "\u2028\u2029",
    "\u6f22\u5b57", "\t\r\n", "\\u0000", "{{ raise }}", "{% for x in y %}", "\U0010ffff", "\ufffd",
)


def odd_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Text of odd Unicode (encodable as UTF-8) that is at least one token."""
    return st.one_of(
        st.sampled_from(ODD_TEXT_PIECES),
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=max_size).filter(has_tokens),
        st.lists(st.sampled_from(ODD_TEXT_PIECES), min_size=2, max_size=4).map("".join),
    )


def hostile_value() -> st.SearchStrategy[Json]:
    """Any hostile JSON value: odd numbers, odd strings, containers, long strings and lists."""
    return st.one_of(
        st.sampled_from(ODD_NUMBERS),
        st.sampled_from(ODD_STRINGS),
        st.sampled_from(ODD_CONTAINERS),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.text(max_size=12).map(lit),
        long_string(),
        bulk_ints(-(2**40), 2**40).map(lit),
        bulk_words().map(lit),
    )


def unknown_field() -> st.SearchStrategy[str]:
    """Field names no schema knows (case and spacing variants of real ones among them)."""
    return st.one_of(st.sampled_from(("foo", "Temperature", "max_tokens ", "", "\u0000", "__proto__",
                                      "max-tokens", "\ud800", "top_k\u200b", "stop\n")),
                     st.text(max_size=8).map(lambda s: "x_" + s))
