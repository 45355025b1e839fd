"""OpenAI request bodies → what their `tt_llm` streams need (n of them, one per choice), with
OpenAI's field names in every error. The bodies' shapes and types are the pydantic models of
schemas.py; what is checked here is what they cannot say (values, fields that exclude each other).

Chat messages go through the model's chat template to token ids here (as vLLM does: the template
already holds the special tokens, so nothing is added to them); a completion's prompt goes as the
client sent it, text (tokenised by `tt_llm` with the tokenizer's special tokens) or token ids.
A chat's image parts are checked in chat_messages.py and go to `tt_llm` beside the prompt (`image`).
Sampling fields map onto vLLM's SamplingParams names (`tt_llm`'s `sampling_parameters`), checked
here with SamplingParams itself so a bad value is a 400 naming the field before Triton sees it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from tt_backend.openai_front.chat_messages import ImagePolicy, message_text, template_messages
from tt_backend.openai_front.chat_template import RESERVED_KWARGS, Render, TemplateArgs
from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.schemas import (
    ChatCompletionRequest,
    ChatTemplateFields,
    CompletionRequest,
    GenerateRequest,
    ResponseFormat,
    only_values,
    validated,
)
from tt_backend.openai_front.tool_calls import Tools, parse_tools, tool_dicts
from tt_backend.openai_front.unknown_fields import UnknownFields
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.images import ImageInput

# OpenAI names with the same meaning in SamplingParams, and vLLM's extra sampling names.
_SAME = ("temperature", "top_p", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
         "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids",
         "skip_special_tokens", "include_stop_str_in_output", "bad_words", "allowed_token_ids",
         "logits_processors")
_REFUSED = {
    "suffix": "suffix (insertion) is not supported",
    "functions": "functions is OpenAI's retired name; send tools",
    "function_call": "function_call is OpenAI's retired name; send tool_choice",
}
_SEEDS = 2**64
"""The engine's seeds are [0, 2**64); a request's 64-bit signed seed maps onto them modulo 2**64
(two's complement: -1 is 2**64 - 1), so every seed vLLM takes is one seed here, and no two collide."""


@dataclass(frozen=True)
class RequestPolicy:
    """The front's rules for request bodies (its flags)."""

    fields: UnknownFields = field(default_factory=UnknownFields)
    trust_request_chat_template: bool = False
    """Whether a request may bring its own `chat_template` (vLLM's --trust-request-chat-template)."""
    max_n: int = 128
    """The most choices one request may ask for (OpenAI's limit); each is one engine request."""
    images: ImagePolicy = field(default_factory=ImagePolicy)

    def __post_init__(self) -> None:
        if self.max_n < 1:
            raise ValueError(f"max_n must be >= 1, got {self.max_n}")


@dataclass(frozen=True)
class GenerateCall:
    """One OpenAI request's `tt_llm` streams (n of them): the prompt and their sampling parameters."""

    prompt: str | tuple[int, ...]
    """Text (`text_input`) or token ids (`input_ids`)."""
    sampling: dict[str, Any]
    stream: bool
    include_usage: bool
    logprobs: int | None
    """Top alternatives per token (0: the sampled token's only); None: no logprobs."""
    echo: bool = False
    echoed: str | None = None
    """What an echo puts ahead of the output when the call already knows it (chat: the last
    message); None: the prompt (a completion's, as text once tt_llm took it)."""
    request_id: str | None = None
    """The client's id for the response (vLLM's `request_id`)."""
    tools: Tools | None = None
    """Tool calls the output may (auto) or must (required, named) hold."""
    n: int = 1
    """Choices: n engine requests for the same prompt (`sampling_for(i)`)."""
    continuous_usage: bool = False
    """Usage (the choice's tokens so far) in every streamed chunk (vLLM's continuous_usage_stats)."""
    images: tuple[ImageInput, ...] = ()
    """The chat's images, in order (tt_llm's `image` input)."""

    def sampling_for(self, index: int) -> dict[str, Any]:
        """Choice `index`'s parameters: a seeded request's choice i samples with seed + i (mod
        2**64), so n seeded choices differ from each other and repeat on every request."""
        seed = self.sampling.get("seed")
        return self.sampling if seed is None or index == 0 else {**self.sampling,
                                                                 "seed": (seed + index) % _SEEDS}


def chat_call(body: dict[str, Any], render: Render, policy: RequestPolicy | None = None) -> GenerateCall:
    """A chat completion: `messages` (and `tools`) through the chat template (`render`, to token
    ids); `response_format`, vLLM's guided fields and forced tool calls as structured outputs."""
    policy = policy or RequestPolicy()
    request = validated(ChatCompletionRequest, body)
    policy.fields.check(request, "/v1/chat/completions")
    check_defaults(request)
    logprobs = None
    if request.logprobs:
        logprobs = request.top_logprobs or 0
    elif request.top_logprobs:
        raise BadRequest("top_logprobs needs logprobs=true", "top_logprobs")
    both = request.max_completion_tokens, request.max_tokens
    if None not in both and both[0] != both[1]:
        raise BadRequest(f"max_completion_tokens ({both[0]!r}) and max_tokens ({both[1]!r}) disagree; "
                         "send max_completion_tokens alone (max_tokens is its older name)", "max_tokens")
    max_tokens = both[0] if both[0] is not None else both[1]
    tools = parse_tools(request)
    constraint = _response_format(request.response_format)
    if tools is not None and tools.constraint is not None:
        if constraint is not None:
            raise BadRequest(f"tool_choice {tools.mode} constrains the output; "
                             "send response_format or a forced tool call, not both", "response_format")
        constraint = tools.constraint
    messages, images = template_messages(request.messages, policy.images)
    prompt = _render(render, messages, tool_dicts(request.tools) if tools is not None else None,
                     _template(request, policy))
    call = _call(request, policy, prompt, max_tokens, "max_completion_tokens"
                 if request.max_completion_tokens is not None else "max_tokens", logprobs, echo=request.echo,
                 constraint=constraint, logprobs_name="top_logprobs")
    # vLLM's chat echo: the answer continues the last message when it is the answered role's.
    echoed = message_text(request.messages[-1]) if request.messages[-1].role == "assistant" else ""
    return dataclasses.replace(call, tools=tools, echoed=echoed if request.echo else None, images=images)


def chat_prompt(body: dict[str, Any], render: Render, policy: RequestPolicy | None = None) -> tuple[int, ...]:
    """The token ids a /tokenize body's `messages` (checked as a chat request's are), `tools` and
    template fields render to."""
    policy = policy or RequestPolicy()
    request = validated(ChatTemplateFields, body)
    policy.fields.check(request, "/tokenize")
    return _render(render, template_messages(request.messages, policy.images)[0], tool_dicts(request.tools),
                   _template(request, policy))


def _template(request: ChatTemplateFields | ChatCompletionRequest, policy: RequestPolicy) -> TemplateArgs:
    if request.continue_final_message and request.add_generation_prompt:
        raise BadRequest("continue_final_message=true needs add_generation_prompt=false (its default is "
                         "true): cannot set both to true, as vLLM says", "continue_final_message")
    kwargs = request.chat_template_kwargs or {}
    own = request.chat_template is not None or "chat_template" in kwargs
    if own and not policy.trust_request_chat_template:
        raise BadRequest("a chat_template in the request needs the front's --trust-request-chat-template "
                         "(as vLLM's server); without it the server's template renders every request",
                         "chat_template")
    reserved = sorted(RESERVED_KWARGS & set(kwargs))
    if reserved:
        where = f"chat_template_kwargs.{reserved[0]}"
        raise BadRequest(f"{where} may not be set: it is a parameter of the templating itself (send the "
                         "request field of that name, if there is one)", where)
    if (effort := getattr(request, "reasoning_effort", None)) is not None:  # a variable, as vLLM has it
        kwargs = {**kwargs, "reasoning_effort": effort}
    return TemplateArgs(request.add_generation_prompt, request.continue_final_message, request.documents,
                        request.chat_template, kwargs)


def _render(render: Render, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
            template: TemplateArgs) -> tuple[int, ...]:
    try:
        return tuple(render(messages, tools, template))
    except (TypeError, ValueError, KeyError) as exc:  # what the chat template cannot render
        raise BadRequest(f"cannot render the messages: {str(exc)[:500]}", "messages") from None


def _response_format(value: ResponseFormat | None) -> dict[str, Any] | None:
    """OpenAI's response_format as a structured_outputs object (None: free text)."""
    if value is None or value.type == "text":
        return None
    if value.type == "json_object":
        return {"json_object": True}
    if value.json_schema is None:
        raise BadRequest("response_format.json_schema (an object with a `schema` object) is needed for "
                         "type json_schema", "response_format.json_schema")
    return {"json": value.json_schema.schema_}


def completion_call(body: dict[str, Any], policy: RequestPolicy | None = None) -> GenerateCall:
    policy = policy or RequestPolicy()
    request = validated(CompletionRequest, body)
    policy.fields.check(request, "/v1/completions")
    check_defaults(request)
    max_tokens = request.max_tokens if request.max_tokens is not None else 16
    return _call(request, policy, _prompt(request.prompt), max_tokens, "max_tokens", request.logprobs,
                 echo=bool(request.echo), constraint=_response_format(request.response_format))


def _prompt(prompt: str | list[int] | list[str] | list[list[int]] | None) -> str | tuple[int, ...]:
    """A completion's one prompt: text, token ids, or a list holding one of them."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # the one prompt of a list
    if isinstance(prompt, str):
        return prompt
    if prompt and all(isinstance(t, int) for t in prompt):
        ids: list[int] = prompt  # type: ignore[assignment]
        beyond = next((t for t in ids if not -(2**31) <= t < 2**31), None)
        if beyond is not None:  # input_ids are INT32; which ids the vocabulary holds, tt_llm says
            raise BadRequest(f"prompt holds the token id {_short_int(beyond)}, beyond any token id (INT32)",
                             "prompt")
        return tuple(ids)
    if prompt and len(prompt) > 1:
        raise BadRequest(f"prompt holds {len(prompt)} prompts; send one prompt per request", "prompt")
    raise BadRequest(f"prompt must be a string or a non-empty list of token ids, got {str(prompt)[:80]!r}",
                     "prompt")


def _structured(request: GenerateRequest, constraint: dict[str, Any] | None) -> dict[str, Any] | None:
    """The one structured_outputs object: from response_format (or a forced tool call), vLLM's
    guided_* fields, or structured_outputs itself; two of them are a 400."""
    guided = {"json": request.guided_json, "regex": request.guided_regex, "choice": request.guided_choice,
              "grammar": request.guided_grammar}
    given: list[tuple[str, dict[str, Any]]] = [
        (name, value) for name, value in (("response_format", constraint),
                                          ("structured_outputs", request.structured_outputs))
        if value is not None]
    given += [(f"guided_{kind}", {kind: value}) for kind, value in guided.items() if value is not None]
    if len(given) > 1:
        first = "response_format (or a forced tool call)" if given[0][0] == "response_format" else given[0][0]
        raise BadRequest(f"give {first} or {given[1][0]}, not both", given[1][0])
    return given[0][1] if given else None


def _call(request: GenerateRequest, policy: RequestPolicy, prompt: str | tuple[int, ...],
          max_tokens: int | None, max_name: str, logprobs: int | None, echo: bool,
          constraint: dict[str, Any] | None,
          logprobs_name: str = "logprobs") -> GenerateCall:
    for name, reason in _REFUSED.items():
        if getattr(request, name, None) is not None:
            raise BadRequest(f"{name}: {reason}", name)
    if request.n > policy.max_n:
        raise BadRequest(f"n must be at most {policy.max_n} (the front's --max-n), got {request.n}", "n")
    if request.best_of is not None and request.best_of != request.n:
        raise BadRequest(f"best_of must equal n ({request.n}), got {request.best_of}: choosing the n best of "
                         "more sequences is not supported (nor by vLLM's V1 engine)", "best_of")
    options = request.stream_options
    if options is not None and not request.stream:
        raise BadRequest("stream_options needs stream=true", "stream_options")
    sampling: dict[str, Any] = {name: getattr(request, name) for name in _SAME
                                if getattr(request, name) is not None}
    if request.seed is not None:
        sampling["seed"] = request.seed % _SEEDS
    if (structured := _structured(request, constraint)) is not None:
        sampling["structured_outputs"] = structured
    if max_tokens is not None:
        sampling["max_tokens"] = max_tokens
    if logprobs is not None:
        sampling["logprobs"] = logprobs
    try:
        SamplingParams.from_dict(sampling)
    except (ValueError, TypeError, OverflowError) as exc:  # OverflowError: float() of a 400-digit int
        message = str(exc)
        named = [n for n in sampling if n in message]
        param = min(named, key=message.index) if named else None
        if param == "max_tokens":
            param, message = max_name, message.replace("max_tokens", max_name)
        elif param == "logprobs":  # the number of alternatives: chat calls it top_logprobs
            param, message = logprobs_name, message.replace("logprobs", logprobs_name, 1)
        raise BadRequest(message, param) from None
    usage = options is not None and options.include_usage is not False
    return GenerateCall(prompt, sampling, bool(request.stream), usage, logprobs, echo, n=request.n,
                        continuous_usage=usage and bool(options and options.continuous_usage_stats),
                        request_id=request.request_id)


def check_defaults(request: GenerateRequest) -> None:
    """The vLLM fields this server does not implement (schemas.py `only_default`) at the values that
    mean vLLM's default; any other is a 400 naming the field and that default."""
    for name in request.model_fields_set:
        only = only_values(type(request), name)
        if only is not None and not any(_same(getattr(request, name), a) for a in only[0]):
            why = f": {only[1]}" if only[1] else ""
            raise BadRequest(f"{name}={json.dumps(getattr(request, name))[:80]} is not supported (only its "
                             f"default, {json.dumps(only[0][0])}){why}", name)


def _same(value: Any, accepted: Any) -> bool:
    """JSON equality: 1 is 1.0, but true is not 1 (as Python has it)."""
    if isinstance(value, bool) or isinstance(accepted, bool) or value is None or accepted is None:
        return value is accepted
    return type(value) in (int, float) and type(accepted) in (int, float) and value == accepted \
        or type(value) is type(accepted) and value == accepted


def _short_int(value: int) -> str:
    return str(value) if value.bit_length() <= 64 else f"an integer of {value.bit_length()} bits"
