"""Strategies for gRPC requests to `tt_llm` (vllm_backend schema: text_input or input_ids, and
sampling_parameters JSON, or TRT-LLM scalar tensors) and to `ensemble` (TRT-LLM names, see
model_repository/ensemble/config.pbtxt). A request starts valid; a hostile one then has one or two
of its surfaces mutated (a sampling field, the sampling JSON text, the prompt, a flag, a TRT-LLM
tensor, the set of tensors), each mutation recording the field it made hostile."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from tests.fuzz import sampling_values as sv
from tests.fuzz.json_text import VOCAB, Json, bulk_words, hostile_value, obj, odd_text, unknown_field
from tests.fuzz.request import BODY, FuzzRequest

VALID_PERCENT = 40
"""About this share of requests is valid (and must succeed)."""
FLAGS = ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
         "return_num_output_tokens", "return_logprobs", "return_cumulative_logprob", "return_log_probs",
         "return_text_output")
ENSEMBLE_FLAGS = ("stream", "exclude_input_in_output", "return_log_probs")
TRT_INTS = ("max_tokens", "min_length", "top_k", "end_id", "pad_id")
TRT_FLOATS = ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")
TRT_NAMES = (*TRT_INTS, *TRT_FLOATS, "seed", "stop_words", "bad_words", "guided_decoding_guide_type",
             "guided_decoding_guide")
ODD_SAMPLING_TEXT: tuple[str | bytes, ...] = (
    "", "   ", "[]", "null", "NaN", '"x"', "1", "{", "}", '{"max_tokens":1} trailing', "{'max_tokens': 1}",
    '{"max_tokens":1,"max_tokens":0}', '{"a":' * 3000 + "1" + "}" * 3000, "\ufeff{}",
    '{"max_tokens":1}\u0000', "/*c*/{}", '{"max_tokens":2,}', b"\xff{}", b'{"stop":"\xed\xa0\x80"}',
    b'{"max_tokens":1}\xc0\x80',
)
ODD_TEXT_BYTES: tuple[bytes, ...] = (
    b"", b"\x14", b"\x04\x16", b"\xff", b"\xfe\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"abc\x80",
    b"\xf4\x90\x80\x80",
    ("word " * 9000).encode(), ("\U0001F600" * 100_000).encode(), b"a" * 400_000,
)

ST = st.SearchStrategy


def text_tensor(*values: bytes) -> np.ndarray:
    return np.array(list(values), dtype=np.object_)


@dataclass
class Draft:
    """A request being drawn: its tensors, its sampling JSON fields (or a replacement text for the
    whole sampling_parameters), and the fields made hostile so far."""

    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    fields: dict[str, Json] = field(default_factory=dict)
    sampling_text: str | bytes | None = None
    hostile: list[str] = field(default_factory=list)

    def request(self, target: str, max_tokens: int | None) -> FuzzRequest:
        tensors = dict(self.tensors)
        if self.sampling_text is not None:
            text = self.sampling_text
            tensors["sampling_parameters"] = text_tensor(text if isinstance(text, bytes) else text.encode())
        elif self.fields:
            tensors["sampling_parameters"] = text_tensor(obj(self.fields.items()).encode())
        assert target in ("tt_llm", "ensemble")
        hostile = self.hostile
        if target == "ensemble":  # TRT-LLM's shapes and names: a batch of one, min_tokens
            tensors = {("min_tokens" if k == "min_length" else k): v[None] for k, v in tensors.items()}
            hostile = ["min_tokens" if k == "min_length" else k for k in hostile]
        return FuzzRequest("tt_llm" if target == "tt_llm" else "ensemble", tuple(dict.fromkeys(hostile)),
                           tuple(tensors.items()), max_tokens=None if self.hostile else max_tokens)


# ---- valid parts ------------------------------------------------------------------------------
def valid_text() -> ST[str]:
    return st.one_of(odd_text(60), st.integers(20, 600).map(lambda n: "word " * n))


def valid_ids() -> ST[list[int]]:
    return st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=32)


def valid_flags(names: tuple[str, ...]) -> ST[dict[str, np.ndarray]]:
    return st.dictionaries(st.sampled_from(names), st.booleans().map(lambda b: np.array([b])), max_size=4)


def i32(value: int) -> np.ndarray:
    return np.array([value], dtype=np.int32)


def f32(value: float) -> np.ndarray:
    return np.array([value], dtype=np.float32)


@st.composite
def valid_trt(draw: st.DrawFn, max_tokens: int) -> dict[str, np.ndarray]:
    """TRT-LLM scalar tensors: max_tokens and a few optional ones, all valid."""
    optional: dict[str, ST[np.ndarray]] = {
        "min_length": st.integers(0, 1).map(i32), "temperature": st.floats(0, 1.5, width=32).map(f32),
        "top_k": st.integers(0, 50).map(i32), "top_p": st.floats(0, 1, width=32).map(f32),
        "seed": st.integers(0, 2**64 - 1).map(lambda v: np.array([v], dtype=np.uint64)),
        "end_id": st.integers(0, VOCAB - 1).map(i32), "pad_id": st.integers(-(2**31), 2**31 - 1).map(i32),
        "min_p": st.floats(0, 0.5, width=32).map(f32),
        "repetition_penalty": st.floats(0.5, 2, width=32).map(f32),
        "presence_penalty": st.floats(-2, 2, width=32).map(f32),
        "frequency_penalty": st.floats(-2, 2, width=32).map(f32),
        "stop_words": st.lists(sv.words(), min_size=1, max_size=3).map(
            lambda ws: text_tensor(*(w.encode() for w in ws))),
        "bad_words": st.lists(sv.words(), min_size=1, max_size=3).map(
            lambda ws: text_tensor(*(w.encode() for w in ws))),
    }
    names = draw(st.lists(st.sampled_from(sorted(optional)), max_size=4, unique=True))
    tensors = {"max_tokens": i32(max_tokens), **{n: draw(optional[n]) for n in names}}
    guide = draw(st.sampled_from((None, ("json", None), ("json_schema", '{"type": "object"}'),
                                  ("regex", "[a-z]+"), ("ebnf_grammar", 'root ::= "a" | "b"'))))
    if guide is not None:
        tensors["guided_decoding_guide_type"] = text_tensor(guide[0].encode())
        if guide[1] is not None:
            tensors["guided_decoding_guide"] = text_tensor(guide[1].encode())
    return tensors


# ---- mutations: each makes one surface hostile and records its field --------------------------
def mutate_field(draw: st.DrawFn, d: Draft) -> None:
    name = draw(unknown_field() if draw(st.integers(0, 9)) == 0 else st.sampled_from(sv.NAMES))
    edge = sv.EDGE.get(name)
    value = draw(hostile_value() if edge is None else st.one_of(edge, edge, hostile_value()))
    d.fields[name] = value
    d.hostile.append(name)


def mutate_sampling_text(draw: st.DrawFn, d: Draft) -> None:
    d.sampling_text = draw(st.sampled_from(ODD_SAMPLING_TEXT))
    d.hostile += [BODY, "sampling_parameters"]


def mutate_prompt(draw: st.DrawFn, d: Draft) -> None:
    d.tensors.pop("text_input", None)
    d.tensors.pop("input_ids", None)
    if draw(st.booleans()):
        d.tensors["text_input"] = draw(st.one_of(
            st.sampled_from(ODD_TEXT_BYTES).map(text_tensor),
            st.just(text_tensor(b"a", b"b")), st.just(np.array([[b"Hi"]], dtype=np.object_)),
            st.just(np.array([], dtype=np.object_)), st.just(i32(5))))
        d.hostile.append("text_input")
        return
    values = st.sampled_from((-1, -(2**31), VOCAB, 2**31 - 1, 65535, 2**63 - 1, 2**64 - 1, 2**40))
    d.tensors["input_ids"] = draw(st.one_of(
        st.tuples(valid_ids(), values).map(lambda a: np.array(
            [*a[0], a[1]], dtype=np.int32 if -(2**31) <= a[1] < 2**31 else np.uint64)),
        st.sampled_from((np.int64, np.uint64, np.uint32, np.int16, np.int8, np.uint8, np.float32, np.float64,
                         np.bool_)).map(lambda t: np.array([1, 2, 3], dtype=t)),
        st.just(np.array([b"1"], dtype=np.object_)), st.just(np.array([], dtype=np.int32)),
        st.just(np.array([[1, 2]], dtype=np.int32)), st.just(np.array([[1, 2], [3, 4]], dtype=np.int32)),
        st.just(np.array([[[1]]], dtype=np.int32)), st.just(np.ones(9000, dtype=np.int32)),
        st.just(np.array(7, dtype=np.int32))))
    d.hostile.append("input_ids")


def odd_tensor(draw: st.DrawFn, name: str) -> np.ndarray:
    """A tensor for `name` of a wrong dtype or shape, or an edge value of its own dtype."""
    ints = (-(2**31), -1, 0, 1, 2**31 - 1, VOCAB, 8192)
    floats = (float("nan"), float("inf"), float("-inf"), -0.0, 1e-45, 3.4028235e38, -1.0, 1e-5, 2.0)
    if name in ("stop_words", "bad_words", "guided_decoding_guide_type", "guided_decoding_guide"):
        return draw(st.one_of(
            st.sampled_from((b"", b"\x14", b"\xff", b"\xed\xa0\x80", b"   ", b"x" * 100_000, b"json",
                             b"regex", b"xml", b"{", b"((", b'{"type": "nonsense"}', b"\x00",
                             )).map(text_tensor),
            bulk_words().map(lambda ws: text_tensor(*(w.encode() for w in ws))),
            st.just(np.array([[b"a", b"b"]], dtype=np.object_)), st.just(i32(1))))
    if name == "seed":
        return draw(st.one_of(st.sampled_from((0, 2**63, 2**64 - 1)).map(lambda v: np.array([v], np.uint64)),
                              st.sampled_from((-1, 2**31 - 1)).map(i32), st.just(f32(1.5))))
    own = st.sampled_from(ints).map(i32) if name in TRT_INTS else st.sampled_from(floats).map(f32)
    return draw(st.one_of(own, own, st.sampled_from((
        np.array([1, 2], dtype=np.int32), np.array([[1]], dtype=np.int32), np.array([], dtype=np.float32),
        np.array(1, dtype=np.int32), np.array([1], dtype=np.int64), np.array([1.0], dtype=np.float64),
        np.array([1.0], dtype=np.float32), np.array([True]), np.array([b"1"], dtype=np.object_),
        np.array([2**40], dtype=np.int64), np.array([1], dtype=np.uint64)))))


def mutate_trt(draw: st.DrawFn, d: Draft) -> None:
    name = draw(st.sampled_from(TRT_NAMES))
    d.tensors[name] = odd_tensor(draw, name)
    d.hostile.append(name)


def mutate_flag(draw: st.DrawFn, d: Draft, names: tuple[str, ...]) -> None:
    name = draw(st.sampled_from(names))
    d.tensors[name] = draw(st.sampled_from((
        i32(1), np.array([b"true"], dtype=np.object_), f32(1.0), np.array([True, False]),
        np.array([[True]]), np.array([], dtype=np.bool_), np.array(True))))
    d.hostile.append(name)


def mutate_tensor_set(draw: st.DrawFn, d: Draft, model: str) -> None:
    """An unknown tensor, a tensor the model does not take, both prompts, no prompt."""
    change = draw(st.sampled_from(("unknown", "foreign", "both", "none")))
    if change == "unknown":
        name = draw(st.sampled_from(("bogus", "TEXT_INPUT", "text_input ", "\u00e9", "max_tokens\x00")))
        d.tensors[name] = i32(1)
        d.hostile.append(name)
    elif change == "foreign":
        name = "sampling_parameters" if model == "ensemble" else "prompt"
        d.tensors[name] = text_tensor(b"{}")
        d.hostile.append(name)
    elif change == "both" and model == "tt_llm":
        d.tensors["text_input"], d.tensors["input_ids"] = text_tensor(b"Hi"), i32(5)
        d.hostile += ["text_input", "input_ids"]
    else:
        d.tensors.pop("text_input", None)
        d.tensors.pop("input_ids", None)
        d.hostile += ["text_input", "input_ids"]


# ---- requests ---------------------------------------------------------------------------------
@st.composite
def tt_llm_request(draw: st.DrawFn) -> FuzzRequest:
    valid = draw(st.integers(0, 99)) >= 100 - VALID_PERCENT
    d = Draft()
    if draw(st.booleans()):
        d.tensors["text_input"] = text_tensor(draw(valid_text()).encode())
    else:
        d.tensors["input_ids"] = np.array(draw(valid_ids()), dtype=np.int32)
    max_tokens, max_json = draw(sv.valid_max_tokens())
    if draw(st.integers(0, 3)) == 0:
        d.tensors.update(draw(valid_trt(max_tokens)))
    else:
        d.fields["max_tokens"] = max_json
        for name in draw(st.lists(st.sampled_from(sorted(sv.VALID)), max_size=5, unique=True)):
            d.fields[name] = draw(sv.VALID[name])
        if "structured_outputs" in d.fields:  # a grammar may need a token the list leaves out
            d.fields.pop("allowed_token_ids", None)
    d.tensors.update(draw(valid_flags(FLAGS)))
    if not valid:
        surfaces = ("field", "field", "field", "text", "prompt", "prompt", "trt", "flag", "set")
        for surface in draw(st.lists(st.sampled_from(surfaces), min_size=1, max_size=2)):
            if surface == "field":
                mutate_field(draw, d)
            elif surface == "text":
                mutate_sampling_text(draw, d)
            elif surface == "prompt":
                mutate_prompt(draw, d)
            elif surface == "trt":
                mutate_trt(draw, d)
            elif surface == "flag":
                mutate_flag(draw, d, FLAGS)
            else:
                mutate_tensor_set(draw, d, "tt_llm")
    return d.request("tt_llm", max_tokens)


@st.composite
def ensemble_request(draw: st.DrawFn) -> FuzzRequest:
    valid = draw(st.integers(0, 99)) >= 100 - VALID_PERCENT
    max_tokens = draw(st.integers(1, 4))
    d = Draft({"text_input": text_tensor(draw(valid_text()).encode()), **draw(valid_trt(max_tokens)),
               **draw(valid_flags(ENSEMBLE_FLAGS))})
    if not valid:
        for surface in draw(st.lists(st.sampled_from(("trt", "trt", "trt", "text", "flag", "set", "missing")),
                                     min_size=1, max_size=2)):
            if surface == "trt":
                mutate_trt(draw, d)
            elif surface == "text":
                d.tensors["text_input"] = draw(st.sampled_from(ODD_TEXT_BYTES).map(text_tensor))
                d.hostile.append("text_input")
            elif surface == "flag":
                mutate_flag(draw, d, ENSEMBLE_FLAGS)
            elif surface == "set":
                mutate_tensor_set(draw, d, "ensemble")
            else:
                d.tensors.pop("max_tokens", None)
                d.hostile.append("max_tokens")
    return d.request("ensemble", max_tokens)
