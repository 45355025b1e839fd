"""The default GGUF served on its quantized blocks (weight_dtype=quantized; auto below avx512_bf16):
the blocks read from the file are the weights transformers' dequantizing loader produced, bit for
bit (q and k un-permuted), and greedy tokens equal HF transformers' fp32 greedy on those weights.
(`test_engine_cpu_isa`'s fp32 test serves the same blocks at every level.)"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import CHAT_PROMPTS
from tests.unit.test_engine_cpu_isa import MAX_TOKENS, greedy_tokens
from tt_backend.config import EngineConfig
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.devices.cpu.isa import probe
from tt_backend.devices.cpu.linears import WideLinear
from tt_backend.devices.cpu.quant import QuantizedEmbedding, QuantizedLinear
from tt_backend.models.gguf_linears import GgufLinears, gguf_source
from tt_backend.models.loader import load_model

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                reason="no C++ compiler: the native kernels cannot be built here")


@pytest.fixture(scope="module")
def blocks() -> GgufLinears:
    path = gguf_source("")
    assert path is not None
    return GgufLinears.read(path)


def test_the_files_blocks_are_the_converted_weights(blocks: GgufLinears, model_dir: Path) -> None:
    """Every Q4_1 linear weight and the Q8_0 embedding (the tied LM head) dequantizes to exactly the
    fp32 weight of the checkpoint transformers converted (q/k rows in HF's order)."""
    state: dict[str, torch.Tensor] = {}
    for shard in model_dir.glob("*.safetensors"):
        state |= load_file(shard)
    assert blocks.formats == {"q4_1": 210, "q8_0": 1}
    assert blocks.tensors["model.embed_tokens.weight"].format == "q8_0"
    mismatched = [name for name, w in blocks.tensors.items() if not torch.equal(w.dequantize(), state[name])]
    assert mismatched == []
    assert sum(w.nbytes for w in blocks.tensors.values()) == 96_436_224  # of the file's 98.4 MB


def test_every_linear_layer_and_the_embedding_keep_their_blocks(blocks: GgufLinears, model_dir: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    plan = ComputePlan.resolve(torch.device("cpu"), weight_dtype="quantized", quantized_checkpoint=True)
    with caplog.at_level(logging.INFO, logger="tt_backend.models.loader"):
        module = load_model(model_dir, plan, quantized=blocks).module
    kinds = [type(m) for m in module.modules()]
    assert [kinds.count(k) for k in (QuantizedLinear, QuantizedEmbedding, WideLinear)] == [121, 1, 0]
    head, embedding = module.get_submodule("lm_head"), module.get_submodule("model.embed_tokens")
    assert head.blocks is embedding.blocks  # tied: one copy of the Q8_0 table
    log = caplog.text
    assert "30 x model.layers.*.self_attn.qkv_proj q4_1" in log and "1 x lm_head q8_0" in log
    assert f"tt_backend_{plan.level}::quant_linear" in log and "kept dense" not in log


@pytest.mark.parametrize("level", sorted({"portable", probe().best}))
def test_the_blocks_served_equal_hf_fp32(level: str, chat_ids: Any, hf_greedy: Any) -> None:
    """dtype=auto and weight_dtype=quantized (what auto is below avx512_bf16): fp32 activations on the
    quantized blocks. The kernels sum in another order than HF's GEMMs (lanes, then a fixed tree;
    decode rows streamed, prefill through torch's GEMM band by band); on these prompts the greedy
    tokens are still exactly HF's."""
    prompts = [chat_ids(p) for p in CHAT_PROMPTS]
    config = EngineConfig(cpu_isa=level, max_model_len=128, weight_dtype="quantized")  # type: ignore[arg-type]
    assert greedy_tokens(config, prompts) == [hf_greedy(tuple(ids), MAX_TOKENS) for ids in prompts]
