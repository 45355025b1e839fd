"""Grammars for structured outputs, over llguidance: compile a `StructuredOutputs`, then per request
a matcher that gives the allowed tokens at each step and advances with each accepted token.

Why llguidance (vLLM's `guidance` backend) and not xgrammar (vLLM's and TRT-LLM's default),
measured here (AMD EPYC, 2 cores; the SmolLM2 tokenizer, 49152 tokens; two JSON schemas with
nested objects, arrays, enums and bounded numbers): llguidance installs in 0.5 s as 7.7 MB with
no dependencies; xgrammar needs triton on Linux x86_64 and takes 1,015 MB. Compiling a schema:
1.2-3.1 ms (llguidance) against 3.3-5.5 ms (xgrammar); the masks of a batch of 32: 0.20 ms
against 0.04-0.08 ms per step, both under 1% of a 30 ms decode step at that batch.

The matcher's mask includes EOS only where the grammar may end; a matcher that is stopped (the
grammar is complete) ends its request with finish reason `stop`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.numpy as llg_numpy
import numpy as np
import torch

from tt_backend.sampling.structured import FIELD, GrammarKind, StructuredOutputs

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

_ANY_JSON_OBJECT = '{"type": "object"}'
# JSON as json.dumps writes it: one space after `,` and `:`, no other whitespace. With flexible
# whitespace (llguidance's default) a small model at temperature 0.8 could emit whitespace until
# max_tokens and never close the object.
_JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ",
                                     "key_separator": ": "}


class GrammarBackend:
    """Compiles constraints for one tokenizer. The tokenizer's conversion (~0.2 s) happens on the
    first compile, on the compiling thread."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: Collection[int]) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._eos = sorted(eos_token_ids)
        self._ll_tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()

    def _tokens(self) -> llguidance.LLTokenizer:
        with self._lock:
            if self._ll_tokenizer is None:
                backend = getattr(self._tokenizer, "backend_tokenizer", None)
                if backend is None:
                    raise ValueError(f"{FIELD} needs a fast (tokenizers) tokenizer, and this model's "
                                     f"is {type(self._tokenizer).__name__}")
                self._ll_tokenizer = llguidance.LLTokenizer(backend.to_str(), n_vocab=self.vocab_size,
                                                            eos_token=self._eos or None)
            return self._ll_tokenizer

    def compile(self, constraint: StructuredOutputs) -> llguidance.LLMatcher:
        """The matcher in its start state (copy it per request); ValueError naming the field."""
        field = f"{FIELD}.{constraint.kind.value}"
        try:
            grammar = _grammar(constraint)
        except ValueError as exc:
            raise ValueError(f"{field} is invalid: {exc}") from None
        tokens = self._tokens()
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, tokens)
        if is_error:
            raise ValueError(f"{field} is invalid: {_brief(messages[0] if messages else 'unknown error')}")
        matcher = llguidance.LLMatcher(tokens, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"{field} is invalid: {_brief(matcher.get_error())}")
        return matcher


def _brief(message: str) -> str:
    """llguidance's message without the parser state and grammar it appends (they can be MBs)."""
    head = message.split("\n<state>")[0].split("\n<grammar>")[0].strip()
    return head if len(head) <= 400 else head[:400] + " ..."


def _grammar(constraint: StructuredOutputs) -> str:
    kind, spec = constraint.kind, constraint.spec
    if kind is GrammarKind.JSON:
        return str(llguidance.LLMatcher.grammar_from_json_schema(spec, defaults=_JSON_OPTIONS))
    if kind is GrammarKind.JSON_OBJECT:
        return str(llguidance.LLMatcher.grammar_from_json_schema(_ANY_JSON_OBJECT, defaults=_JSON_OPTIONS))
    if kind is GrammarKind.REGEX:
        return str(llguidance.LLMatcher.grammar_from_regex(spec))
    if kind is GrammarKind.CHOICE:
        return str(llguidance.grammar_from("choice", spec))
    if kind is GrammarKind.GRAMMAR:  # Lark, or GBNF/EBNF converted to Lark
        return str(llguidance.grammar_from("grammar", spec))
    tag = json.loads(spec)  # structural tag: {"structures": [{"begin", "schema", "end"}], "triggers"}
    structures, triggers = tag.get("structures"), tag.get("triggers")
    if not isinstance(structures, list) or not isinstance(triggers, list) or not structures:
        raise ValueError("a structural tag needs non-empty lists `structures` and `triggers`")
    try:
        tags = [llguidance.StructTag(trigger=_trigger(s["begin"], triggers), begin=s["begin"],
                                     grammar=s.get("schema", {}), end=s["end"]) for s in structures]
        return str(llguidance.StructTag.to_grammar(tags))
    except (AssertionError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"a structural tag's structures each need begin, schema and end ({exc!r})") from None


def _trigger(begin: str, triggers: list[str]) -> str:
    """The trigger a structure's begin starts with (vLLM's structural tag names them apart)."""
    return next((t for t in triggers if isinstance(t, str) and t and begin.startswith(t)), begin)


class GrammarMatcher:
    """One request's position in its grammar."""

    def __init__(self, start: llguidance.LLMatcher) -> None:
        self._matcher = start.deep_copy()

    def accept(self, token_id: int) -> bool:
        """Advance by a sampled token; False if the grammar does not allow it, or the matcher
        failed (a limit of llguidance's parser or lexer was reached): see `error`."""
        return bool(self._matcher.consume_token(token_id)) and not self._matcher.is_error()

    @property
    def is_terminated(self) -> bool:
        """The grammar is complete: no token but EOS may follow."""
        return bool(self._matcher.is_stopped()) and not self._matcher.is_error()

    @property
    def error(self) -> str:
        return _brief(str(self._matcher.get_error()))

    @property
    def raw(self) -> llguidance.LLMatcher:
        return self._matcher


_EXECUTOR = llguidance.LLExecutor()
_BITS = torch.arange(32, dtype=torch.int32)


def allowed_tokens(matchers: Sequence[GrammarMatcher], vocab_size: int) -> torch.Tensor:
    """The tokens each matcher allows next, as a bool mask [len(matchers), vocab_size] (the
    masks filled in parallel by llguidance's executor)."""
    bitmask = llg_numpy.allocate_token_bitmask(len(matchers), vocab_size)
    llg_numpy.fill_next_token_bitmask_par(_EXECUTOR, [(m.raw, i) for i, m in enumerate(matchers)], bitmask)
    words = torch.from_numpy(np.ascontiguousarray(bitmask))
    bits = (words.unsqueeze(-1) >> _BITS) & 1
    return bits.reshape(len(matchers), -1)[:, :vocab_size].bool()
