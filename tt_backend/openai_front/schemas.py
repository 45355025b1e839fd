"""The OpenAI request bodies as pydantic models, with vLLM's field names, defaults and extras.

`/openapi.json` describes them (openapi.py), and a body that does not fit is a 400 naming the
field's path (`messages[0].role`, `tools[1].function.name`) and the value (`validated`). Types are
strict (JSON's own: `"true"` is no boolean, `1.5` no integer); the values' ranges are checked by
SamplingParams in requests.py, which words them. Fields the models do not declare, at the top or
nested (`messages[0].x`), are kept (`model_extra`) and, as vLLM does, logged once per path and
ignored, or refused with `--strict-fields` (unknown_fields.py). vLLM fields this server does not
implement are declared `only_default`: accepted at vLLM's default, a 400 naming them otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import PydanticCustomError

from tt_backend.openai_front.errors import BadRequest
from tt_backend.openai_front.sampling_forms import SAMPLING_FORMS, sampling_form

_INT64 = (-(2**63), 2**63 - 1)
M = TypeVar("M", bound=BaseModel)
ONLY = "x-only-values"
"""The JSON schema key of an `only_default` field: the values it accepts (vLLM's default first)."""
WHY = "x-only-why"


def _one_error(what: str) -> WrapValidator:
    """A union's failure as one error at the field (pydantic would give one per member, each with
    the member's type in its path)."""
    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("invalid_union", f"must be {what}") from None
    return WrapValidator(check)


def only_default(*accepted: Any, why: str = "") -> Any:
    """A vLLM field this server does not implement: `accepted` (vLLM's default first, then values
    that mean the same) pass, any other is a 400 naming the field (requests.py `check_defaults`).
    Typed Any, so even a value of the wrong type is answered by that message."""
    return Field(accepted[0], description=f"Only its default{': ' + why if why else ''}",
                 json_schema_extra={ONLY: list(accepted), WHY: why})


def only_values(model: type[BaseModel], name: str) -> tuple[list[Any], str] | None:
    """An `only_default` field's accepted values and why no other is; None for any other field."""
    field = model.model_fields.get(name)  # None: a field no model declares
    extra = field.json_schema_extra if field is not None else None
    return (extra[ONLY], str(extra[WHY])) if isinstance(extra, dict) and ONLY in extra else None  # type: ignore[return-value]


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


class ImageURL(OpenAIModel):
    url: str = Field(description="A data: URL (data:image/png;base64,...); a file: URL under the front's "
                     "--allowed-local-media-path; no http(s): the server fetches nothing")
    detail: Literal["auto", "low", "high"] | None = Field(None, description="Accepted and ignored (as vLLM)")


class ImagePart(OpenAIModel):
    type: Literal["image_url"]
    image_url: ImageURL


class InputImagePart(OpenAIModel):
    """vLLM's other image part (the Responses API's form): `image_url` is the URL itself."""

    type: Literal["input_image"]
    image_url: str


ContentPart = Annotated[TextPart | ImagePart | InputImagePart, Field(discriminator="type")]


class Message(OpenAIModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Annotated[str | list[ContentPart] | None,
                       _one_error('a string or a list of content parts ({"type": "text", "text": ...} or '
                                  '{"type": "image_url", "image_url": {"url": ...}})')] = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class FunctionDefinition(OpenAIModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="1-64 letters, digits, _ or -")
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="A JSON schema of the arguments")
    strict: bool | None = None


class ToolParam(OpenAIModel):
    """A tool the model may call (vLLM's ChatCompletionToolsParam; `type` defaults as there)."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(OpenAIModel):
    name: str


class NamedToolChoice(OpenAIModel):
    type: Literal["function"] = "function"
    function: NamedFunction


_TAGS = {"tool_choice:mode": "mode", "tool_choice:named": "named"}
"""The tags of tool_choice's members, which pydantic puts in an error's location (path drops them)."""
ToolChoice = Annotated[
    Annotated[Literal["none", "auto", "required"],
              _one_error('none, auto, required or {"type": "function", "function": {"name": ...}}'),
              Tag("tool_choice:mode")]
    | Annotated[NamedToolChoice, Tag("tool_choice:named")],
    Discriminator(lambda v: "tool_choice:named" if isinstance(v, dict | BaseModel) else "tool_choice:mode")]
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
    logits_processors: list[str] | None = Field(None, description="Names registered with "
                                                "tt_backend.sampling.processors")
    response_format: ResponseFormat | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | None = Field(None, description="vLLM's older name: structured_outputs.json")
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    request_id: str | None = Field(None, description="The response's id is cmpl-/chatcmpl- and this (vLLM's)")
    # Accepted without effect: they describe the caller (vLLM ignores them too).
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    session_id: str | None = None
    # vLLM's, not implemented here: accepted at vLLM's default only. vLLM's router sends the
    # first two (and the chat's reasoning switches) at their defaults on every request.
    no_stop_trim: Any = only_default(False)
    return_hidden_states: Any = only_default(False)
    use_beam_search: Any = only_default(False, why="no beam search")
    length_penalty: Any = only_default(1.0, why="beam search's")
    prompt_logprobs: Any = only_default(None, why="logprobs are the generated tokens' only")
    truncate_prompt_tokens: Any = only_default(None, why="truncate the prompt on the client")
    spaces_between_special_tokens: Any = only_default(True)
    return_tokens_as_token_ids: Any = only_default(None, False)
    return_token_ids: Any = only_default(None, False)
    priority: Any = only_default(0, None, why="no priority scheduling")
    cache_salt: Any = only_default(None, why="the prefix cache is not salted per request")
    kv_transfer_params: Any = only_default(None, why="no disaggregated serving")
    vllm_xargs: Any = only_default(None)
    mm_processor_kwargs: Any = only_default(None, why="text models only")
    guided_decoding_backend: Any = only_default(None, why="one structured-output backend")
    guided_whitespace_pattern: Any = only_default(None)
    structural_tag: Any = only_default(None)

    @field_validator(*SAMPLING_FORMS, mode="before", check_fields=False)
    @classmethod
    def _sampling_forms(cls, value: Any, info: ValidationInfo) -> Any:
        return sampling_form(value, info)


class ChatTemplateFields(OpenAIModel):
    """Chat messages and how the chat template renders them (also vLLM's /tokenize body)."""

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolParam] | None = Field(None, min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = Field(False, description="Continue the last message (a prefill of the "
                                         "answer); needs add_generation_prompt=false")
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = Field(None, description="Needs the front's --trust-request-chat-template")
    chat_template_kwargs: dict[str, Any] | None = Field(None, description="Variables for the chat template, "
                                                        "e.g. enable_thinking")
    add_special_tokens: Any = only_default(False, why="the chat template holds the special tokens")

    @field_validator("tools")
    @classmethod
    def _distinct_names(cls, tools: list[ToolParam] | None) -> list[ToolParam] | None:
        names = [tool.function.name for tool in tools or ()]
        if len(set(names)) != len(names):
            raise PydanticCustomError("duplicate_tool", f"tools name a function twice: {names}")
        return tools


class ChatCompletionRequest(GenerateRequest, ChatTemplateFields):
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = Field(None, description="false: refused where calls may be made "
                                             "(auto, required): the output is not cut to one call")
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = Field(
        None, description="A variable of the chat template, as vLLM passes it")
    echo: bool = Field(False, description="Prefix the answer with the last message when it is an "
                       "assistant's (vLLM's)")
    modalities: Any = only_default(None, ["text"], why="text output only")
    separate_reasoning: Any = only_default(True)
    stream_reasoning: Any = only_default(True)
    include_reasoning: Any = only_default(True)
    functions: Any = None
    function_call: Any = None


class CompletionRequest(GenerateRequest):
    prompt: Annotated[str | list[int] | list[str] | list[list[int]] | None,
                      _one_error("a string or a non-empty list of token ids")] = None
    echo: bool | None = None
    logprobs: int | None = None
    suffix: str | None = None
    add_special_tokens: Any = only_default(True, why="a text prompt is tokenized with them")
    prompt_embeds: Any = only_default(None)


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
    """A pydantic location as a JSON path: ("messages", 0, "role") → messages[0].role (a union
    member's tag, which pydantic adds, left out)."""
    out = ""
    for part in loc:
        if part in _TAGS:
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return f"{value!r:.80}"
