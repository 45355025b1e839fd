"""The `preprocessing` (text → ids) and `postprocessing` (ids → text delta) Triton models.

Both load the tokenizer of the same `model` option as `tt_llm`, so it always follows the model.
Preprocessing tokenizes `text_input` as sent (`apply_chat_template`, default false), as TRT-LLM's
ensemble does and as clients that template their own prompts (Triton's OpenAI frontend, ours)
expect; with `apply_chat_template=true` it treats `text_input` as one user message and applies the
model's chat template when the tokenizer has one.
Both take and give TRT-LLM's tensors (tt_backend.triton.trtllm_inputs): preprocessing checks all
of a TRT-LLM request and hands `tt_llm` its ids, one `sampling_parameters` JSON and the flags;
postprocessing gives TRT-LLM's outputs with their batch (and beam) dimensions. Both are
`max_batch_size: 0` with the batch dimension written out in their dims ([-1, 1]), which Triton's
ensemble accepts between the batching `ensemble` and the unbatched `tt_llm`.
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
from tt_backend.triton.request_inputs import IMAGE_LIMITS
from tt_backend.triton.response_builder import string_tensor
from tt_backend.triton.trtllm_images import trtllm_images
from tt_backend.triton.trtllm_inputs import parse_trtllm_request


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

    def _word(self, ids: list[int]) -> str:
        """A stop or bad word given as token ids (stop_words_list, bad_words_list) as its text."""
        bad = next((t for t in ids if not 0 <= t < len(self.tokenizer)), None)
        if bad is not None:
            raise ValueError(f"a stop or bad word holds the token id {bad}, outside the vocabulary "
                             f"[0, {len(self.tokenizer)})")
        return str(self.tokenizer.decode(ids))

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
        # Optional in the configs only so that the ensemble reaches the check of required inputs.
        inputs = {t.name(): t.as_numpy() for t in request.inputs()}
        parsed = parse_trtllm_request(inputs, self._word)
        if self._max_positions is not None:  # no tokenizing 10 MB
            check_prompt_bytes("text_input", parsed.text, self._max_positions, self._token_bytes)
        flags = {"llm_stream": parsed.stream, "llm_exclude_input_in_output": parsed.exclude_input_in_output,
                 "llm_return_log_probs": parsed.return_log_probs,
                 "llm_return_num_tokens": True}  # always: the counts cost nothing
        images = trtllm_images(inputs, IMAGE_LIMITS)  # checked here; none: an empty `image`
        # tt_llm's tensors, without a batch dimension (tt_llm is the vllm_backend-shaped model).
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("input_ids", np.array(self.encode(parsed.text), dtype=np.int32)),
            pb_utils.Tensor("image", np.array([image.base64().encode("ascii") for image in images],
                                              dtype=np.object_)),
            pb_utils.Tensor("sampling_parameters", string_tensor(parsed.sampling_parameters)),
            *(pb_utils.Tensor(name, np.array([value])) for name, value in flags.items())])


class PostprocessingModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.tokenizer, _, _ = _load(args, {"model"})
        self.vocab_size = len(self.tokenizer)

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                responses.append(pb_utils.InferenceResponse(output_tensors=self._outputs(request)))
            except Exception as exc:  # noqa: BLE001 (this request alone)
                responses.append(exception_response(exc))
        return responses

    def _outputs(self, request: Any) -> list[Any]:
        """TRT-LLM's outputs for one response of tt_llm, with the batch (and beam) dimensions."""
        new, context = (token_ids(request, name, self.vocab_size) for name in ("output_ids", "context_ids"))
        text = delta_text(self.tokenizer, context, new)
        log_probs = np.array(_floats(request, "llm_output_log_probs", [0.0] * len(new)), dtype=np.float32)
        cumulative = np.array(_floats(request, "llm_cum_log_probs", [0.0])[:1], dtype=np.float32)
        counts = {name: _floats(request, f"llm_{name}", [])
                  for name in ("num_input_tokens", "num_output_tokens")}
        # [batch, beam] and [batch, beam, tokens], as TRT-LLM's postprocessing shapes them
        tensors = [pb_utils.Tensor("text_output", string_tensor(text).reshape(1, 1)),
                   pb_utils.Tensor("output_log_probs", log_probs.reshape(1, 1, -1)),
                   pb_utils.Tensor("cum_log_probs", cumulative.reshape(1, 1)),
                   # One prompt, one sequence per request: TRT-LLM's indices are always 0.
                   pb_utils.Tensor("batch_index", np.zeros((1, 1), dtype=np.int32)),
                   pb_utils.Tensor("sequence_index", np.zeros((1, 1), dtype=np.int32))]
        tensors += [pb_utils.Tensor(name, np.array(values[:1], dtype=np.int32).reshape(1, 1))
                    for name, values in counts.items() if values]
        return tensors


def _floats(request: Any, name: str, default: list[float]) -> list[float]:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1).tolist()


def token_ids(request: Any, name: str, vocab_size: int) -> list[int]:
    """Input `name` as token ids inside the vocabulary (ValueError naming the input and the id)."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    ids = [] if tensor is None else tensor.as_numpy().reshape(-1).tolist()
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(f"{name} holds {bad}, outside the vocabulary [0, {vocab_size})")
    return ids
