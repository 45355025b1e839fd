"""Tiny random vision-language checkpoints built from their HF configs, and HF transformers' greedy
tokens on them: what the vision families are checked against.

LLaVA: a 2-layer Llama text model (the default model's tokenizer with `<image>` added as its last
token) and a 2-layer CLIP tower over 32x32 images in 8x8 patches, so an image is 16 placeholder
tokens (17 patch features less the class token, HF's `default` strategy); the processor is
transformers' LlavaProcessor over CLIPImageProcessor, saved beside the weights with a chat template
that writes `<image>` for each image part. Weights are random (seeded), scaled so greedy choices are
far apart (HF's init gives near-uniform logits, where accumulation order could flip a choice).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image

LLAVA_TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() + ': ' }}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>\n"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}")
IMAGE_TOKENS = 16
"""Placeholder tokens of one image of the tiny LLaVA."""
GEMMA3_TEMPLATE = (
    "{% for message in messages %}<start_of_turn>{{ 'model' if message['role'] == 'assistant' else "
    "message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<start_of_image>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
GEMMA3_IMAGE_TOKENS = 4
"""Soft tokens of one image of the tiny Gemma 3 (its 4x4 patches pooled 2x2)."""


def build_tiny_llava(tokenizer_dir: Path, out: Path, seed: int = 0) -> None:
    import transformers
    from transformers import AutoTokenizer, CLIPImageProcessor, LlavaProcessor

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tokenizer.chat_template = LLAVA_TEMPLATE
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    text = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=2, image_size=32, patch_size=8)
    config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_token,
                                      vision_feature_layer=-1)
    model = transformers.LlavaForConditionalGeneration(config).eval()
    _randomize(model, seed)
    model.save_pretrained(out)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tokenizer, patch_size=8, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, chat_template=LLAVA_TEMPLATE)
    processor.save_pretrained(out)


def build_tiny_gemma3(tokenizer_dir: Path, out: Path, seed: int = 0, head_dim: int = 16) -> None:
    """Gemma 3 with its vision tower: a 2-layer text model (a sliding layer of window 8, then a global
    one; `head_dim` 32 for the Tenstorrent tier's tiles) and a 2-layer SigLIP over 32x32 images in 8x8
    patches, pooled to 4 soft tokens; the default model's tokenizer with Gemma 3's image tokens added,
    and transformers' Gemma3Processor."""
    import transformers
    from transformers import AutoTokenizer, Gemma3ImageProcessorPil, Gemma3Processor

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, extra_special_tokens={
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"})
    tokenizer.chat_template = GEMMA3_TEMPLATE
    text = transformers.Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=512,
        sliding_window=8, layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=head_dim,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    vision = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, image_size=32, patch_size=8,
                                             vision_use_head=False)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision,
                                       mm_tokens_per_image=GEMMA3_IMAGE_TOKENS,
                                       boi_token_index=tokenizer.boi_token_id,
                                       eoi_token_index=tokenizer.eoi_token_id,
                                       image_token_index=tokenizer.image_token_id)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    _randomize(model, seed)
    model.save_pretrained(out)
    processor = Gemma3Processor(image_processor=Gemma3ImageProcessorPil(size={"height": 32, "width": 32}),
                                tokenizer=tokenizer, image_seq_length=GEMMA3_IMAGE_TOKENS,
                                chat_template=GEMMA3_TEMPLATE)
    processor.save_pretrained(out)


QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QWEN2_VL_PATCH = 14
"""Pixels a side of a patch of the tiny Qwen2-VL (its merger joins 2x2 patches into a token)."""


