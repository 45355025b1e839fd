"""Our paged-attention Llama against HF transformers on the default model's weights (fp32)."""

from pathlib import Path
from typing import Any

import torch

from tt_backend.contract.step import PlannedRow
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.models.loader import load_model
from tt_backend.runtime.inputs import prepare_host_inputs

BLOCK = 16


def test_chunked_prefill_and_decode_logits_match_hf(model_dir: Path, chat_ids: Any) -> None:
    from transformers import AutoModelForCausalLM

    ours = load_model(model_dir, ComputePlan.resolve(torch.device("cpu"), "float32"))
    cfg = ours.spec
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt = chat_ids("Name three colours.")
    blocks = (7, 2, 5, 11)  # deliberately out of order
    kv = torch.zeros(cfg.num_layers, 2, 12, BLOCK, cfg.num_kv_heads, cfg.head_dim)
    tokens = list(prompt)

    def step(start: int, ids: list[int]) -> torch.Tensor:
        rows = [PlannedRow(tuple(ids), start, blocks, True)]
        with torch.inference_mode():
            return ours.module(prepare_host_inputs(rows, BLOCK), kv)[0]

    split = len(prompt) // 2
    step(0, tokens[:split])
    logits = step(split, tokens[split:])
    worst = 0.0
    with torch.inference_mode():
        for _ in range(8):
            ref = hf(torch.tensor([tokens])).logits[0, -1]
            worst = max(worst, (logits - ref).abs().max().item())
            assert logits.argmax().item() == ref.argmax().item()
            tokens.append(int(ref.argmax()))
            logits = step(len(tokens) - 1, tokens[-1:])
    assert worst < 1e-4, worst
