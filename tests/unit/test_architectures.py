"""Each torch architecture against HF transformers on a tiny random-weight model (fp32):
a prefill in two chunks plus 8 decode steps give logits within 1e-4."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tt_backend.contract.step import PlannedRow
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.models.loader import load_model
from tt_backend.runtime.inputs import prepare_host_inputs

BLOCK = 4
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6)

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-tied-gqa": ("LlamaConfig", {"tie_word_embeddings": True}),
    "llama-untied-mha-bias": ("LlamaConfig", {"num_key_value_heads": 4, "attention_bias": True}),
    "llama-llama3-rope": ("LlamaConfig", {"rope_parameters": {
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    "llama-linear-rope": ("LlamaConfig", {"rope_parameters": {
        "rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}}),
    "mistral-sliding-window": ("MistralConfig", {"sliding_window": 8, "head_dim": 16}),
    "qwen2-qkv-bias": ("Qwen2Config", {}),
    "qwen3-qk-norm": ("Qwen3Config", {"head_dim": 16}),
}


def build_hf(kind: str, overrides: dict[str, Any], out: Path, sharded: bool) -> Any:
    import transformers

    config = getattr(transformers, kind)(**{**TINY, **overrides})
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(out, max_shard_size="100KB" if sharded else "1GB")
    return model


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_hf(case: str, tmp_path: Path) -> None:
    kind, overrides = CASES[case]
    hf = build_hf(kind, overrides, tmp_path, sharded=case == "llama-tied-gqa")
    if case == "llama-tied-gqa":
        assert (tmp_path / "model.safetensors.index.json").is_file()
    ours = load_model(tmp_path, ComputePlan.resolve(torch.device("cpu"), "float32"))
    assert ours.architecture == kind.replace("Config", "ForCausalLM")
    spec = ours.spec
    kv = torch.zeros(spec.num_layers, 2, 16, BLOCK, spec.num_kv_heads, spec.head_dim)
    blocks = tuple(range(15, -1, -1))  # reversed page table
    tokens = torch.randint(0, 256, (20,), generator=torch.Generator().manual_seed(1)).tolist()

    def step(start: int, ids: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            batch = prepare_host_inputs([PlannedRow(tuple(ids), start, blocks, True)], BLOCK)
            return ours.module(batch, kv)[0]

    step(0, tokens[:11])
    logits = step(11, tokens[11:])
    worst = 0.0
    with torch.inference_mode():
        for _ in range(9):
            ref = hf(torch.tensor([tokens])).logits[0, -1]
            worst = max(worst, (logits - ref).abs().max().item())
            tokens.append(int(ref.argmax()))
            logits = step(len(tokens) - 1, tokens[-1:])
    assert worst < 1e-4, f"{case}: max |ours - HF| = {worst}"
