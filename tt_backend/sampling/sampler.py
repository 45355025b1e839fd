"""Token selection from logits: greedy, temperature, top-k, top-p, per-request seeds.

Each row draws its randomness from its own generator (seeded requests get a private one), so a
seeded request gives the same tokens whatever else is in the batch.
"""

from __future__ import annotations

import torch

from tt_backend.sampling.params import SamplingParams


def make_generator(seed: int, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


@torch.inference_mode()
def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator],
           banned: list[tuple[int, ...]] | None = None) -> list[int]:
    """One token per row of `logits` ([N, vocab], fp32); `banned[i]` are token ids row i may not
    produce (min_tokens keeps EOS and stop tokens out)."""
    tokens: list[int] = sample_tensor(logits, params, generators, banned).tolist()
    return tokens


@torch.inference_mode()
def sample_tensor(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator],
                  banned: list[tuple[int, ...]] | None = None) -> torch.Tensor:
    """As `sample`, leaving the token ids where the logits are (no host synchronisation)."""
    assert logits.shape[0] == len(params) == len(generators)
    for i, ids in enumerate(banned or []):
        if ids:
            logits[i, list(ids)] = float("-inf")
    tokens = logits.argmax(dim=-1)
    random_rows = [i for i, p in enumerate(params) if not p.greedy]
    for i in random_rows:
        tokens[i] = _sample_row(logits[i], params[i], generators[i])
    return tokens


def _sample_row(logits: torch.Tensor, p: SamplingParams, gen: torch.Generator) -> torch.Tensor:
    scaled = logits / p.temperature
    if p.top_k > 0 and p.top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, p.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if p.top_p < 1.0:
        scaled = apply_top_p(scaled, p.top_p)
    probs = torch.softmax(scaled, dim=-1)
    # Exponential race: argmax(p_i / E_i) with E_i ~ Exp(1) draws i with probability p_i.
    noise = torch.empty_like(probs).exponential_(generator=gen)
    return (probs / noise).argmax()


def apply_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of highest-probability tokens whose mass reaches top_p."""
    sorted_logits, order = torch.sort(logits, descending=False)
    cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - top_p
    drop[-1] = False  # always keep the most likely token
    return logits.masked_fill(drop.scatter(0, order, drop), float("-inf"))
