"""Values of the vllm_backend `sampling_parameters` fields (tt_backend/sampling/params.py
SamplingParams.from_dict), as JSON text: VALID values (a request made of them must succeed), and
EDGE values per field (at or past a limit, of the wrong type, or valid values that stress the
engine: a top_k beyond the vocabulary, 10,000 logit biases). Any field also takes any
json_text.hostile_value()."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.fuzz.json_text import VOCAB, Json, bulk_ints, bulk_words, digits, lit, long_string, odd_text

ST = st.SearchStrategy

BOOL: ST[Json] = st.sampled_from(("true", "false", '"true"', '"False"', '" TRUE "'))
TOKEN = st.integers(0, VOCAB - 1)


def floats(low: float, high: float) -> ST[Json]:
    return st.floats(low, high, allow_nan=False).map(repr)


def words() -> ST[str]:
    """A word bad_words and stop accept (not blank)."""
    return st.one_of(st.sampled_from(("foo", "the", "Paris", "\u4e2d", ".", "\n.")),
                     odd_text(6).filter(lambda w: bool(w.strip())))


# Small constraints: each compiles in milliseconds.
VALID_STRUCTURED: ST[Json] = st.sampled_from((
    lit({"regex": "[a-z]{1,8}"}), lit({"regex": "(yes|no)"}), lit({"choice": ["yes", "no", "maybe"]}),
    lit({"json": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}),
    lit({"json": {"type": "string", "maxLength": 5}}), lit({"json_object": True}),
    lit({"json": '{"type": "boolean"}'}), lit({"grammar": 'root ::= "Dear " [A-Z] [a-z]{2,8}'}),
    lit({"regex": "[0-9]+", "backend": "xgrammar", "disable_fallback": True}), "null",
))

VALID: dict[str, ST[Json]] = {
    "min_tokens": st.sampled_from(("0", "1", '"0"')),
    "temperature": st.sampled_from(("0", "0.0", "0.7", "1", "1.5", '"0.5"', "1e-6", "2")),
    "top_k": st.sampled_from(("-1", "0", "1", "5", "50", '"3"', "2.0")),
    "top_p": st.sampled_from(("1", "0.9", "0.5", "1.0", '"0.95"')),
    "min_p": st.sampled_from(("0", "0.05", "0.5")),
    "seed": st.integers(0, 2**32).map(str),
    "ignore_eos": BOOL,
    "stop": st.one_of(words().map(lit), st.lists(words(), min_size=1, max_size=3).map(lit)),
    "stop_token_ids": st.lists(TOKEN, max_size=4).map(lit),
    "include_stop_str_in_output": BOOL,
    "skip_special_tokens": BOOL,
    "presence_penalty": floats(-2, 2),
    "frequency_penalty": floats(-2, 2),
    "repetition_penalty": floats(0.5, 2),
    "logit_bias": st.dictionaries(TOKEN.map(str), st.floats(-100, 100), max_size=4).map(lit),
    "allowed_token_ids": st.lists(TOKEN, min_size=1, max_size=8).map(lit),
    "bad_words": st.lists(words(), min_size=1, max_size=3).map(lit),
    "logprobs": st.integers(0, 20).map(str),
    "logits_processors": st.just("[]"),
    "structured_outputs": VALID_STRUCTURED,
    "n": st.sampled_from(("1", '"1"', "1.0")),
    "best_of": st.just("null"),
    "prompt_logprobs": st.just("null"),
    "spaces_between_special_tokens": BOOL,
    "detokenize": BOOL,
}


def valid_max_tokens() -> ST[tuple[int, Json]]:
    """(the number, its JSON): 1-4, as an int, a string or an integral float."""
    return st.tuples(st.integers(1, 4), st.sampled_from(("{}", '"{}"', "{}.0", '" {} "'))).map(
        lambda a: (a[0], a[1].format(a[0])))


ODD_STRUCTURED: ST[Json] = st.one_of(st.sampled_from((
    "false", "{}", "[]", '"x"', '"{\\"regex\\": \\"a\\"}"', lit({"json": False}), lit({"json": True}),
    lit({"json": {}}), lit({"json": {"type": "nonsense"}}), lit({"json": {"$ref": "#/definitions/missing"}}),
    lit({"json": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}}),
    '{"json":{"type":"array","minItems":9223372036854775808}}', lit({"json": {"type": "string",
                                                                               "minLength": 100000}}),
    '{"json":{"type":"integer","minimum":NaN}}', lit({"json": {"enum": []}}),
    lit({"json": {"type": "string", "pattern": "(a|aa)*b"}}),
    lit({"json": {"type": "string", "pattern": "\\"}}),
    lit({"json": "{"}), '{"json":' + lit(digits(5000)) + "}", '{"json":' + digits(5000) + "}",
    lit({"json": {"type": "object", "additionalProperties": False, "required": ["x"]}}),
    lit({"json": {"allOf": [{"type": "string"}, {"type": "integer"}]}}),
    lit({"regex": "(("}), lit({"regex": "\\"}), lit({"regex": ""}), lit({"regex": "(?<=a)b"}),
    lit({"regex": "a{1000}"}), lit({"regex": "\\p{L}+"}), lit({"regex": "[^\\x00-\\x{10FFFF}]"}),
    lit({"regex": "\ud800"}), lit({"regex": "a{2,1}"}), lit({"regex": "(a*)*$"}), lit({"regex": "\\b\\B"}),
    lit({"regex": "x{0}"}), lit({"choice": []}), lit({"choice": [""]}), lit({"choice": ["\ud800"]}),
    lit({"choice": ["\x14"]}),
    lit({"choice": "yes"}), lit({"choice": [1]}), lit({"choice": ["a", "a"]}),
    lit({"grammar": "start: start"}), lit({"grammar": "root ::= root"}), lit({"grammar": ""}),
    lit({"grammar": "%%%"}), lit({"grammar": "root ::= [\ud800]"}), lit({"grammar": 'root ::= "" '}),
    lit({"json_object": False}), lit({"json_object": 1}), lit({"json_object": True, "regex": "a"}),
    lit({"structural_tag": {}}), lit({"structural_tag": "x"}), lit({"structural_tag": "{"}),
    lit({"structural_tag": {"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}}),
    lit({"structural_tag": {"structures": [{"begin": "<a>", "schema": {"type": "object"}, "end": "</a>"}],
                            "triggers": ["<a"]}}),
    lit({"whitespace_pattern": 5, "regex": "a"}), lit({"unknown": 1}), lit({"regex": None}),
)), bulk_words((1000, 3000)).map(lambda w: lit({"choice": w})))

EDGE: dict[str, ST[Json]] = {
    "max_tokens": st.sampled_from(("0", "-1", "8192", "8191", str(2**31), "1e308", "true", "4.5", "null",
                                   digits(5000), '"1e2"', "[1]")),
    "min_tokens": st.sampled_from(("-1", "5", "4", str(2**63), "0.5")),
    "temperature": st.sampled_from(("1e-5", "9.99e-6", "1e308", "5e-324", "-0.0", "100000", "1e-300")),
    "top_k": st.sampled_from((str(VOCAB), str(VOCAB + 1), str(2**31 - 1), str(2**63 - 1), str(2**64), "-2")),
    "top_p": st.sampled_from(("5e-324", "1e-300", "1.0000000000000002", "0.9999999999999999", "-0.0")),
    "min_p": st.sampled_from(("1", "0.9999", "5e-324", "1.0000000000000002")),
    "seed": st.sampled_from((str(2**64 - 1), str(2**63), str(2**64), "-0", "1.5")),
    "repetition_penalty": st.sampled_from(("1e308", "5e-324", "1e-300", "1e38", "1e-38", "3.4e38")),
    "presence_penalty": st.sampled_from(("2", "-2", "2.0000001", "-2.0000001")),
    "frequency_penalty": st.sampled_from(("2", "-2", "2.0000001", "1e308")),
    "logit_bias": st.one_of(
        bulk_ints().map(lambda ids: lit({str(t): (t % 201) - 100 for t in ids})),
        bulk_ints().map(lambda ids: lit({str(t): 100 for t in ids})),
        st.sampled_from((lit({"0": 100}), lit({str(VOCAB - 1): -100}), lit({" 5": 1}), lit({"5.0": 1}),
                         lit({"-0": 1}), lit({"00005": 1}), lit({str(2**64): 1}), lit({"1e5": 1}),
                         '{"5":NaN}', '{"5":Infinity}', lit({"5": "big"}), lit({"5": 1, " 5": -1}),
                         lit({str(VOCAB): 1}), lit({"-1": 1}), lit({"\u0663": 1})))),
    "allowed_token_ids": st.one_of(
        bulk_ints().map(lit), st.sampled_from(("[49151]", "[0]", str([2**63]), "[-0]", "[1,1,1]", "[]",
                                               "[1.5]", '["1"]', "[true]", str([VOCAB])))),
    "stop_token_ids": st.one_of(bulk_ints().map(lit),
                                st.sampled_from((str([2**64]), str([VOCAB]), "[-1]", '["2"]', "[0]"))),
    "stop": st.one_of(bulk_words().map(lit), long_string(),
                      st.sampled_from((lit(["\ud800"]), '[""]', "[1]", '"\\u0000"', lit(["a"] * 3),
                                       lit(["\x14"]), lit(["a", "\x04\x1d"])))),
    "bad_words": st.one_of(bulk_words().map(lit), long_string(),
                           st.sampled_from((lit(["\ud800"]), '["   "]', '[""]', '"\\u0000"',
                                            lit(["\ufeff"]), lit(["\x14"]), lit(["foo", "\x16"])))),
    "logprobs": st.sampled_from(("20", "21", "-1", "0", "true", "1.0")),
    "structured_outputs": ODD_STRUCTURED,
    "guided_decoding": st.one_of(VALID_STRUCTURED, ODD_STRUCTURED),
    "logits_processors": st.sampled_from(('["nope"]', '[""]', '"x"', "[1]", "null")),
    "n": st.sampled_from(("2", "0", "-1", '"2"', "129", str(2**64))),  # 2: several choices on the front
    "best_of": st.sampled_from(("1", "2", "0")),
    "prompt_logprobs": st.sampled_from(("0", "1")),
    "truncate_prompt_tokens": st.sampled_from(("1", "-1", "null")),
}
NAMES = tuple(sorted({"max_tokens", *VALID, *EDGE}))
