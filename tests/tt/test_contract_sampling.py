"""The contract generator's `sampling` variant (tt-metal's device sampling path, RULES.md 56-70) called
directly on a mock n150, through tests/tt/sampling_checks.py in one subprocess."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tt.mock_device import MOCK, mock_env

CHECKS = Path(__file__).with_name("sampling_checks.py")
MARK = "SAMPLING-RESULT "
VOCAB = 49152  # SmolLM2-135M


@pytest.fixture(scope="module")
def seen() -> Any:
    work = MOCK / "work"
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, str(CHECKS)], cwd=work, env=mock_env("n150"), capture_output=True,
                          text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    assert proc.returncode == 0 and lines, "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
    return json.loads(lines[-1][len(MARK):])


def test_greedy_device_tokens_are_the_argmax_of_the_current_variants_logits(seen: Any) -> None:
    assert seen["greedy"]["got"] == seen["greedy"]["want"] and len(seen["greedy"]["want"]) == 7
    assert seen["greedy"]["forms"] == {"prefill": [[1, 1], "torch.int64", [1]],
                                       "decode": [[4], "torch.int32", [4]]}
    # tokens: rows x 4 bytes (uint32); logits: rows x vocab x 2 (bfloat16), 4 decode rows
    assert seen["greedy"]["reads"] == [["prefill_tokens", 4], ["decode_tokens", 16], ["decode_tokens", 16],
                                       ["decode_logits", 4 * VOCAB * 2]]


def test_a_seeded_row_gives_the_same_tokens_alone_and_in_a_batch(seen: Any) -> None:
    seeds = seen["seeds"]
    assert seeds["batch"] == seeds["alone"] and len(seeds["alone"]) == 9
    assert seeds["other_seed"] != seeds["alone"]


def test_traced_sampled_decodes_feed_their_own_tokens_back_on_the_device(seen: Any) -> None:
    # host tokens are zeros after the first step; tt-metal reads the trace's input buffer instead
    assert seen["traced"]["tokens"] == seen["greedy"]["want"]
    assert seen["traced"]["sources"] == ["host"] + ["device"] * 5
    assert seen["traced"]["reads"] == ["decode_tokens", 16]


def test_what_the_device_sampler_cannot_do_is_a_violation(seen: Any) -> None:
    refusals = seen["refusals"]
    for key in ("prefill_top_k_50", "decode_top_k_50"):
        assert refusals[key].startswith("ContractViolation: tt-metal contract: ")
        assert "top_k=50 exceeds the device sampler's limit of 32" in refusals[key]
    assert refusals["decode_top_k_vocab"] is None  # "no top-k" (vocab_size, as P sends it): tt-metal's top 32
    assert "has 3 entries for the decode batch of 4" in refusals["decode_short_list"]
    assert "reaches slot 0 only" in refusals["decode_scalar"]
    assert "is_tokens=False) of decode outputs holding tokens" in refusals["wrong_is_tokens"]


def test_the_other_variants_still_refuse_sampling_params(seen: Any) -> None:
    refusals = seen["refusals"]
    for key in ("current", "current_decode"):
        assert refusals[key].startswith("ContractViolation: tt-metal contract: ")
        assert "declares no supports_sample_on_device" in refusals[key]
    assert refusals["older"].startswith("TypeError: ") and "sampling_params" in refusals["older"]
    assert refusals["capabilities"] == {
        "current": {"supports_prefix_caching": True, "supports_async_decode": True},
        "sampling": {"supports_prefix_caching": True, "supports_async_decode": True,
                     "supports_sample_on_device": True}}
