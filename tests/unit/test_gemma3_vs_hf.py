"""Gemma 3 (models/gemma3.py) against HF transformers' Gemma3ForCausalLM (fp32).

Tiny random-weight checkpoints built from HF configs, as tests/unit/test_architectures.py builds the
other families: a prefill in two chunks plus 9 decode steps over a reversed page table give logits
within 1e-4 (measured: 4.8e-6 at most), with a sliding window shorter than the context,
query_pre_attn_scalar != head_dim, a scaled global RoPE beside an unscaled local one, final-logit
soft-capping, and the older config spelling. Then the real Gemma 3 270M GGUF (slow), against HF loading
the same file: our model's logits, and the engine's greedy tokens in fp32 and on the GGUF's own
quantized blocks (the default weight_dtype).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tt_backend.contract.step import PlannedRow
from tt_backend.devices.cpu.compute_plan import ComputePlan
from tt_backend.models.gemma3 import Gemma3ForCausalLM
from tt_backend.models.gemma3_config import Gemma3Config
from tt_backend.models.loader import load_model
from tt_backend.runtime.inputs import prepare_host_inputs

BLOCK = 4
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
            sliding_window=6, query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 50000.0, "factor": 2.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})
CASES: dict[str, dict[str, Any]] = {
    "tied": {},
    "untied-mha-bias": {"tie_word_embeddings": False, "num_key_value_heads": 4, "attention_bias": True},
    "final-logit-softcapping": {"final_logit_softcapping": 3.0},
}
LEGACY = {"sliding_window_pattern": 2, "rope_theta": 50000.0, "rope_local_base_freq": 100.0,
          "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
"""The same layers and RoPE as TINY in the spelling of the hub's Gemma 3 configs (before transformers 5)."""


def build_hf(overrides: dict[str, Any], out: Path) -> Any:
    from transformers import Gemma3ForCausalLM as HFGemma3
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(**{**TINY, **overrides})
    model = HFGemma3(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=gen))  # norms too: (1 + w) is then 1 ± 0.3
    model.save_pretrained(out)
    return model


