"""A model's HF processor, as transformers builds it, and Qwen2-VL's without its video half where
torchvision is absent.

transformers 5 builds Qwen2VLProcessor (and Qwen2.5-VL's) with a video processor, whose classes need
torchvision; on a machine without it (PyPI's torchvision 0.28.0, the one for torch 2.13, links CUDA
torch's libraries and does not load beside the CPU build this project installs) the processor does
not construct at all, for images either. `ImagesOnly`
is transformers' own processor class with the video processor left out of its parts: its image
processor, tokenizer, placeholder expansion (`replace_image_token`) and call are transformers', not
re-written; a prompt that asks it for video is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VIDEO_HALF = ("Qwen2VLProcessor", "Qwen2_5_VLProcessor")
"""Processors whose construction needs torchvision only for their video processor."""


def load_processor(model_dir: Path) -> Any:
    from transformers import AutoProcessor
    from transformers.utils import is_torchvision_available

    name = _processor_class(model_dir)
    if name not in VIDEO_HALF or is_torchvision_available():
        return AutoProcessor.from_pretrained(model_dir)
    return images_only(name).from_pretrained(model_dir)


def images_only(name: str) -> Any:
    """transformers' processor class `name` whose parts are its image processor and tokenizer."""
    import transformers

    base = getattr(transformers, name)

    class ImagesOnly(base):  # type: ignore[misc, valid-type]
        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                     **kwargs: Any) -> None:
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            mixin = transformers.ProcessorMixin
            mixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

        def __call__(self, *args: Any, videos: Any = None, **kwargs: Any) -> Any:
            if videos is not None:
                raise ValueError(f"{name} without torchvision takes images, not videos")
            return super().__call__(*args, **kwargs)

    ImagesOnly.__name__ = ImagesOnly.__qualname__ = name
    return ImagesOnly


def _processor_class(model_dir: Path) -> str | None:
    for file in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        path = model_dir / file
        if path.is_file():
            name = json.loads(path.read_text(encoding="utf-8")).get("processor_class")
            if name:
                return str(name)
    return None
