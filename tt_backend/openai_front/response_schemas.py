"""The OpenAI response objects as pydantic models, with vLLM's names (its protocol.py), for
/openapi.json (openapi.py) and for the tests, which check every object the front sends against
them (`extra="forbid"`: a key the model does not declare is a bug in responses.py).

The front does not build its answers through these models: a stream sends a chunk per token, and
a chat chunk costs 6.4 µs as responses.py's dict through json.dumps, 9.9 µs validated and dumped by
its model, 18 µs built with model_construct and dumped (timeit, one core of the 2-core dev box).
The models are what those dicts must be (tests/unit/test_response_shapes.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ResponseModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class UsageInfo(ResponseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ErrorInfo(ResponseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, not_found_error or "
                      "server_error")
    param: str | None = Field(description="The field at fault, as a JSON path (messages[0].role)")
    code: int = Field(description="The HTTP status")


class ErrorResponse(ResponseModel):
    """Every error, and the event that ends a stream that failed midway (before `data: [DONE]`)."""

    error: ErrorInfo


class ModelCard(ResponseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str | None
    parent: str | None
    max_model_len: int


class ModelList(ResponseModel):
    object: Literal["list"]
    data: list[ModelCard]


class ChatCompletionLogProb(ResponseModel):
    token: str
    logprob: float
    bytes: list[int]


class ChatCompletionLogProbsContent(ChatCompletionLogProb):
    top_logprobs: list[ChatCompletionLogProb]


class ChatCompletionLogProbs(ResponseModel):
    content: list[ChatCompletionLogProbsContent]


class CompletionLogProbs(ResponseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class FunctionCall(ResponseModel):
    name: str
    arguments: str = Field(description="The arguments as JSON text")


class ToolCall(ResponseModel):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(ResponseModel):
    role: Literal["assistant"]
    content: str | None = Field(description="None when the answer is tool calls or reasoning only")
    tool_calls: list[ToolCall] | None = Field(None, description="Only when the model called tools")
    reasoning_content: str | None = Field(None, description="The reasoning parser's part (vLLM's), "
                                          "only with --reasoning-parser")


class ChatCompletionResponseChoice(ResponseModel):
    index: int
    message: ChatMessage
    logprobs: ChatCompletionLogProbs | None
    finish_reason: str | None = Field(description="stop, length or tool_calls")


class ChatCompletionResponse(ResponseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatCompletionResponseChoice]
    usage: UsageInfo


class DeltaFunctionCall(ResponseModel):
    name: str | None = None
    arguments: str | None = Field(None, description="The next piece of the arguments' JSON text")


class DeltaToolCall(ResponseModel):
    index: int = Field(description="The call's place among the choice's calls")
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


class DeltaMessage(ResponseModel):
    role: Literal["assistant"] | None = Field(None, description="On a choice's first chunk")
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatCompletionResponseStreamChoice(ResponseModel):
    index: int
    delta: DeltaMessage
    logprobs: ChatCompletionLogProbs | None
    finish_reason: str | None = Field(description="On a choice's last chunk")


class ChatCompletionStreamResponse(ResponseModel):
    """One server-sent event's data. `choices` holds one choice, or none in the last chunk, which
    carries the request's `usage` (stream_options.include_usage)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatCompletionResponseStreamChoice]
    usage: UsageInfo | None = Field(None, description="The usage so far (continuous_usage_stats), or the "
                                    "request's in the last chunk")


class CompletionResponseChoice(ResponseModel):
    index: int
    text: str
    logprobs: CompletionLogProbs | None
    finish_reason: str | None


class CompletionResponse(ResponseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionResponseChoice]
    usage: UsageInfo


class CompletionStreamResponse(ResponseModel):
    """One server-sent event's data, as ChatCompletionStreamResponse's."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionResponseChoice]
    usage: UsageInfo | None = None


class TokenizeResponse(ResponseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None


RESPONSES: tuple[type[BaseModel], ...] = (
    ChatCompletionResponse, ChatCompletionStreamResponse, CompletionResponse, CompletionStreamResponse,
    ModelList, ModelCard, ErrorResponse, TokenizeResponse)
"""The response models /openapi.json describes (with the models they hold)."""
