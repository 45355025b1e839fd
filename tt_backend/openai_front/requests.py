"""OpenAI request bodies → what one `tt_llm` stream needs, with OpenAI's field names in every error.

Chat messages go through the model's chat template to token ids here (as vLLM does: the template
already holds the special tokens, so nothing is added to them); a completion's prompt goes as the
client sent it, text (tokenised by `tt_llm` with the tokenizer's special tokens) or token ids.
Sampling fields map onto vLLM's SamplingParams names (`tt_llm`'s `sampling_parameters`), checked
here with SamplingParams itself so a bad value is a 400 naming the field before Triton sees it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.tool_calls import Tools, parse_tools
from tt_backend.sampling.params import SamplingParams

# OpenAI names with the same meaning in SamplingParams, and vLLM's extra sampling names.
_SAME = ("temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
         "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids",
         "skip_special_tokens", "include_stop_str_in_output", "bad_words", "allowed_token_ids",
         "structured_outputs")
# Accepted without effect (they describe the caller, or options of models this is not).
_IGNORED = ("user", "metadata", "store", "service_tier", "stream_options", "parallel_tool_calls",
            "reasoning_effort", "modalities", "prompt_cache_key", "safety_identifier")
# vLLM's router (vllm-router) re-serializes every request with these at their defaults (SGLang's
# and vLLM's extensions): accepted at exactly that value, refused at any other, naming the field.
_DEFAULT_ONLY: dict[str, bool] = {
    "no_stop_trim": False, "continue_final_message": False, "return_hidden_states": False,
    "separate_reasoning": True, "stream_reasoning": True, "include_reasoning": True}
_COMMON = ("model", "n", "stream", "max_tokens")
_CHAT = ("messages", "tools", "tool_choice", "response_format", "logprobs", "top_logprobs",
         "max_completion_tokens")
_COMPLETION = ("prompt", "logprobs", "echo")
_REFUSED = {
    "suffix": "suffix (insertion) is not supported",
    "functions": "functions is OpenAI's retired name; send tools",
    "function_call": "function_call is OpenAI's retired name; send tool_choice",
    "best_of": "best_of is not supported; send n=1",
}
Render = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], list[int]]
"""Messages (and tools, for templates that take them) → prompt token ids."""


@dataclass(frozen=True)
class GenerateCall:
    """One `tt_llm` stream: the prompt and its sampling parameters."""

    prompt: str | tuple[int, ...]
    """Text (`text_input`) or token ids (`input_ids`)."""
    sampling: dict[str, Any]
    stream: bool
    include_usage: bool
    logprobs: int | None
    """Top alternatives per token (0: the sampled token's only); None: no logprobs."""
    echo: bool = False
    tools: Tools | None = None
    """Tool calls the output may (auto) or must (required, named) hold."""


def chat_call(body: dict[str, Any], render: Render) -> GenerateCall:
    """A chat completion: `messages` (and `tools`) through the model's chat template (`render`, to
    token ids); `response_format` and forced tool calls as structured outputs."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of messages", "messages")
    rendered = [_message(i, m) for i, m in enumerate(messages)]
    logprobs = None
    if _bool(body, "logprobs", False):
        logprobs = _int(body, "top_logprobs", 0)
    elif body.get("top_logprobs") is not None:
        raise BadRequest("top_logprobs needs logprobs=true", "top_logprobs")
    _check_fields(body, _CHAT)
    both = body.get("max_completion_tokens"), body.get("max_tokens")
    if None not in both and both[0] != both[1]:
        raise BadRequest(f"max_completion_tokens ({both[0]!r}) and max_tokens ({both[1]!r}) disagree; "
                         "send max_completion_tokens alone (max_tokens is its older name)", "max_tokens")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    tools = parse_tools(body)
    constraint = _response_format(body.get("response_format"))
    if tools is not None and tools.constraint is not None:
        if constraint is not None:
            raise BadRequest(f"tool_choice {body.get('tool_choice')!r} constrains the output; "
                             "send response_format or a forced tool call, not both", "response_format")
        constraint = tools.constraint
    if constraint is not None:
        if body.get("structured_outputs") is not None:
            raise BadRequest("give response_format (or a forced tool call) or structured_outputs, not both",
                             "structured_outputs")
        body = {**body, "structured_outputs": constraint}
    prompt = _render(render, rendered, body["tools"] if tools is not None else None)
    call = _call(body, prompt, max_tokens, "max_completion_tokens" if "max_completion_tokens" in body
                 else "max_tokens", logprobs, echo=False, logprobs_name="top_logprobs")
    return dataclasses.replace(call, tools=tools)


def chat_prompt(messages: list[Any], tools: list[dict[str, Any]] | None, render: Render) -> tuple[int, ...]:
    """The token ids `messages` (checked as a chat request's are) and `tools` render to."""
    return _render(render, [_message(i, m) for i, m in enumerate(messages)], tools)


def _render(render: Render, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
            ) -> tuple[int, ...]:
    try:
        return tuple(render(messages, tools))
    except (TypeError, ValueError, KeyError) as exc:  # what the chat template cannot render
        raise BadRequest(f"cannot render the messages: {str(exc)[:500]}", "messages") from None


def _response_format(value: Any) -> dict[str, Any] | None:
    """OpenAI's response_format as a structured_outputs object (None: free text)."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"json_object": True}
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise BadRequest("response_format.json_schema must be an object with a `schema` object",
                             "response_format.json_schema")
        return {"json": spec.get("schema", {})}
    raise BadRequest(f"response_format.type must be text, json_object or json_schema, got {value!r}",
                     "response_format")


def completion_call(body: dict[str, Any]) -> GenerateCall:
    _check_fields(body, _COMPLETION)
    prompt = _prompt(body.get("prompt"))
    logprobs = body.get("logprobs")
    if logprobs is not None:
        logprobs = _int(body, "logprobs", 0)
    return _call(body, prompt, body.get("max_tokens", 16), "max_tokens", logprobs,
                 echo=_bool(body, "echo", False))


def _prompt(prompt: Any) -> str | tuple[int, ...]:
    """A completion's one prompt: text, token ids, or a list holding one of them."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                   for t in prompt):
        beyond = next((t for t in prompt if not -(2**31) <= t < 2**31), None)
        if beyond is not None:  # input_ids are INT32; which ids the vocabulary holds, tt_llm says
            raise BadRequest(f"prompt holds the token id {_short_int(beyond)}, beyond any token id (INT32)",
                             "prompt")
        return tuple(prompt)
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str | list) for p in prompt):
        raise BadRequest(f"prompt holds {len(prompt)} prompts; send one prompt per request", "prompt")
    raise BadRequest(f"prompt must be a string or a non-empty list of token ids, got {str(prompt)[:80]!r}",
                     "prompt")


