"""weight_dtype=q8_0 / q4_0: an HF checkpoint's linear layers quantized at load into GGUF blocks and
served on the block kernels. The blocks are gguf-py's `gguf.quants.quantize` (llama.cpp's reference
quantizers) byte for byte; the model served is the fp32 model of the dequantized weights, which the
references here are built from with gguf's own quantize and dequantize: our dense fp32 model on them
(logits) and HF transformers on them (greedy tokens)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize
from gguf.quants import quantize as gguf_quantize
from safetensors.torch import load_file, save_file
from torch import nn

from tests.conftest import CHAT_PROMPTS
from tests.unit.test_engine_cpu_isa import MAX_TOKENS, greedy_tokens
from tt_backend.config import EngineConfig
from tt_backend.contract.step import PlannedRow
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.linears import WideLinear
from tt_backend.devices.cpu.quant import QuantFormat, QuantizedEmbedding, QuantizedLinear
from tt_backend.devices.cpu.quantize import quantize
from tt_backend.models.loader import load_model
from tt_backend.models.quantize_at_load import quantize_at_load
from tt_backend.runtime.inputs import prepare_host_inputs

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")

FORMATS: tuple[QuantFormat, ...] = ("q8_0", "q4_0")
GGML = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
CPU = torch.device("cpu")
LOGIT_TOLERANCE = 1e-4
"""Largest |logit difference| allowed between the served model and the dense fp32 model of the same
dequantized weights (logits of size ~20): only the order of the fp32 sums differs (measured 2.7e-5 for
q8_0, 3.8e-5 for q4_0; quantizing itself moves the logits by ~1 against the original fp32 model)."""


def gguf_blocks(weight: torch.Tensor, fmt: QuantFormat) -> np.ndarray:
    return gguf_quantize(weight.float().numpy(), GGML[fmt])


def weight_format(name: str, fmt: QuantFormat) -> QuantFormat:
    """The format quantize_at_load gives a checkpoint tensor: q8_0 for the embedding and LM head."""
    return "q8_0" if name in ("model.embed_tokens.weight", "lm_head.weight") else fmt


@pytest.mark.parametrize("fmt", FORMATS)
def test_blocks_equal_ggufs_quantize_byte_for_byte(fmt: QuantFormat, model_dir: Path) -> None:
    """Random rows over 9 decades of scale and blocks made to hit the edge cases (all zero, ties of
    +m and -m for the largest magnitude, exact halves after scaling, fp16-subnormal scales), then real
    weights of the default model (its Q4_1 grid makes many values equal)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(256, 1536, generator=gen) * torch.logspace(-7, 2, 256)[:, None]
    w[0] = 0
    w[1, :32] = torch.arange(32) - 16.0  # largest magnitude -16 alone
    w[2, :32], w[2, 7], w[2, 20] = 0.25, -0.5, 0.5  # +-0.5 tie: the first one sets the sign of d
    w[3, :32], w[3, 0] = torch.arange(32) - 15.5, 127.0  # q8_0: d = 1, so halves to round (away from 0)
    w[4, :64] = torch.randn(64, generator=gen) * 1e-9  # d underflows fp16
    assert np.array_equal(quantize(w, fmt).blocks.numpy(), gguf_blocks(w, fmt))
    state = load_file(next(model_dir.glob("*.safetensors")))
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
                 "model.layers.29.mlp.gate_proj.weight"):
        assert np.array_equal(quantize(state[name], fmt).blocks.numpy(), gguf_blocks(state[name], fmt)), name
    with pytest.raises(ValueError, match="multiple of 32 columns"):
        quantize(torch.zeros(4, 48), fmt)


