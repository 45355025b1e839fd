"""Llama 3.2 Vision's cross-attention decoder layer (models/mllama_cross.py) against HF transformers'
MllamaCrossAttentionDecoderLayer on a tiny random config, fp32, every parameter random (the gates
too). The token masks come from transformers' own processor functions for prompts with one image
(text before it sees nothing: HF's zeroed-row arithmetic) and with two images of different tile
counts (each token sees the tiles of the images it follows)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tt_backend.models.mllama_cross import MllamaCrossAttentionLayer

TEXT: dict[str, Any] = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                        "intermediate_size": 96, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
IMAGE, TILES, PER_TILE = 99, 4, 5  # the image token id; max tiles; tokens per tile (patches + class)


def hf_layer() -> Any:
    from transformers import MllamaTextConfig
    from transformers.models.mllama.modeling_mllama import MllamaCrossAttentionDecoderLayer

    torch.manual_seed(0)
    config = MllamaTextConfig(**TEXT, num_hidden_layers=1, cross_attention_layers=[0],
                              attn_implementation="eager")
    layer = MllamaCrossAttentionDecoderLayer(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.3)
    return layer


def processor_mask(ids: list[int], tiles: list[int]) -> torch.Tensor:
    """transformers' MllamaProcessor cross_attention_mask [1, tokens, images, TILES]."""
    from transformers.models.mllama.processing_mllama import (
        convert_sparse_cross_attention_mask_to_dense,
        get_cross_attention_token_mask,
    )

    sparse = [get_cross_attention_token_mask(ids, IMAGE)]
    return torch.from_numpy(convert_sparse_cross_attention_mask_to_dense(sparse, [tiles], TILES, len(ids)))


@pytest.fixture(scope="module")
def layers() -> tuple[Any, MllamaCrossAttentionLayer]:
    hf = hf_layer()
    ours = MllamaCrossAttentionLayer(TEXT).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)
    return hf, ours


@pytest.mark.parametrize(("ids", "tiles"), [
    ([1, 2, 3, IMAGE, 4, 5, 6, 7], [3]),  # three tokens before the image see nothing
    ([1, IMAGE, 2, 3, IMAGE, 4, 5], [2, 4]),
])
def test_the_layer_equals_hf(layers: tuple[Any, MllamaCrossAttentionLayer], ids: list[int],
                             tiles: list[int]) -> None:
    from transformers.models.mllama.modeling_mllama import _prepare_cross_attention_mask

    hf, ours = layers
    torch.manual_seed(len(ids))
    dense = processor_mask(ids, tiles)  # [1, T, images, TILES]
    features = torch.randn(1, len(tiles) * TILES * PER_TILE, TEXT["hidden_size"])
    x = torch.randn(1, len(ids), TEXT["hidden_size"])
    mask, full_rows = _prepare_cross_attention_mask(dense, num_vision_tokens=PER_TILE, dtype=torch.float32)
    sees = dense[0].repeat_interleave(PER_TILE, dim=2).reshape(len(ids), -1).bool()
    with torch.no_grad():
        ref = hf(x, cross_attention_states=features, cross_attention_mask=mask, attention_mask=None,
                 full_text_row_masked_out_mask=full_rows)
        ref = ref[0] if isinstance(ref, tuple) else ref
        k, v = ours.cross_kv(features[0])
        mine = ours(x[0], k, v, sees)
    assert k.shape == (len(tiles) * TILES * PER_TILE, 2, 16)
    assert (mine - ref[0]).abs().max().item() < 1e-5
    blind = ~sees.any(dim=-1)
    assert blind.tolist() == [i < ids.index(IMAGE) for i in range(len(ids))]


def test_a_token_that_sees_nothing_attends_to_every_image_token(
        layers: tuple[Any, MllamaCrossAttentionLayer]) -> None:
    """HF's arithmetic: a row that sees no image token attends, unmasked, to all of them (padding
    tiles too), and only its MLP branch is zeroed: its output is x plus the gated attention."""
    _, ours = layers
    torch.manual_seed(5)
    x = torch.randn(2, TEXT["hidden_size"])
    k, v = ours.cross_kv(torch.randn(TILES * PER_TILE, TEXT["hidden_size"]))
    with torch.no_grad():
        out = ours(x, k, v, torch.zeros(2, TILES * PER_TILE, dtype=torch.bool))
        attn = ours.cross_attn
        q = attn.q_norm(attn.q_proj(ours.input_layernorm(x)).view(2, 4, 16))
        kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # [keys, 4 heads, 16]
        weights = torch.softmax(torch.einsum("thd,khd->thk", q, kk) / 4.0, dim=-1)
        heads = torch.einsum("thk,khd->thd", weights, vv).reshape(2, -1)
        expected = x + ours.cross_attn_attn_gate.tanh() * attn.o_proj(heads)
    assert (out - expected).abs().max().item() < 1e-5
    assert (out - x).abs().max().item() > 1e-3


def test_bad_masks_and_activations_are_refused() -> None:
    layer = MllamaCrossAttentionLayer(TEXT)
    k, v = layer.cross_kv(torch.randn(6, TEXT["hidden_size"]))
    wrong = r"sees has shape \(2, 5\); expected \(tokens, image tokens\) = \(2, 6\)"
    with pytest.raises(ValueError, match=wrong):
        layer(torch.randn(2, TEXT["hidden_size"]), k, v, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="hidden_act='gelu': Mllama's text MLP is silu"):
        MllamaCrossAttentionLayer({**TEXT, "hidden_act": "gelu"})