def build_tiny_qwen2_vl(tokenizer_dir: Path, out: Path, seed: int = 0, version: str = "2",
                        hidden: int = 64) -> None:
    """Qwen2-VL (`version` "2.5": Qwen2.5-VL): a 2-layer Qwen2 text model with M-RoPE (head_dim 16: its
    8 rotated pairs split 2/3/3 over frames, rows and columns) and a 2-layer vision transformer over
    14x14 patches, images resized to between 56x56 and 112x112 pixels (a 40x30 picture: 56x84, 2x3
    tokens); Qwen2.5-VL's attends within windows of 2x2 tokens in its first block, the whole image in
    its second. The default model's tokenizer with Qwen2-VL's vision tokens added, and transformers'
    processor of the version. `hidden`: the text model's width (4 heads; 128 gives head_dim 32, the
    tile the Tenstorrent KV cache needs, its rotated pairs split 4/6/6)."""
    import transformers
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    from tt_backend.models.processors import images_only

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": [
        "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]})
    tokenizer.chat_template = QWEN2_VL_TEMPLATE
    ids = {name: tokenizer.convert_tokens_to_ids(f"<|{name}|>")
           for name in ("vision_start", "vision_end", "image_pad", "video_pad")}
    qwen25 = version == "2.5"
    section = [hidden // 32, 3 * hidden // 64, 3 * hidden // 64]
    text = {"vocab_size": len(tokenizer), "hidden_size": hidden, "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "rms_norm_eps": 1e-6, "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section}}
    common = {"depth": 2, "num_heads": 2, "patch_size": QWEN2_VL_PATCH, "temporal_patch_size": 2,
              "spatial_merge_size": 2}
    if qwen25:
        vision = {**common, "hidden_size": 32, "intermediate_size": 48, "out_hidden_size": hidden,
                  "window_size": 2 * 2 * QWEN2_VL_PATCH, "fullatt_block_indexes": [1]}
        config: Any = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision)
    else:
        config = transformers.Qwen2VLConfig(text_config=text, vision_config={
            **common, "embed_dim": 32, "hidden_size": hidden, "mlp_ratio": 2})
    for name in ("image", "video"):
        setattr(config, f"{name}_token_id", ids[f"{name}_pad"])
    config.vision_start_token_id, config.vision_end_token_id = ids["vision_start"], ids["vision_end"]
    model_class = transformers.Qwen2_5_VLForConditionalGeneration if qwen25 else \
        transformers.Qwen2VLForConditionalGeneration
    model = model_class(config).eval()
    _randomize(model, seed)
    model.save_pretrained(out)
    side = 2 * QWEN2_VL_PATCH
    image_processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": (2 * side) ** 2, "longest_edge": (4 * side) ** 2}, patch_size=QWEN2_VL_PATCH,
        merge_size=2, temporal_patch_size=2)
    processor = images_only("Qwen2_5_VLProcessor" if qwen25 else "Qwen2VLProcessor")(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=QWEN2_VL_TEMPLATE)
    processor.save_pretrained(out)


def build_tiny_qwen2_5_vl(tokenizer_dir: Path, out: Path, seed: int = 0) -> None:
    build_tiny_qwen2_vl(tokenizer_dir, out, seed, version="2.5")


