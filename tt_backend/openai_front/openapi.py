"""What /openapi.json says of the front: each route's request body (schemas.py) and responses
(response_schemas.py), a streamed one as `text/event-stream` whose events' data is the chunk model.

The routes read their bodies themselves (so that body.py's checks run before any parsing) and send
dicts (responses.py): FastAPI cannot see either, so the schemas are named here, and their models
added to `components`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from tt_backend.openai_front import response_schemas as out
from tt_backend.openai_front.schemas import ChatCompletionRequest, ChatTemplateFields, CompletionRequest

ERRORS = {400: "A field the front refuses (param names its path)", 401: "No or a wrong API key (--api-key)",
          404: "A model this server does not serve", 408: "The body took longer than --timeout-request-body",
          413: "A body over --max-body-bytes", 415: "A body not sent as application/json",
          500: "The engine failed", 503: "Triton or the model is not ready"}
"""The errors a generating route answers with, each an ErrorResponse."""


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    """The route's `openapi_extra`: its JSON body is `model`."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref(model)}}}}


def answers(model: type[BaseModel], chunk: type[BaseModel] | None = None,
            errors: tuple[int, ...] = tuple(ERRORS)) -> dict[int | str, dict[str, Any]]:
    """A route's `responses`: 200 with `model` (and, streamed, server-sent events each holding a
    `chunk`), and `errors` as ErrorResponse."""
    content: dict[str, Any] = {"application/json": {"schema": ref(model)}}
    description = "The answer"
    if chunk is not None:
        content["text/event-stream"] = {"schema": ref(chunk)}
        description = (f"The answer; with stream=true, server-sent events: `data: <{chunk.__name__}>` "
                       "per chunk, an ErrorResponse if the engine fails midway, then `data: [DONE]`")
    return {200: {"description": description, "content": content},
            **{status: {"description": ERRORS[status], "content": {"application/json": {
                "schema": ref(out.ErrorResponse)}}} for status in errors}}


def describe(app: FastAPI) -> None:
    """/openapi.json with the bodies' and the responses' schemas."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(components(ChatCompletionRequest, CompletionRequest, ChatTemplateFields))
            schemas.update(components(*out.RESPONSES, mode="serialization"))
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend it


def components(*models: type[BaseModel], mode: JsonSchemaMode = "validation") -> dict[str, Any]:
    """The component schemas of `models` and of the models they hold, for /openapi.json."""
    found: dict[str, Any] = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}", by_alias=True,
                                         mode=mode)
        found.update(schema.pop("$defs", {}))
        found[model.__name__] = schema
    return found