def compare(ours: Any, hf: Any, tokens: list[int], split: int, steps: int) -> float:
    """Max |ours - HF| over the logits of a two-chunk prefill and `steps` greedy decode steps."""
    spec = ours.spec
    kv = torch.zeros(spec.num_layers, 2, 16, BLOCK, spec.num_kv_heads, spec.head_dim)
    blocks = tuple(range(15, -1, -1))  # reversed page table

    def step(start: int, ids: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            batch = prepare_host_inputs([PlannedRow(tuple(ids), start, blocks, True)], BLOCK)
            return ours.module(batch, kv)[0]

    tokens = list(tokens)
    step(0, tokens[:split])
    logits = step(split, tokens[split:])
    worst = 0.0
    with torch.inference_mode():
        for _ in range(steps):
            ref = hf(torch.tensor([tokens])).logits[0, -1]
            worst = max(worst, (logits - ref).abs().max().item())
            assert logits.argmax().item() == ref.argmax().item()
            tokens.append(int(ref.argmax()))
            logits = step(len(tokens) - 1, tokens[-1:])
    return worst


def random_tokens(n: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(1)).tolist()


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_hf(case: str, tmp_path: Path) -> None:
    hf = build_hf(CASES[case], tmp_path)
    ours = load_model(tmp_path, ComputePlan.resolve(torch.device("cpu"), "float32"))
    assert ours.architecture == "Gemma3ForCausalLM" and isinstance(ours.module, Gemma3ForCausalLM)
    worst = compare(ours, hf, random_tokens(20), 11, 9)
    assert worst < 1e-4, f"{case}: max |ours - HF| = {worst}"


def test_legacy_config_spelling_reads_the_same_model(tmp_path: Path) -> None:
    hf = build_hf({}, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("layer_types", "rope_parameters", "_sliding_window_pattern"):
        config.pop(key, None)
    (tmp_path / "config.json").write_text(json.dumps({**config, **LEGACY}))
    ours = load_model(tmp_path, ComputePlan.resolve(torch.device("cpu"), "float32"))
    cfg = ours.module.config
    assert cfg.sliding == (True, False, True, False)
    glob = cfg.rope_global
    assert (glob.theta, glob.rope_type, glob.factor) == (50000.0, "linear", 2.0)
    assert (cfg.rope_local.theta, cfg.rope_local.rope_type) == (100.0, "default")
    assert compare(ours, hf, random_tokens(20), 11, 9) < 1e-4


def test_rows_of_different_lengths_in_one_batch(tmp_path: Path) -> None:
    """Two prompts (one padded) in one forward: each row's logits are HF's for that prompt alone."""
    hf = build_hf({}, tmp_path)
    ours = load_model(tmp_path, ComputePlan.resolve(torch.device("cpu"), "float32"))
    spec = ours.spec
    kv = torch.zeros(spec.num_layers, 2, 16, BLOCK, spec.num_kv_heads, spec.head_dim)
    prompts = [random_tokens(19), random_tokens(9)[::-1]]
    rows = [PlannedRow(tuple(prompts[0]), 0, (3, 9, 1, 12, 7), True),
            PlannedRow(tuple(prompts[1]), 0, (0, 14, 5), True)]  # block 15 holds the sink
    with torch.inference_mode():
        logits = ours.module(prepare_host_inputs(rows, BLOCK), kv)
        for i, ids in enumerate(prompts):
            ref = hf(torch.tensor([ids])).logits[0, -1]
            assert (logits[i] - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("field, value, message", [
    ("use_bidirectional_attention", True, "use_bidirectional_attention=true"),
    ("attn_logit_softcapping", 50.0, "attn_logit_softcapping=50.0 is not supported"),
    ("hidden_activation", "silu", "hidden_activation='silu' is not supported"),
    ("layer_types", ["sliding_attention", "chunked_attention"], r"layer_types has \['chunked_attention'\]"),
    ("layer_types", ["full_attention"], "layer_types has 1 entries for num_hidden_layers=2"),
    ("rope_parameters", {"rope_type": "default", "rope_theta": 1e4}, "is not per layer type"),
    ("rope_parameters", {"full_attention": {"rope_type": "yarn", "factor": 2.0}}, "rope_type='yarn'"),
])
def test_unsupported_config_is_refused(field: str, value: Any, message: str) -> None:
    hf = {**TINY, "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]}
    hf[field] = value
    with pytest.raises(ValueError, match=message):
        Gemma3Config.from_hf(hf)


# The GGUF carries no tokenizer.chat_template, so its tokenizer has none: this is Gemma's turn format
# as llama.cpp applies it for Gemma (src/llama-chat.cpp, LLM_CHAT_TEMPLATE_GEMMA: "assistant" is
# "model", each turn trimmed and closed by <end_of_turn>), after the BOS its GGUF asks for.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>"
    "{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
REAL_PROMPT = "What is the capital of France?"
REAL_LOGITS_TOLERANCE = 5e-4
"""fp32 on both sides, on the same dequantized weights, so only summation order differs (our fused
q/k/v and gate/up GEMMs and SDPA over the gathered, padded pages against HF's): measured 5.7e-5 at most
(7.1e-5 in an earlier run: the thread count changes the order) over these 12 steps, where logits reach
|41| (1.7e-6 relative). 5e-4 leaves 7x that margin and still sits far under any modelling error (on
the tiny model, a sliding window one longer or the two RoPEs swapped move the logits by 2.5 and 3.0)."""


@pytest.fixture(scope="module")
def real_gemma() -> tuple[Path, Path, Any]:
    """(the GGUF, its converted folder, its tokenizer with Gemma's chat template)."""
    from tt_backend.models.checkpoint import gemma3_270m_gguf_path, resolve_model_dir
    from tt_backend.text.tokenizer import load_tokenizer

    gguf = gemma3_270m_gguf_path()
    model_dir = resolve_model_dir(str(gguf))
    tokenizer = load_tokenizer(model_dir)
    assert not tokenizer.chat_template
    tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    return gguf, model_dir, tokenizer


@pytest.fixture(scope="module")
def hf_from_gguf(real_gemma: tuple[Path, Path, Any]) -> Any:
    """HF transformers' own load of the GGUF (dequantized to fp32), not our converted folder."""
    from transformers import AutoModelForCausalLM

    gguf = real_gemma[0]
    return AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()


@pytest.mark.slow
def test_real_gemma3_270m_gguf_matches_hf(real_gemma: tuple[Path, Path, Any], hf_from_gguf: Any) -> None:
    from tt_backend.text.tokenizer import encode_chat

    _, model_dir, tokenizer = real_gemma
    ours = load_model(model_dir, ComputePlan.resolve(torch.device("cpu"), "float32"))
    assert ours.architecture == "Gemma3ForCausalLM"
    assert ours.module.config.sliding.count(False) == 3 and ours.module.config.sliding_window == 512
    prompt = encode_chat(tokenizer, REAL_PROMPT)
    assert prompt[:4] == [2, 105, 2364, 107] and prompt[-3:] == [105, 4368, 107]  # <bos><start_of_turn>user\n
    worst = compare(ours, hf_from_gguf, prompt, len(prompt) // 2, 12)
    assert worst < REAL_LOGITS_TOLERANCE, worst


@pytest.mark.slow
def test_engine_serves_real_gemma3_270m_greedy_as_hf(real_gemma: tuple[Path, Path, Any],
                                                     hf_from_gguf: Any) -> None:
    """Through the whole engine (scheduler, runner, TorchScript-captured steps, sampler), batched."""
    from tests.unit.test_engine import run
    from tt_backend.config import EngineConfig
    from tt_backend.sampling.params import SamplingParams
    from tt_backend.text.tokenizer import encode_chat

    gguf, _, tokenizer = real_gemma
    prompts = [encode_chat(tokenizer, p) for p in (REAL_PROMPT, "Write a haiku about the sea.")]
    config = EngineConfig(model=str(gguf), dtype="float32", weight_dtype="float32", max_model_len=128)
    outputs = run(config, prompts, SamplingParams(temperature=0, max_tokens=16))
    for ids, outs in zip(prompts, outputs, strict=True):
        with torch.no_grad():
            expected = hf_from_gguf.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
        assert [t for o in outs for t in o.new_token_ids] == expected[0, len(ids):].tolist()


@pytest.mark.slow
def test_engine_serves_real_gemma3_270m_on_its_blocks_greedy_as_hf(real_gemma: tuple[Path, Path, Any],
                                                                   hf_from_gguf: Any) -> None:
    """The default weight_dtype (auto) below avx512_bf16: fp32 activations, every layer on the GGUF's
    blocks (quant_linear; the tied LM head on the embedding's Q8_0) but the fused q/k/v of the 9 layers
    whose attn_v is Q8_0 beside Q5_0 q and k (one fused layer holds one format): those are held in bf16
    like any dense layer of this plan. The reference is HF fp32 on exactly the weights served: the
    dequantized blocks (exact in fp32) and those dense weights rounded to bf16. Measured over the 12
    steps of the fp32 test (with q/k/v and gate/up all dense, before the Q5_0 kernel): max |ours - that|
    = 6.5e-5 (fp32 path: 5.7e-5), summation order only, against top-2 gaps of 0.48 at least; against
    unrounded HF fp32 it was 0.17, the bf16 rounding."""
    import copy
    from collections import Counter

    from tests.unit.test_engine import run
    from tt_backend.config import EngineConfig
    from tt_backend.devices.cpu.linears import WideLinear
    from tt_backend.devices.cpu.quant import QuantizedEmbedding, QuantizedLinear
    from tt_backend.models.gguf_linears import GgufLinears
    from tt_backend.sampling.params import SamplingParams
    from tt_backend.text.tokenizer import encode_chat

    plan = ComputePlan.resolve(torch.device("cpu"), quantized_checkpoint=True)
    if not plan.quantized or plan.activations != torch.float32:
        pytest.skip(f"weight_dtype=auto serves {plan.dtype_name} on this CPU, not blocks in fp32 activations")
    gguf, model_dir, tokenizer = real_gemma
    served = load_model(model_dir, plan, None, GgufLinears.read(gguf)).module
    kinds = Counter((".".join("*" if p.isdigit() else p for p in name.split(".")), m.format if
                     isinstance(m, QuantizedLinear | QuantizedEmbedding) else "bf16")
                    for name, m in served.named_modules()
                    if isinstance(m, QuantizedLinear | QuantizedEmbedding | WideLinear))
    assert kinds == {("model.embed_tokens", "q8_0"): 1, ("lm_head", "q8_0"): 1,
                     ("model.layers.*.self_attn.o_proj", "q4_k"): 18,
                     ("model.layers.*.mlp.down_proj", "q4_k"): 9, ("model.layers.*.mlp.down_proj", "q6_k"): 9,
                     ("model.layers.*.self_attn.qkv_proj", "q5_0"): 9,
                     ("model.layers.*.self_attn.qkv_proj", "bf16"): 9,
                     ("model.layers.*.mlp.gate_up_proj", "q5_0"): 18}
    dense = {name for name, m in served.named_modules() if isinstance(m, WideLinear)}
    del served
    fused = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
             "up_proj": "gate_up_proj"}
    reference = copy.deepcopy(hf_from_gguf)
    with torch.no_grad():
        for name, m in reference.named_modules():
            prefix, _, leaf = name.rpartition(".")
            if f"{prefix}.{fused.get(leaf, leaf)}" in dense:
                m.weight.copy_(m.weight.to(torch.bfloat16).float())
    prompts = [encode_chat(tokenizer, p) for p in (REAL_PROMPT, "Write a haiku about the sea.")]
    outputs = run(EngineConfig(model=str(gguf), max_model_len=128), prompts,
                  SamplingParams(temperature=0, max_tokens=16))
    for ids, outs in zip(prompts, outputs, strict=True):
        with torch.no_grad():
            expected = reference.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
        assert [t for o in outs for t in o.new_token_ids] == expected[0, len(ids):].tolist()
