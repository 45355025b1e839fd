"""Chat messages → the chat template's messages, and the images their content parts hold.

Content parts are vLLM's (vllm/entrypoints/chat_utils.py, `MM_PARSER_MAP`): `text`, `image_url`
(`{"type": "image_url", "image_url": {"url": ...}}`, OpenAI's) and `input_image` (`image_url` the URL
itself). A message of text parts reaches the template as one string, their texts joined; a message
with an image reaches it as HF processors' chat templates take one (vLLM's "openai" content
format): a list of `{"type": "text", "text": ...}` and `{"type": "image"}` parts in the client's
order, the images themselves going to tt_llm beside the prompt (its `image` input).

Every image is checked here, in the order the messages hold them (count, then each one's URL and
bytes: text/image_urls.py, text/images.py), so a bad one is a 400 naming its field whatever the
model; then a model that takes no images refuses the first one, naming it, before any rendering.
The front cannot ask the engine what its model takes: it reads the model's config.json, and a
vision-language config is one with a `vision_config` (Qwen2-VL, Mllama, Gemma 3, LLaVA, Mistral 3
all have one; the engine refuses images itself for a model whose ModelCapabilities take none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.schemas import ImagePart, Message, TextPart
from tt_backend.text.image_urls import image_from_url
from tt_backend.text.images import ImageInput, ImageLimits


@dataclass(frozen=True)
class ImagePolicy:
    """How the front takes images (its flags) and whether the served model takes any."""

    takes_images: bool = False
    limits: ImageLimits = field(default_factory=ImageLimits)
    local_root: Path | None = None
    """--allowed-local-media-path, resolved (None: file: URLs are refused)."""
    served_model: str = ""
    """The name clients send as `model`, for the refusal of a model that takes no images."""


def config_takes_images(hf_config: Mapping[str, Any]) -> bool:
    """Whether a model's config.json describes a vision-language model."""
    return isinstance(hf_config.get("vision_config"), dict)


def template_messages(messages: Sequence[Message], policy: ImagePolicy
                      ) -> tuple[list[dict[str, Any]], tuple[ImageInput, ...]]:
    """The messages as the chat template takes them, and their images (checked) in order."""
    images = _images(messages, policy)
    return [_message(i, m) for i, m in enumerate(messages)], images


def message_text(message: Message) -> str:
    """A message's text (its text parts joined), as an echo repeats it."""
    content = message.content
    if isinstance(content, list):
        return "".join(part.text for part in content if isinstance(part, TextPart))
    return content or ""


def _images(messages: Sequence[Message], policy: ImagePolicy) -> tuple[ImageInput, ...]:
    parts = [(f"messages[{i}].content[{j}]", part) for i, m in enumerate(messages)
             if isinstance(m.content, list) for j, part in enumerate(m.content)
             if not isinstance(part, TextPart)]
    limits = policy.limits
    if len(parts) > limits.max_images:
        where = parts[limits.max_images][0]
        raise BadRequest(f"{where}: a request may hold at most {limits.max_images} images (the front's "
                         f"--limit-mm-per-prompt), this one holds {len(parts)}", where)
    images = []
    for at, part in parts:
        url, where = (part.image_url.url, f"{at}.image_url.url") if isinstance(part, ImagePart) \
            else (part.image_url, f"{at}.image_url")
        try:
            images.append(image_from_url(url, where, limits, policy.local_root))
        except ValueError as exc:  # it names the field first
            raise BadRequest(str(exc), where) from None
    if parts and not policy.takes_images:
        first = parts[0][0]
        raise BadRequest(f"the model {policy.served_model!r} takes no images ({first}): it is a text-only "
                         "model; send text parts alone", first)
    return tuple(images)


def _message(index: int, message: Message) -> dict[str, Any]:
    extra = {k: getattr(message, k) for k in ("tool_calls", "tool_call_id", "name")
             if getattr(message, k) is not None}
    parts = message.content
    content: str | list[dict[str, str]]
    if parts is None:
        if not (message.role == "assistant" and message.tool_calls is not None):
            where = f"messages[{index}].content"
            raise BadRequest(f"{where} must be a string or a list of content parts (only an assistant turn "
                             "that calls tools may have none)", where)
        content = ""  # an assistant turn that only called tools
    elif isinstance(parts, str) or all(isinstance(part, TextPart) for part in parts):
        content = message_text(message)
    else:  # HF processors' form: the images' places among the texts
        content = [{"type": "text", "text": part.text} if isinstance(part, TextPart) else {"type": "image"}
                   for part in parts]
    return {"role": "system" if message.role == "developer" else message.role, "content": content, **extra}
