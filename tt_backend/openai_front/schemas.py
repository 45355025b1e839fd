"""The OpenAI request bodies as pydantic models, with vLLM's field names, defaults and extras.

`/openapi.json` describes them (`openapi_body`), and a body that does not fit is a 400 naming the
field's path (`messages[0].role`) and the value (`validated`). Types are strict (JSON's own: `"true"`
is no boolean, `1.5` no integer); the values' ranges are checked by SamplingParams in requests.py,
which words them. Fields the models do not declare are kept (`model_extra`) and, as vLLM does,
logged once per name and ignored, or refused with `--strict-fields` (`UnknownFields`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import FastAPI
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic_core import PydanticCustomError

from tt_backend.openai_front.errors import BadRequest

_LOG = logging.getLogger(__name__)
_INT64 = (-(2**63), 2**63 - 1)
M = TypeVar("M", bound=BaseModel)


def _one_error(what: str) -> WrapValidator:
    """A union's failure as one error at the field (pydantic would give one per member, each with
    the member's type in its path)."""
    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("invalid_union", f"must be {what}") from None
    return WrapValidator(check)


class OpenAIModel(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)


class StreamOptions(OpenAIModel):
    include_usage: bool | None = True
    """Usage in a last chunk of its own (true unless sent false, as vLLM has it)."""
    continuous_usage_stats: bool | None = None
    """vLLM's: usage (this choice's tokens so far) in every chunk, with include_usage."""


class JsonSchemaFormat(OpenAIModel):
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(OpenAIModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class TextPart(OpenAIModel):
    type: Literal["text"]
    text: str


class Message(OpenAIModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Annotated[str | list[TextPart] | None,
                       _one_error('a string or a list of text parts ({"type": "text", "text": ...})')] = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


Stop = Annotated[str | list[str] | None, _one_error("a string or a list of strings")]


class GenerateRequest(OpenAIModel):
    """What chat and completion requests share: vLLM's names, None meaning the engine's default."""

    model: str | None = None
    n: int = Field(1, ge=1, description="Choices to generate, each sampled on its own (seeded: seed + index)")
    best_of: int | None = Field(None, ge=1, description="Only equal to n (vLLM's engine takes no other)")
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = Field(None, ge=_INT64[0], le=_INT64[1], description="Any 64-bit integer")
    stop: Stop = None
    stop_token_ids: list[int] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    skip_special_tokens: bool | None = None
    include_stop_str_in_output: bool | None = None
    bad_words: list[str] | None = None
    allowed_token_ids: list[int] | None = None
    response_format: ResponseFormat | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | None = Field(None, description="vLLM's older name: structured_outputs.json")
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    # Accepted without effect: they describe the caller, or options of models this is not.
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    priority: int | None = None
    request_id: str | None = None
    # vLLM's router sends these at their defaults; requests.py refuses any other value, naming it.
    no_stop_trim: Any = None
    return_hidden_states: Any = None


class ChatTemplateFields(OpenAIModel):
    """Chat messages and how the chat template renders them (also vLLM's /tokenize body)."""

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = Field(False, description="Continue the last message (a prefill of the "
                                         "answer); needs add_generation_prompt=false")
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = Field(None, description="Needs the front's --trust-request-chat-template")
    chat_template_kwargs: dict[str, Any] | None = Field(None, description="Variables for the chat template, "
                                                        "e.g. enable_thinking")


class ChatCompletionRequest(GenerateRequest, ChatTemplateFields):
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tool_choice: Annotated[str | dict[str, Any] | None, _one_error("none, auto, required or "
                                                                  '{"type": "function", ...}')] = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = None
    modalities: list[str] | None = None
    separate_reasoning: Any = None
    stream_reasoning: Any = None
    include_reasoning: Any = None
    functions: Any = None
    function_call: Any = None


class CompletionRequest(GenerateRequest):
    prompt: Annotated[str | list[int] | list[str] | list[list[int]] | None,
                      _one_error("a string or a non-empty list of token ids")] = None
    echo: bool | None = None
    logprobs: int | None = None
    suffix: str | None = None


def validated(model: type[M], body: dict[str, Any]) -> M:
    """`body` as `model`; BadRequest naming the first field that does not fit, and its value."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = path(error["loc"])
        shown = f", got {_short(error['input'])}" if error["type"] != "missing" else ""
        raise BadRequest(f"{param}: {error['msg']}{shown}", param) from None


def path(loc: Iterable[int | str]) -> str:
    """A pydantic location as a JSON path: ("messages", 0, "role") → messages[0].role."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return f"{value!r:.80}"


class UnknownFields:
    """Fields no model declares: a warning naming each once (as vLLM logs them, per field name
    rather than per request, so a client that always sends one does not flood the log), or, with
    `strict`, a 400 naming the first."""

    def __init__(self, strict: bool = False, log: Callable[[str], None] | None = None) -> None:
        self.strict = strict
        self._log = log or _LOG.warning
        self._seen: set[str] = set()
        self._lock = threading.Lock()  # requests are parsed on the tokenizer pool's threads

    def check(self, request: BaseModel, route: str) -> None:
        names = sorted(request.model_extra or {})
        if not names:
            return
        if self.strict:
            raise BadRequest(f"unknown field {names[0]!r}" + (f" (and {names[1:]})" if names[1:] else "")
                             + f"; {route} takes {', '.join(sorted(type(request).model_fields))} "
                             "(the front runs with --strict-fields)", names[0])
        with self._lock:
            new = [n for n in names if n not in self._seen]
            self._seen.update(new)
        for name in new:
            self._log(f"ignored the unknown request field {name[:100]!r} (on {route}; logged once per name)")


def openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    """The route's `openapi_extra`: its JSON body is `model` (the route reads the body itself, so
    that body.py's checks run before any parsing); `components` gathers the schemas it refers to."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def describe_bodies(app: FastAPI) -> None:
    """/openapi.json with the request bodies' schemas (the routes read their bodies themselves)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {}).setdefault("schemas", {}).update(
                components(ChatCompletionRequest, CompletionRequest, ChatTemplateFields))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend it


def components(*models: type[BaseModel]) -> dict[str, Any]:
    """The component schemas of `models` and of the models they hold, for /openapi.json."""
    out: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}", by_alias=True)
        out.update(schema.pop("$defs", {}))
        out[model.__name__] = schema
    return out
