"""TRT-LLM's request tensors (the `ensemble` and `tensorrt_llm_bls` of TensorRT-LLM's
`triton_backend/all_models/inflight_batcher_llm`) → what `tt_llm` takes (numpy only, no Triton).

TRT-LLM's models batch (max_batch_size > 0), so every tensor arrives with a batch dimension:
`text_input` as [1, 1], `stop_words` as [1, k], `stop_words_list` as [1, 2, n]. One request holds
one prompt here (TRT-LLM's `batch_index` is then always 0); a batch of more is refused naming the
input. The TRT-LLM scalars become one vLLM-style `sampling_parameters` JSON for `tt_llm` through
the same rules `tt_llm` applies to its own TRT-LLM tensors (request_inputs.sampling_values): no
top_k and no top_p decodes greedily, `end_id` replaces EOS, `min_tokens` (formerly `min_length`).

Stop and bad words come as TRT-LLM's preprocessing takes them, a list of strings per prompt
(`stop_words`, `bad_words`), or in the `[[ids], [offsets]]` form of TRT-LLM's `tensorrt_llm` model
(`stop_words_list`, `bad_words_list`, INT32 [2, n]: row 0 the words' token ids one after another,
row 1 each word's end offset, padded with -1); ids are decoded to the words' text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tt_backend.sampling.params import SamplingParams
from tt_backend.triton.request_inputs import sampling_values, single_text

SAMPLING_INPUTS = ("max_tokens", "min_tokens", "min_length", "temperature", "top_k", "top_p", "min_p", "seed",
                   "repetition_penalty", "presence_penalty", "frequency_penalty", "end_id", "pad_id",
                   "guided_decoding_guide_type", "guided_decoding_guide")
FLAGS = ("stream", "exclude_input_in_output", "return_log_probs", "return_num_input_tokens",
         "return_num_output_tokens", "return_context_logits", "return_generation_logits",
         "return_perf_metrics")
_UNSUPPORTED_FLAGS = {
    "return_context_logits": "context logits are not returned by this backend",
    "return_generation_logits": "generation logits are not returned by this backend",
    "return_perf_metrics": "per-request perf metrics are not returned; scrape the metrics port",
}
WORDS = {"stop_words": "stop_words_list", "bad_words": "bad_words_list"}
"""Text form → ids form of the same words."""
KNOWN_INPUTS = frozenset({"text_input", "beam_width", "num_return_sequences", "length_penalty",
                          "image_url_input", "image_bytes_input",  # trtllm_images.py reads them
                          *SAMPLING_INPUTS, *FLAGS, *WORDS, *WORDS.values()})


@dataclass(frozen=True)
class TrtllmRequest:
    text: str
    sampling_parameters: str
    """vLLM-style JSON for tt_llm, already checked (SamplingParams.from_dict)."""
    stream: bool
    exclude_input_in_output: bool
    return_log_probs: bool


def unbatch(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Drop the batch dimension of one prompt's tensors (ValueError naming a batch of more)."""
    out = {}
    for name, arr in inputs.items():
        if arr.ndim == 0 or arr.shape[0] != 1:
            raise ValueError(f"input {name} must hold a batch of one prompt (shape [1, ...]), got shape "
                             f"{list(arr.shape)}: send one request per prompt")
        out[name] = arr[0]
    return out


def parse_trtllm_request(batched: dict[str, np.ndarray], decode: Callable[[list[int]], str]) -> TrtllmRequest:
    """Check TRT-LLM's inputs for one prompt; `decode` turns a word's token ids into its text."""
    unknown = sorted(set(batched) - KNOWN_INPUTS)
    if unknown:
        raise ValueError(f"unknown input tensor(s) {unknown}")
    for name in ("text_input", "max_tokens"):
        if name not in batched:
            raise ValueError(f"the input {name} is required")
    inputs = unbatch(batched)
    text = single_text(inputs, "text_input")
    assert text is not None
    _require_one(inputs, "beam_width", "beam search is not implemented here")
    _require_one(inputs, "num_return_sequences", "send one request per sequence (or use the OpenAI "
                 "front's n)")
    flags = {name: _flag(inputs, name) for name in FLAGS}
    for name, why in _UNSUPPORTED_FLAGS.items():
        if flags[name]:
            raise ValueError(f"{name}=true is not supported: {why}")
    if "length_penalty" in inputs:  # beam search only in TRT-LLM: accepted, without effect at width 1
        _number(inputs, "length_penalty")
    tt_inputs = {name: inputs[name] for name in SAMPLING_INPUTS if name in inputs}
    for text_name, ids_name in WORDS.items():
        words = _texts(inputs, text_name) + _id_words(inputs, ids_name, decode)
        if words:
            tt_inputs[text_name] = np.array([w.encode("utf-8") for w in words], dtype=np.object_)
    values = sampling_values(tt_inputs)
    SamplingParams.from_dict(values)  # refused here, naming the value, before tt_llm sees it
    return TrtllmRequest(text, json.dumps(values), flags["stream"], flags["exclude_input_in_output"],
                         flags["return_log_probs"])


def _one(inputs: dict[str, np.ndarray], name: str) -> Any:
    arr = inputs[name]
    if arr.size != 1:
        raise ValueError(f"input {name} must hold one value per prompt, got {arr.size}")
    value = arr.reshape(-1)[0]
    return value.item() if isinstance(value, np.generic) else value


def _number(inputs: dict[str, np.ndarray], name: str) -> float:
    value = _one(inputs, name)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"input {name} must be a number, got {value!r}")
    return float(value)


def _require_one(inputs: dict[str, np.ndarray], name: str, why: str) -> None:
    if name not in inputs:
        return
    value = _number(inputs, name)
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value:g}")
    if value != 1:
        raise ValueError(f"{name}={value:g} is not supported ({why}): send {name}=1")


def _flag(inputs: dict[str, np.ndarray], name: str) -> bool:
    if name not in inputs:
        return False
    value = _one(inputs, name)
    if not isinstance(value, bool):
        raise ValueError(f"input {name} must be BOOL, got {value!r}")
    return value


def _texts(inputs: dict[str, np.ndarray], name: str) -> list[str]:
    if name not in inputs:
        return []
    words = []
    for value in inputs[name].reshape(-1):
        if not isinstance(value, bytes | str):
            raise ValueError(f"input {name} must be strings (BYTES), got {value!r}")
        try:
            word = value.decode("utf-8") if isinstance(value, bytes) else value
        except UnicodeDecodeError:
            raise ValueError(f"input {name} is not valid UTF-8") from None
        if word:  # TRT-LLM's preprocessing skips empty words (clients send "" for none)
            words.append(word)
    return words


def _id_words(inputs: dict[str, np.ndarray], name: str, decode: Callable[[list[int]], str]) -> list[str]:
    """The words of a `[[ids], [offsets]]` tensor ([2, n]): word i is ids[offsets[i-1]:offsets[i]]."""
    if name not in inputs:
        return []
    arr = inputs[name]
    if arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.shape[0] != 2:
        raise ValueError(f"input {name} must be INT32 [[ids], [offsets]] (shape [2, n] per prompt), got "
                         f"{arr.dtype} shape {list(arr.shape)}")
    ids, offsets = arr[0].tolist(), [o for o in arr[1].tolist() if o != -1]
    words, start = [], 0
    for end in offsets:
        if not start < end <= len(ids):
            raise ValueError(f"input {name} has offset {end} after {start}: offsets must rise, each "
                             f"within the {len(ids)} ids, padded with -1")
        words.append(decode(ids[start:end]))
        start = end
    return words
