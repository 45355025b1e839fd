"""The host path: the step's logits come back and the processor chain runs before sampling.

The chain follows vLLM's sampler (v1), so the same request gets the same logits here as there:
1. logprobs, when asked for, are of the raw logits (vLLM's default `raw_logprobs`);
2. allowed_token_ids, bad words, logit bias and min_tokens (EOS and stop ids banned) edit the
   logits; then custom processors run; then a structured-output grammar masks what it forbids
   (vLLM applies the grammar's bitmask before its sampler too);
3. repetition, frequency and presence penalties;
4. the device sampler's own `select_tokens` picks the token (temperature, min-p, top-k, top-p and
   the counter-based seed), so a row gets the same token on either path from the same logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tt_backend.contract.sampling import SampledTokens, SamplingTensors, TokenLogprobs
from tt_backend.sampling.device_sampler import select_tokens, variant_for
from tt_backend.sampling.grammar import GrammarMatcher, allowed_tokens
from tt_backend.sampling.params import SamplingParams
from tt_backend.sampling.processors import lookup


@dataclass(frozen=True)
class HostRow:
    """What the chain needs of one request at this step."""

    params: SamplingParams
    prompt_ids: Sequence[int]
    output_ids: Sequence[int]
    banned: tuple[int, ...] = ()
    """Token ids that may not be sampled now (min_tokens keeps EOS and stop ids out)."""
    bad_words: tuple[tuple[int, ...], ...] = ()
    """Token sequences of the bad words (see `bad_word_token_ids`)."""
    grammar: GrammarMatcher | None = None
    """The structured-output matcher, in its state after the tokens so far."""


@dataclass(frozen=True)
class HostSample:
    tokens: torch.Tensor
    logprobs: tuple[TokenLogprobs | None, ...]
    errors: tuple[str | None, ...] = ()
    """Per row: why its own processing failed (None: it did not)."""


def bad_word_token_ids(encode: Callable[[str], Sequence[int]],
                       words: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """Each bad word as token ids, alone and after a space (vLLM's rule: the spaced form is kept
    only when it tokenizes to as many tokens and starts differently)."""
    sequences: list[tuple[int, ...]] = []
    for i, word in enumerate(words):
        plain = tuple(encode(word.lstrip()))
        if not plain:  # e.g. only control characters the tokenizer drops: nothing to ban
            raise ValueError(f"bad_words[{i}] ({word!r}) tokenizes to no tokens")
        sequences.append(plain)
        spaced = tuple(encode(" " + word.lstrip()))
        if spaced and spaced[0] != plain[0] and len(spaced) == len(plain):
            sequences.append(spaced)
    return tuple(s for s in sequences if s)


def process_logits(logits: torch.Tensor, rows: Sequence[HostRow]) -> tuple[torch.Tensor, list[str | None]]:
    """The logits sampling sees, row by row (fp32 [N, vocab], a new tensor), and per row why its
    processing failed. Each row's chain runs guarded: a custom processor or grammar that raises
    fails its own row (left as it was), never the batch."""
    logits = logits.float().clone()
    errors: list[str | None] = [None] * len(rows)
    for i, row in enumerate(rows):
        try:
            _process_row(logits[i], row)
        except Exception as exc:  # noqa: BLE001 (this row's own inputs: it alone fails)
            errors[i] = f"sampling failed for this request: {type(exc).__name__}: {exc}"
    grammars = {i: row.grammar for i, row in enumerate(rows) if row.grammar is not None and errors[i] is None}
    if grammars:  # every grammar's mask at once, filled in parallel
        try:
            _mask(logits, grammars)
        except Exception:  # noqa: BLE001 (find the row whose grammar fails, mask the others)
            for i, grammar in grammars.items():
                try:
                    _mask(logits, {i: grammar})
                except Exception as exc:  # noqa: BLE001
                    errors[i] = f"structured_outputs: the grammar failed: {type(exc).__name__}: {exc}"
    return logits, errors


def _process_row(x: torch.Tensor, row: HostRow) -> None:
    """One row's chain, in place: allowed ids, bad words, logit bias, bans, processors, penalties."""
    p = row.params
    if p.allowed_token_ids is not None:
        allowed = torch.zeros_like(x, dtype=torch.bool)
        allowed[list(p.allowed_token_ids)] = True
        x.masked_fill_(~allowed, float("-inf"))
    recent = tuple(row.output_ids)
    for seq in row.bad_words:
        prefix = seq[:-1]
        if len(prefix) <= len(recent) and recent[len(recent) - len(prefix):] == prefix:
            x[seq[-1]] = float("-inf")
    for token, bias in p.logit_bias:
        x[token] += bias
    if row.banned:
        x[list(row.banned)] = float("-inf")
    for name in p.logits_processors:
        x.copy_(lookup(name)(tuple(row.output_ids), x))
    _penalise(x, p, row.prompt_ids, row.output_ids)