MLLAMA_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|image|>{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MLLAMA_TILE_TOKENS = 5
"""Cross-attention tokens of one tile of the tiny Mllama (2x2 patches and the class token)."""


def build_tiny_mllama(tokenizer_dir: Path, out: Path, seed: int = 0, image_token_id: int | None = None,
                      heads: int = 4) -> None:
    """Llama 3.2 Vision: a 3-layer text model whose middle layer is a cross-attention layer, and a
    tiled vision tower (2 local layers, 1 global) over tiles of 28x28 pixels in 14x14 patches, up to 4
    tiles an image (20 cross-attention tokens); the default model's tokenizer with `<|image|>` added
    as its last token, whose id is the text model's vocab_size (past the head, as Llama 3.2 Vision's
    is), and transformers' MllamaProcessor. `image_token_id`: `<|image|>`'s id (and so the text
    vocab_size) instead of the next free one: 128256, as Llama 3.2 Vision's, for tt-metal's generator,
    which hard-codes it (the ids between are unused). `heads`: the text model's attention heads (of
    its 64 dimensions; 2 gives the 32-wide heads a Tenstorrent tile needs)."""
    import transformers
    from transformers import AutoTokenizer, MllamaImageProcessor, MllamaProcessor

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if image_token_id is not None:
        tokenizer = _with_token_at(tokenizer, "<|image|>", image_token_id)
    vocab = len(tokenizer) if image_token_id is None else image_token_id
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|image|>"]})
    tokenizer.chat_template = MLLAMA_TEMPLATE
    vision = {"hidden_size": 32, "attention_heads": 4, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_global_layers": 1, "image_size": 28, "patch_size": 14, "max_num_tiles": 4,
              "intermediate_layers_indices": [0], "vision_output_dim": 64}
    text = {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
            "cross_attention_layers": [1], "num_attention_heads": heads, "num_key_value_heads": 2,
            "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id, "pad_token_id": 0}
    config = transformers.MllamaConfig(vision_config=vision, text_config=text,
                                       image_token_index=tokenizer.convert_tokens_to_ids("<|image|>"))
    model = transformers.MllamaForConditionalGeneration(config).eval()
    _randomize(model, seed)
    model.save_pretrained(out)
    processor = MllamaProcessor(
        image_processor=MllamaImageProcessor(size={"height": 28, "width": 28}, max_image_tiles=4),
        tokenizer=tokenizer, chat_template=MLLAMA_TEMPLATE)
    processor.save_pretrained(out)


def _with_token_at(tokenizer: Any, token: str, token_id: int) -> Any:
    """`tokenizer` with the special `token` at id `token_id` (past its vocabulary, with a gap before
    it), in its tokenizer.json: as an added token and in its model's vocabulary at that id."""
    import tempfile

    tokenizer.add_special_tokens({"additional_special_tokens": [token]})
    with tempfile.TemporaryDirectory() as scratch:
        return _moved(tokenizer, token, token_id, Path(scratch))


def _moved(tokenizer: Any, token: str, token_id: int, folder: Path) -> Any:
    import json

    from transformers import AutoTokenizer

    tokenizer.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        path = folder / name
        data = json.loads(path.read_text(encoding="utf-8"))
        for entry in data.get("added_tokens", []):
            if entry["content"] == token:
                entry["id"] = token_id
        if "model" in data:  # the library keeps an added token's id only where its model's vocab holds it
            data["model"]["vocab"][token] = token_id
        decoder = data.get("added_tokens_decoder", {})
        for key in [k for k, v in decoder.items() if v["content"] == token]:
            decoder[str(token_id)] = decoder.pop(key)
        path.write_text(json.dumps(data), encoding="utf-8")
    moved = AutoTokenizer.from_pretrained(folder)
    assert moved.convert_tokens_to_ids(token) == token_id, moved.convert_tokens_to_ids(token)
    return moved


def _randomize(model: Any, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if "language_model" in name else 0.1
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen) if "norm" in name
                    else scale * torch.randn(p.shape, generator=gen))


def encoders(model_dir: Path) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """(our model loaded in fp32, its encode_image of seeded random 32x32 pixel values, HF's
    get_image_features of the same pixels as rows [tokens, hidden])."""
    from transformers import AutoModelForImageTextToText

    from tt_backend.devices.cpu.compute_plan import ComputePlan
    from tt_backend.models.loader import load_model

    ours = load_model(model_dir, ComputePlan.resolve(torch.device("cpu"), "float32"))
    hf: Any = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = hf.model.get_image_features(pixel_values=pixels).pooler_output
    ref = torch.cat(list(ref)) if isinstance(ref, list | tuple) else ref.reshape(-1, ref.shape[-1])
    return ours, ours.module.encode_image({"pixel_values": pixels}), ref


def picture(seed: int, size: tuple[int, int] = (40, 30)) -> bytes:
    """A PNG of random pixels (different seeds: different pictures)."""
    gen = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=gen, dtype=torch.uint8).numpy()
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


@dataclass(frozen=True)
class Greedy:
    prompt: list[int]
    """The processor's prompt ids."""
    tokens: list[int]
    """HF's greedy tokens after them."""
    logprobs: list[float]
    """Each token's log-probability."""


def hf_vision_greedy(model_dir: Path, text: str, images: list[bytes], n: int) -> Greedy:
    """HF's n greedy tokens after the processor's prompt of `text` and `images`: full forwards, no
    cache, fp32, never stopping at EOS."""
    from tt_backend.models.processors import load_processor

    processor = load_processor(model_dir)
    rgb = [Image.open(io.BytesIO(data)).convert("RGB") for data in images]
    encoded = dict(processor(text=[text], images=rgb or None, return_tensors="pt"))
    return _greedy(model_dir, encoded, n)