@pytest.fixture(scope="module", params=FORMATS)
def dequantized_dir(request: pytest.FixtureRequest, model_dir: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> tuple[QuantFormat, Path]:
    """The default checkpoint with each 2-d weight replaced by gguf's dequantization of gguf's blocks
    of it, in the format quantize_at_load gives it: the model that weight_dtype=fmt serves, in fp32."""
    fmt: QuantFormat = request.param
    out = tmp_path_factory.mktemp(f"dequantized_{fmt}")
    for item in model_dir.iterdir():
        if item.suffix != ".safetensors":
            shutil.copy(item, out / item.name)
    for shard in model_dir.glob("*.safetensors"):
        state = load_file(shard)
        for name, w in state.items():
            if w.dim() == 2:
                f = weight_format(name, fmt)
                state[name] = torch.from_numpy(dequantize(gguf_blocks(w, f), GGML[f]).astype(np.float32))
        save_file(state, out / shard.name, metadata={"format": "pt"})
    return fmt, out


def test_served_logits_equal_the_fp32_model_of_the_dequantized_weights(
        dequantized_dir: tuple[QuantFormat, Path], model_dir: Path, chat_ids: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    """Every linear layer (fused qkv / gate_up included) and the tied embedding / LM head on blocks;
    the fused blocks are gguf's blocks of the parts stacked; prefill and 8 decode steps give the
    logits of our dense fp32 model (torch ops) on gguf's dequantized weights."""
    fmt, ref_dir = dequantized_dir
    plan = ComputePlan.resolve(CPU, weight_dtype=fmt)
    assert plan.quantized and plan.quantize_to == fmt and plan.activations == torch.float32
    with caplog.at_level(logging.INFO, logger="tt_backend.models.loader"):
        ours = load_model(model_dir, plan)
    kinds = [type(m) for m in ours.module.modules()]
    counts = [kinds.count(k) for k in (QuantizedLinear, QuantizedEmbedding, WideLinear, nn.Linear)]
    assert counts == [121, 1, 0, 0]
    head, embedding = ours.module.get_submodule("lm_head"), ours.module.get_submodule("model.embed_tokens")
    assert head.blocks is embedding.blocks and head.format == embedding.format == "q8_0"
    state = load_file(next(model_dir.glob("*.safetensors")))
    parts = [state[f"model.layers.3.self_attn.{p}_proj.weight"] for p in "qkv"]
    qkv = ours.module.get_submodule("model.layers.3.self_attn.qkv_proj")
    assert qkv.format == fmt
    assert np.array_equal(qkv.blocks.numpy(), np.concatenate([gguf_blocks(p, fmt) for p in parts]))
    assert f"quantized at load to {fmt} (embedding and LM head q8_0)" in caplog.text
    assert f"30 x model.layers.*.mlp.gate_up_proj {fmt}" in caplog.text and "1 x lm_head q8_0" in caplog.text
    assert f"tt_backend_{plan.level}::quant_linear" in caplog.text and "kept dense" not in caplog.text
    dense = load_model(ref_dir, ComputePlan.resolve(CPU, "float32", cpu_kernels="torch"))
    prompt = chat_ids("Name three colours.")
    assert worst_logit_difference(ours.module, dense.module, prompt) < LOGIT_TOLERANCE


def worst_logit_difference(ours: nn.Module, ref: nn.Module, prompt: list[int], steps: int = 8) -> float:
    """Largest |logit difference| over a prefill in two chunks and `steps` greedy decode steps (the
    reference's tokens fed to both), each step's argmax equal."""
    spec, block = ours.spec, 16  # type: ignore[attr-defined]
    blocks = (3, 0, 6, 1)
    caches = [torch.zeros(spec.num_layers, 2, 8, block, spec.num_kv_heads, spec.head_dim) for _ in range(2)]
    tokens, worst = list(prompt), 0.0

    def step(start: int, ids: list[int]) -> list[torch.Tensor]:
        rows = [PlannedRow(tuple(ids), start, blocks, True)]
        with torch.inference_mode():
            return [m(prepare_host_inputs(rows, block), kv)[0]
                    for m, kv in zip((ours, ref), caches, strict=True)]

    split = len(prompt) // 2
    step(0, tokens[:split])
    logits = step(split, tokens[split:])
    for _ in range(steps):
        worst = max(worst, (logits[0] - logits[1]).abs().max().item())
        assert logits[0].argmax().item() == logits[1].argmax().item()
        tokens.append(int(logits[1].argmax()))
        logits = step(len(tokens) - 1, tokens[-1:])
    return worst


def test_served_greedy_equals_hf_fp32_on_the_dequantized_weights(dequantized_dir: tuple[QuantFormat, Path],
                                                                 chat_ids: Any) -> None:
    """The engine with weight_dtype=fmt on the default model (a GGUF: its converted checkpoint
    requantized), against HF transformers' fp32 greedy on gguf's dequantized weights."""
    from transformers import AutoModelForCausalLM

    fmt, ref_dir = dequantized_dir
    prompts = [chat_ids(p) for p in CHAT_PROMPTS[:2]]
    hf = AutoModelForCausalLM.from_pretrained(ref_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        expected = [hf.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)[0, len(ids):]
                    .tolist() for ids in prompts]
    config = EngineConfig(max_model_len=128, weight_dtype=fmt)
    assert greedy_tokens(config, prompts) == expected


def test_layers_off_the_block_grid_stay_dense_and_an_untied_head_takes_q8_0(
        caplog: pytest.LogCaptureFixture) -> None:
    plan = ComputePlan.resolve(CPU, weight_dtype="q4_0")
    module = nn.Module()
    module.proj, module.odd = nn.Linear(64, 16), nn.Linear(48, 16, bias=False)
    module.lm_head = nn.Linear(64, 8)
    weight, bias = module.proj.weight.detach().clone(), module.proj.bias.detach().clone()
    lines = quantize_at_load(module, plan, "tiny")
    assert isinstance(module.odd, nn.Linear) and not isinstance(module.odd, QuantizedLinear)
    assert (module.proj.format, module.lm_head.format) == ("q4_0", "q8_0")
    assert np.array_equal(module.proj.blocks.numpy(), gguf_blocks(weight, "q4_0"))
    assert "  kept dense (in-features not a multiple of 32): odd" in lines
    x = torch.randn(3, 64)
    expected = x @ torch.from_numpy(dequantize(gguf_blocks(weight, "q4_0"), GGML["q4_0"])).T + bias
    torch.testing.assert_close(module.proj(x), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_refused_off_the_cpu_and_without_the_native_kernels(fmt: QuantFormat) -> None:
    assert EngineConfig(weight_dtype=fmt).weight_dtype == fmt
    with pytest.raises(ValueError, match=f"weight_dtype={fmt}: blocks quantized at load run on the native "
                                         "CPU kernels, not on cuda"):
        ComputePlan.resolve(torch.device("cuda"), weight_dtype=fmt)
    with pytest.raises(ValueError, match=rf"weight_dtype={fmt}: .* which are off \(cpu_kernels=torch\)"):
        ComputePlan.resolve(CPU, weight_dtype=fmt, cpu_kernels="torch")
    with pytest.raises(ValueError, match="weight_dtype='q5_0'"):
        EngineConfig(weight_dtype="q5_0")  # type: ignore[arg-type]
