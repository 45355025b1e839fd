"""The `preprocessing` (text → ids) and `postprocessing` (ids → text delta) Triton models.

Both load the tokenizer of the same `model` option as `tt_llm`, so it always follows the model.
Preprocessing tokenizes `text_input` as sent (`apply_chat_template`, default false), as TRT-LLM's
ensemble does and as clients that template their own prompts (Triton's OpenAI frontend, ours)
expect; with `apply_chat_template=true` it treats `text_input` as one user message and applies the
model's chat template when the tokenizer has one.
Postprocessing is stateless: `tt_llm` sends with every `output_ids` the `context_ids` that
decoding them exactly needs (see tt_backend.text.detokenizer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.text.detokenizer import delta_text
from tt_backend.text.tokenizer import check_prompt_bytes, encode_chat, load_tokenizer, max_token_bytes
from tt_backend.triton.errors import exception_response
from tt_backend.triton.model_params import model_parameters, setup_logging, tokenizer_model_option
from tt_backend.triton.request_inputs import single_text
from tt_backend.triton.response_builder import string_tensor


def _load(args: dict[str, str], known: set[str]) -> tuple[Any, dict[str, str], Path]:
    setup_logging()
    params = model_parameters(json.loads(args["model_config"]))
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown}; this model takes {sorted(known)}")
    model_dir = resolve_model_dir(tokenizer_model_option(args, params))
    return load_tokenizer(model_dir), params, model_dir


def _max_positions(model_dir: Path) -> int | None:
    """The model's maximum positions (`tt_llm`'s max_model_len is at most this), if it says."""
    config = model_dir / "config.json"
    if not config.is_file():
        return None
    with open(config, encoding="utf-8") as f:
        value = json.load(f).get("max_position_embeddings")
    return value if isinstance(value, int) else None


class PreprocessingModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.tokenizer, params, model_dir = _load(args, {"model", "apply_chat_template"})
        self._max_positions = _max_positions(model_dir)
        self._token_bytes = max_token_bytes(self.tokenizer)
        choice = params.get("apply_chat_template", "false").strip().lower()
        if choice not in ("true", "false"):
            raise ValueError(f"apply_chat_template={choice!r} is not a boolean (true/false)")
        self.chat = choice == "true" and bool(self.tokenizer.chat_template)

    def encode(self, text: str) -> list[int]:
        if not self.chat:
            return list(self.tokenizer(text).input_ids)
        return encode_chat(self.tokenizer, text)

    def execute(self, requests: list[Any]) -> list[Any]:
        """One response per request, an error one for whatever its values break (never an
        exception out of execute, which would fail the whole batch)."""
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as exc:  # noqa: BLE001 (this request alone)
                responses.append(exception_response(exc))
        return responses

    def _one(self, request: Any) -> Any:
        # Optional in the configs only so that the ensemble reaches this check (config.pbtxt).
        tensors = {name: pb_utils.get_input_tensor_by_name(request, name)
                   for name in ("text_input", "max_tokens")}
        missing = next((name for name, tensor in tensors.items() if tensor is None), None)
        if missing is not None:
            raise ValueError(f"the input {missing} is required")
        text = single_text({"text_input": tensors["text_input"].as_numpy()}, "text_input")
        assert text is not None
        if self._max_positions is not None:  # no tokenizing 10 MB
            check_prompt_bytes("text_input", text, self._max_positions, self._token_bytes)
        ids = np.array(self.encode(text), dtype=np.int32)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("input_ids", ids)])


class PostprocessingModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.tokenizer, _, _ = _load(args, {"model"})
        self.vocab_size = len(self.tokenizer)

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                new, context = (token_ids(request, name, self.vocab_size)
                                for name in ("output_ids", "context_ids"))
                text = delta_text(self.tokenizer, context, new)
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("text_output", string_tensor(text))]))
            except Exception as exc:  # noqa: BLE001 (this request alone)
                responses.append(exception_response(exc))
        return responses


def token_ids(request: Any, name: str, vocab_size: int) -> list[int]:
    """Input `name` as token ids inside the vocabulary (ValueError naming the input and the id)."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    ids = [] if tensor is None else tensor.as_numpy().reshape(-1).tolist()
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(f"{name} holds {bad}, outside the vocabulary [0, {vocab_size})")
    return ids
