"""Helpers shared by the Triton models: config.pbtxt parameters and logging."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from tt_backend.config.vllm_args import engine_parameters, find_model_json

logger = logging.getLogger(__name__)


def model_parameters(model_config: dict[str, Any]) -> dict[str, str]:
    """`parameters { key: "k" value: { string_value: "v" } }` as {k: v}."""
    return {key: value.get("string_value", "")
            for key, value in model_config.get("parameters", {}).items()}


def setup_logging() -> None:
    """Send our log lines to stdout, where tritonserver's own log goes."""
    root = logging.getLogger("tt_backend")
    if not root.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)


def vllm_engine_parameters(args: dict[str, str], pbtxt: dict[str, str]) -> dict[str, str]:
    """tt_llm's engine options: a vllm_backend `model.json` in its folder (`1/model.json`, as
    vllm_backend reads it, or beside config.pbtxt) mapped onto ours, under config.pbtxt's parameters;
    each argument's effect or warning logged."""
    folder = args.get("model_repository", "")
    found = find_model_json(Path(folder), args.get("model_version", "1")) if folder else None
    translated = engine_parameters(pbtxt, found)
    for note in translated.notes:
        logger.log(note.level, "%s", note.message)
    return translated.parameters


def tokenizer_model_option(args: dict[str, str], params: dict[str, str]) -> str:
    """The `model` option of a tokenizer model (preprocessing, postprocessing): its own parameter,
    else the `model` (or `tokenizer`) of a vllm_backend model.json in the sibling tt_llm folder, so
    the tokenizer follows the model either way."""
    if "model" in params:
        return params["model"]
    folder = args.get("model_repository", "")
    found = find_model_json(Path(folder).parent / "tt_llm") if folder else None
    return engine_parameters({}, found).parameters.get("model", "")