def _mask(logits: torch.Tensor, grammars: dict[int, GrammarMatcher]) -> None:
    """Apply the grammars' allowed-token masks to their rows, in place."""
    constrained = list(grammars)
    allowed = allowed_tokens(list(grammars.values()), logits.shape[1]).to(logits.device)
    logits[constrained] = logits[constrained].masked_fill(~allowed, float("-inf"))


def _penalise(x: torch.Tensor, p: SamplingParams, prompt_ids: Sequence[int],
              output_ids: Sequence[int]) -> None:
    """vLLM's apply_penalties on one row, in place."""
    if p.repetition_penalty == 1 and p.frequency_penalty == 0 and p.presence_penalty == 0:
        return
    counts = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
    if output_ids:
        counts.index_add_(0, torch.tensor(list(output_ids), device=x.device),
                          torch.ones(len(output_ids), device=x.device))
    if p.repetition_penalty != 1:
        seen = counts > 0
        if prompt_ids:
            seen[list(prompt_ids)] = True
        penalty = torch.where(seen, p.repetition_penalty, 1.0)
        x.copy_(torch.where(x > 0, x / penalty, x * penalty))
    x.sub_(p.frequency_penalty * counts)
    x.sub_(p.presence_penalty * (counts > 0).float())


def host_sample(logits: torch.Tensor, rows: Sequence[HostRow], tensors: SamplingTensors) -> HostSample:
    """Process and sample the rows' logits ([N, vocab]); logprobs for the rows that ask."""
    raw = logits.float()
    processed, errors = process_logits(raw, rows)
    tokens = select_tokens(processed, tensors, variant_for([r.params for r in rows]), may_branch=True)
    logprobs: list[TokenLogprobs | None] = [None] * len(rows)
    asking = [i for i, row in enumerate(rows) if row.params.logprobs is not None]
    if asking:
        lp = torch.log_softmax(raw[asking], dim=-1)
        chosen = tokens[asking]
        chosen_lp = lp.gather(1, chosen.unsqueeze(1))
        ranks = (lp >= chosen_lp).sum(dim=-1)
        top_n = max(rows[i].params.logprobs or 0 for i in asking)
        top = torch.topk(lp, top_n, dim=-1) if top_n else None
        for k, i in enumerate(asking):
            n = rows[i].params.logprobs or 0
            alternatives = () if top is None else tuple(
                zip(top.indices[k, :n].tolist(), top.values[k, :n].tolist(), strict=True))
            logprobs[i] = TokenLogprobs(int(chosen[k]), float(chosen_lp[k, 0]), int(ranks[k]), alternatives)
    return HostSample(tokens, tuple(logprobs), tuple(errors))


@dataclass(frozen=True)
class HostBatch:
    """The host path of one step (`contract.sampling.HostSampling`): its sampling rows, in row
    order, with their sampling inputs."""

    rows: tuple[HostRow, ...]
    tensors: SamplingTensors

    def sample(self, logits: torch.Tensor) -> SampledTokens:
        sample = host_sample(logits, self.rows, self.tensors.to(logits.device))
        return SampledTokens.read(sample.tokens, sample.logprobs, sample.errors)