def _call(body: dict[str, Any], prompt: str | tuple[int, ...], max_tokens: Any, max_name: str,
          logprobs: int | None, echo: bool, logprobs_name: str = "logprobs") -> GenerateCall:
    for name, reason in _REFUSED.items():
        if body.get(name) is not None:
            raise BadRequest(f"{name}: {reason}", name)
    if body.get("n", 1) != 1:
        raise BadRequest(f"n must be 1 (one choice per request), got {body.get('n')!r}", "n")
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and (not isinstance(options, dict) or not stream):
        raise BadRequest("stream_options must be an object and needs stream=true", "stream_options")
    sampling: dict[str, Any] = {name: body[name] for name in _SAME if body.get(name) is not None}
    if max_tokens is not None:
        sampling["max_tokens"] = max_tokens
    if logprobs is not None:
        sampling["logprobs"] = logprobs
    try:
        SamplingParams.from_dict(sampling)
    except (ValueError, TypeError, OverflowError) as exc:  # OverflowError: float() of a 400-digit int
        message = str(exc)
        named = [n for n in sampling if n in message]
        field = min(named, key=message.index) if named else None
        if field == "max_tokens":
            field, message = max_name, message.replace("max_tokens", max_name)
        elif field == "logprobs":  # the number of alternatives: chat calls it top_logprobs
            field, message = logprobs_name, message.replace("logprobs", logprobs_name, 1)
        raise BadRequest(message, field) from None
    return GenerateCall(prompt, sampling, stream, bool(options and options.get("include_usage")), logprobs,
                        echo)


def _check_fields(body: dict[str, Any], route_fields: tuple[str, ...]) -> None:
    """Refuse a field this route does not know (OpenAI does; a misspelt option would else be
    ignored without a word)."""
    for name, default in _DEFAULT_ONLY.items():
        if name in body and body[name] is not default:
            raise BadRequest(f"{name}={json.dumps(body[name])} is not supported (only its default, "
                             f"{json.dumps(default)})", name)
    known = {*_COMMON, *route_fields, *_SAME, *_IGNORED, *_REFUSED, *_DEFAULT_ONLY}
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadRequest(f"unknown field {unknown[0]!r}" + (f" (and {unknown[1:]})" if unknown[1:] else "")
                         + f"; this route takes {', '.join(sorted(known))}", unknown[0])


def _message(index: int, message: Any) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise BadRequest(f"{where} must be an object with role and content", where)
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool", "developer"):
        raise BadRequest(f"{where}.role must be system, user, assistant, tool or developer, got {role!r}",
                         f"{where}.role")
    content = message.get("content")
    extra = {k: message[k] for k in ("tool_calls", "tool_call_id", "name") if message.get(k) is not None}
    if content is None and (role == "assistant" and "tool_calls" in extra):
        content = ""  # an assistant turn that only called tools
    if isinstance(content, list):  # text parts
        texts = []
        for k, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                raise BadRequest(f"{where}.content[{k}] must be a text part "
                                 '({"type": "text", "text": ...})', f"{where}.content")
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(content, str):
        raise BadRequest(f"{where}.content must be a string or a list of text parts", f"{where}.content")
    return {"role": "system" if role == "developer" else role, "content": content, **extra}


def _short_int(value: int) -> str:
    return str(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"


def _bool(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be a boolean, got {value!r}", name)
    return value


def _int(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name} must be an integer, got {value!r:.80}", name)
    if value.bit_length() > 64:
        raise BadRequest(f"{name} must be an integer within 64 bits, got {_short_int(value)}", name)
    return value
