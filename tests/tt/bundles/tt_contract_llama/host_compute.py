"""The numbers of the contract generator, computed on the host by HF transformers (never by our
model code), and the host "token cache" that stands for each submesh's paged KV cache.

A mock device computes nothing (its read-backs are zeros), so the cache a step reads is modelled by
what was written where: per submesh, for every slot (block, offset), the token written there and a
hash of the whole sequence up to it (-1: never written, -2: overwritten by a warmup). A slot's KV on
a device depends on its token, its position and every token before it, so a prefix is valid only if
each slot it reads holds the hash of exactly that prefix. A wrong page table, position or lane then
reads the wrong slots, and the step fails the check or computes other tokens than HF.

Logits are HF AutoModelForCausalLM (fp32, eval, no_grad) over the row's whole context, its last
position: a prefill runs the whole sequence at once and a decode extends the HF cache of the
sequence it continues (as HF `generate` does, which tests/conftest.py `hf_greedy` compares to);
a decode whose HF cache is gone (another row took it) recomputes the whole context. Each row is
computed alone, so which rows share a step never changes a row's numbers.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import Any

import torch

NEVER, WARMUP = -1, -2
_STATES = 64  # HF caches kept for sequences a decode may continue


@cache
def hf_model(path: str) -> Any:
    """HF's model of the checkpoint at `path` (hf_config._name_or_path), once per process."""
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(Path(path), dtype=torch.float32).eval()


def chain(tokens: list[int], seed: int = 0) -> list[int]:
    """Prefix hashes: out[q] identifies tokens[:q + 1] (after `seed`, the hash before them)."""
    out, h = [], seed
    for t in tokens:
        h = hash((h, t))
        out.append(h)
    return out


class TokenCache:
    """One submesh's slots: tokens and prefix hashes, [num_blocks, block_size] each, addressed
    through page tables as the device cache is."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_size = block_size
        self.tokens = torch.full((num_blocks, block_size), NEVER, dtype=torch.int64)
        self.hashes = torch.zeros((num_blocks, block_size), dtype=torch.int64)

    @property
    def num_blocks(self) -> int:
        return self.tokens.shape[0]

    def slots(self, table_row: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Flat slot of each position in [start, end) through one page-table row."""
        positions = torch.arange(start, end)
        return table_row.long()[positions // self.block_size] * self.block_size + positions % self.block_size

    def read(self, table_row: torch.Tensor, end: int) -> tuple[list[int], list[int]]:
        """Tokens and hashes of positions [0, end)."""
        slots = self.slots(table_row, 0, end)
        return self.tokens.view(-1)[slots].tolist(), self.hashes.view(-1)[slots].tolist()

    def write(self, table_row: torch.Tensor, start: int, tokens: list[int], hashes: list[int]) -> None:
        slots = self.slots(table_row, start, start + len(tokens))
        self.tokens.view(-1)[slots] = torch.tensor(tokens, dtype=torch.int64)
        self.hashes.view(-1)[slots] = torch.tensor(hashes, dtype=torch.int64)

    def clobber(self, table_row: torch.Tensor, start: int, end: int) -> None:
        """What a warmup writes (zeros tokens through a zeros page table): garbage KV."""
        slots = self.slots(table_row, start, end)
        self.tokens.view(-1)[slots] = WARMUP
        self.hashes.view(-1)[slots] = 0


def prefix_problem(tokens: list[int], hashes: list[int], want: list[int]) -> str | None:
    """Why slots holding (tokens, hashes) are not the prefix whose hashes are `want` (None: they are)."""
    for q, (t, h, w) in enumerate(zip(tokens, hashes, want, strict=True)):
        if t == NEVER:
            return f"position {q} was never written"
        if t == WARMUP:
            return f"position {q} holds what a warmup wrote (its zeros page table points at block 0)"
        if h != w:
            return f"position {q} holds token {t} of another sequence"
    return None


def context_problem(tokens: list[int], hashes: list[int]) -> str | None:
    """Why slots read by a decode are not one sequence written in order (None: they are)."""
    return prefix_problem(tokens, hashes, chain(tokens))


class HFReference:
    """Last-position logits of HF's model over a row's whole context."""

    def __init__(self, path: str) -> None:
        self.model = hf_model(path)
        self.vocab_size: int = self.model.config.vocab_size
        # transformers 5 names the KV cache `cache` (in and out); older ones `past_key_values`
        self._cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters \
            else "past_key_values"
        self._states: OrderedDict[int, Any] = OrderedDict()  # prefix hash -> HF cache of that prefix

    @torch.no_grad()
    def prefill(self, tokens: list[int], last_hash: int) -> torch.Tensor:
        """[vocab] logits after `tokens` (the whole sequence), keeping its HF cache."""
        out = self.model(torch.tensor([tokens]), use_cache=True)
        self._keep(last_hash, getattr(out, self._cache_arg))
        return out.logits[0, -1].float()

    @torch.no_grad()
    def decode(self, context: list[int], token: int, context_hash: int, new_hash: int) -> torch.Tensor:
        """[vocab] logits after `context` + [token]; extends the HF cache of `context` if kept."""
        state = self._states.pop(context_hash, None) if context else None
        if state is None:
            return self.prefill([*context, token], new_hash)
        out = self.model(torch.tensor([[token]]), use_cache=True, **{self._cache_arg: state})
        self._keep(new_hash, getattr(out, self._cache_arg))
        return out.logits[0, -1].float()

    def _keep(self, key: int, state: Any) -> None:
        self._states[key] = state
        self._states.move_to_end(key)
        while len(self._states) > _STATES:
            self._states.popitem(last=False)