def hf_ids_greedy(model_dir: Path, ids: list[int], images: list[bytes], n: int) -> Greedy:
    """HF's n greedy tokens after a prompt of ids whose placeholders were expanded token by token
    (each into what the processor writes for it alone, as vLLM updates a token prompt)."""
    from tt_backend.models.processors import load_processor

    processor = load_processor(model_dir)
    rgb = [Image.open(io.BytesIO(data)).convert("RGB") for data in images]
    expanded: list[int] = []
    pixels = []
    for token in ids:
        if token != processor.image_token_id:
            expanded.append(token)
            continue
        alone = processor(text=[processor.image_token], images=[rgb[len(pixels)]], return_tensors="pt",
                          add_special_tokens=False)
        expanded += [int(t) for t in alone["input_ids"][0]]
        pixels.append(alone)
    tensor = torch.tensor([expanded])
    encoded = {"input_ids": tensor, "attention_mask": torch.ones_like(tensor),
               **{key: torch.cat([alone[key] for alone in pixels]) for key in pixels[0]
                  if key in ("pixel_values", "image_grid_thw")}}
    if "mm_token_type_ids" in processor.model_input_names:
        encoded["mm_token_type_ids"] = (tensor == processor.image_token_id).long()
    if "token_type_ids" in processor.model_input_names:
        encoded["token_type_ids"] = (tensor == processor.image_token_ids[0]).long()
    return _greedy(model_dir, encoded, n)


def _greedy(model_dir: Path, encoded: dict[str, Any], n: int) -> Greedy:
    from transformers import AutoModelForImageTextToText

    model: Any = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = encoded["input_ids"]
    prompt = [int(t) for t in ids[0]]
    out: list[int] = []
    logprobs: list[float] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(**encoded).logits[0, -1].float()
            out.append(int(logits.argmax()))
            logprobs.append(float(torch.log_softmax(logits, -1)[out[-1]]))
            grown = {"input_ids": out[-1], "attention_mask": 1, "token_type_ids": 0,
                     "mm_token_type_ids": 0}
            encoded = {k: torch.cat([v, torch.tensor([[grown[k]]])], dim=1) if k in grown else v
                       for k, v in encoded.items()}
            if "cross_attention_mask" in encoded:  # Mllama: a new token sees what the last one saw (HF)
                mask = encoded["cross_attention_mask"]
                encoded["cross_attention_mask"] = torch.cat([mask, mask[:, -1:]], dim=1)
    return Greedy(prompt, out, logprobs)


if __name__ == "__main__":  # python -m tests.vision_checkpoints OUT: the tiny LLaVA, to serve and try
    import sys

    from tt_backend.models.checkpoint import resolve_model_dir

    build_tiny_llava(resolve_model_dir(""), Path(sys.argv[1]))


def engine_greedy(engine: Any, text: str | list[int], seeds: list[int], request_id: str,
                  as_text: bool = True, image_of: Callable[[int], bytes] | None = None) -> Greedy:
    """The engine's greedy tokens (and their logprobs) for `text` with `picture(seed)` images, run alone
    to its end: the prompt as tt_llm's text_input brings it (`as_text`), or as input_ids (`text` may
    be ids); `image_of(seed)`: the picture of a seed (`picture`'s by default). Its `prompt` is as
    long as the expanded prompt (the engine reports its length)."""
    from tt_backend.sampling.params import SamplingParams
    from tt_backend.text.images import ImageLimits, decode_image

    outputs: list[Any] = []
    ids = text if isinstance(text, list) else engine.tokenizer(text).input_ids
    images = tuple(decode_image((image_of or picture)(s), "image", ImageLimits()) for s in seeds)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=0)
    engine.add_request(request_id, ids, params, outputs.append, images,
                       text if as_text and isinstance(text, str) else None)
    while engine.has_unfinished:
        engine.step()
    last = outputs[-1]
    assert last.finish_reason is not None and last.error is None, last
    tokens = [t for out in outputs for t in out.new_token_ids]
    logprobs = [position[t].logprob for out in outputs for t, position in zip(out.new_token_ids, out.logprobs,
                                                                               strict=True)]
    return Greedy([0] * last.num_prompt_tokens, tokens, logprobs)


def assert_same(ours: Greedy, hf: Greedy) -> None:
    """The same prompt length and tokens, each token's logprob within 1e-4 (fp32 accumulation order)."""
    assert (len(ours.prompt), ours.tokens) == (len(hf.prompt), hf.tokens)
    worst = max(abs(a - b) for a, b in zip(ours.logprobs, hf.logprobs, strict=True))
    assert worst < 1e-4, f"max |logprob ours - HF| = {worst}"
