"""The real model served at every `cpu_isa` level this machine has (an AMX machine runs amx,
avx512_bf16, avx512, avx2 and portable): greedy outputs against HF transformers in fp32."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import CHAT_PROMPTS
from tests.unit.test_engine import run
from tt_backend.config import EngineConfig
from tt_backend.contract.step import PlannedRow
from tt_backend.devices.cpu.compute_plan import BF16_LEVELS, ComputePlan
from tt_backend.devices.cpu.isa import probe
from tt_backend.models.loader import LoadedModel, load_model
from tt_backend.runtime.inputs import prepare_host_inputs
from tt_backend.sampling.params import SamplingParams

MAX_TOKENS = 24
BLOCK, BLOCKS = 16, (5, 0, 7, 2)  # 64 tokens of cache on blocks out of order
LEVELS = probe().levels
pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")


def greedy_tokens(config: EngineConfig, prompts: list[list[int]]) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    outputs = run(config, prompts, params, queue_before_start=True)
    return [[t for o in outs for t in o.new_token_ids] for outs in outputs]


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_in_fp32_equals_hf(level: str, chat_ids: Any, hf_greedy: Any) -> None:
    """The level's kernels (attention, norms, SiLU, RoPE) in fp32, every step traced."""
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    config = EngineConfig(dtype="float32", cpu_isa=level, cpu_kernels="native", max_model_len=128)  # type: ignore[arg-type]
    assert greedy_tokens(config, prompts) == [hf_greedy(tuple(ids), MAX_TOKENS) for ids in prompts]


@pytest.fixture(scope="module")
def bf16_weights_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default checkpoint with every weight rounded to bf16 (kept as fp32): what `dtype=auto`
    computes without bf16 hardware (below avx512_bf16) is exactly this model in fp32."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("bf16_weights")
    for item in model_dir.iterdir():
        if item.suffix != ".safetensors":
            shutil.copy(item, out / item.name)
    for shard in model_dir.glob("*.safetensors"):
        save_file({k: v.bfloat16().float() for k, v in load_file(shard).items()}, out / shard.name,
                  metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def hf_greedy_bf16_weights(bf16_weights_dir: Path) -> Callable[[tuple[int, ...]], list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(bf16_weights_dir, dtype=torch.float32).eval()

    def generate(ids: tuple[int, ...]) -> list[int]:
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)
        return out[0, len(ids):].tolist()

    return generate


@pytest.mark.parametrize("level", [lv for lv in LEVELS if lv not in BF16_LEVELS])
def test_auto_without_bf16_hardware_equals_hf_fp32_on_the_bf16_weights(
        level: str, bf16_weights_dir: Path, chat_ids: Any, hf_greedy_bf16_weights: Any) -> None:
    """dtype=auto streams bf16 linear weights (wide_linear) into fp32 activations."""
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    config = EngineConfig(model=str(bf16_weights_dir), cpu_isa=level, max_model_len=128)  # type: ignore[arg-type]
    assert config.dtype == "auto"
    assert greedy_tokens(config, prompts) == [hf_greedy_bf16_weights(tuple(ids)) for ids in prompts]


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_in_bf16_follows_hf_fp32_within_bf16_precision(level: str, model_dir: Path, chat_ids: Any,
                                                                   hf_greedy: Any) -> None:
    """bf16 activations at every level (oneDNN prepacked from avx512 on, torch's matmuls below), the
    prompt prefilled and HF's fp32 greedy answer fed back token by token: at every step HF's token is
    within half a logit of the bf16 maximum (4 bf16 steps at the logits' size, ~25) and no logit is
    off by more than 1.5. Greedy bf16 tokens themselves are not compared: the first token of this
    answer wins by 0.08 in fp32, less than one bf16 step."""
    ours = load_model(model_dir, ComputePlan.resolve(torch.device("cpu"), "bfloat16", level, "native"))
    follows_hf_fp32_within_bf16(ours, model_dir, chat_ids(CHAT_PROMPTS[0]), hf_greedy, level)


def follows_hf_fp32_within_bf16(ours: LoadedModel, model_dir: Path, prompt: list[int], hf_greedy: Any,
                                label: str) -> None:
    """The bf16 model `ours` prefills `prompt`, then decodes HF's fp32 greedy answer one row a step:
    HF's token is within half a logit of the maximum and no logit is off HF's by 1.5 or more."""
    from transformers import AutoModelForCausalLM

    cfg = ours.spec
    answer = hf_greedy(tuple(prompt), MAX_TOKENS)
    kv = torch.zeros(cfg.num_layers, 2, 8, BLOCK, cfg.num_kv_heads, cfg.head_dim, dtype=torch.bfloat16)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokens = list(prompt)
    with torch.inference_mode():
        logits = ours.module(prepare_host_inputs([PlannedRow(tuple(prompt), 0, BLOCKS, True)], BLOCK), kv)[0]
        for token in answer:
            want = hf(torch.tensor([tokens])).logits[0, -1]
            assert logits[token] >= logits.max() - 0.5, (label, len(tokens))
            assert (logits - want).abs().max() < 1.5, (label, len(tokens))
            tokens.append(token)
            step = [PlannedRow((token,), len(tokens) - 1, BLOCKS, True)]
            logits = ours.module(prepare_host_inputs(step, BLOCK), kv)[0]
