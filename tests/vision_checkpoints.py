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
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.3 if "language_model" in name else 0.1
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen) if "norm" in name
                    else scale * torch.randn(p.shape, generator=gen))
    model.save_pretrained(out)
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tokenizer, patch_size=8, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, chat_template=LLAVA_TEMPLATE)
    processor.save_pretrained(out)


def picture(seed: int, size: tuple[int, int] = (40, 30)) -> bytes:
    """A PNG of random pixels (different seeds: different pictures)."""
    gen = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=gen, dtype=torch.uint8).numpy()
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def hf_greedy(model_dir: Path, text: str, images: list[bytes], n: int) -> tuple[list[int], list[int]]:
    """(the processor's prompt ids, HF's n greedy tokens after them): full forwards, no cache, fp32,
    never stopping at EOS."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    model: Any = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    rgb = [Image.open(io.BytesIO(data)).convert("RGB") for data in images]
    encoded = processor(text=[text], images=rgb or None, return_tensors="pt", add_special_tokens=False)
    ids = encoded["input_ids"]
    prompt = [int(t) for t in ids[0]]
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(**{**encoded, "input_ids": ids,
                              "attention_mask": torch.ones_like(ids)}).logits[0, -1]
            out.append(int(logits.argmax()))
            ids = torch.cat([ids, torch.tensor([[out[-1]]])], dim=1)
    return prompt, out


if __name__ == "__main__":  # python -m tests.vision_checkpoints OUT: the tiny LLaVA, to serve and try
    import sys

    from tt_backend.models.checkpoint import resolve_model_dir

    build_tiny_llava(resolve_model_dir(""), Path(sys.argv[1]))
