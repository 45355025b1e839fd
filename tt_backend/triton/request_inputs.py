"""Parse the input tensors of one `tt_llm` request into a GenerateRequest (no Triton imports).

Two schemas arrive here:
- vllm_backend: `text_input`, `image` (base64 image files), `sampling_parameters` (JSON), `stream`,
  `exclude_input_in_output`, `return_*` flags; text comes back as `text_output` (with `logprobs`
  and `cumulative_logprob` when `return_logprobs` / `return_cumulative_logprob` are set).
- TRT-LLM (through the ensemble): `input_ids` plus scalar tensors `max_tokens`, `min_tokens`
  (or its older name `min_length`),
  `temperature`, `top_k`, `top_p`, `min_p`, `seed`, `repetition_penalty`, `presence_penalty`,
  `frequency_penalty`, `end_id`, `pad_id`, the string lists `stop_words` and `bad_words`, and
  `return_log_probs`, and the guided decoding pair `guided_decoding_guide_type` (json,
  json_schema, regex, ebnf_grammar, structural_tag) with `guided_decoding_guide`; ids come back
  as `output_ids` with `context_ids` for exact detokenization
  in `postprocessing`, and `output_log_probs` / `cum_log_probs`. `return_text_output` adds the
  engine's detokenized `text_output` as well (the OpenAI front sends token ids and reads text).
  As in TRT-LLM, a request with neither `top_k` nor `top_p` (or both 0) decodes greedily.
Asking for logprobs without `logprobs` in the sampling parameters returns the sampled tokens'
logprobs (logprobs=0).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from tt_backend.sampling.params import SamplingParams, parse_float, parse_int
from tt_backend.text.images import ImageInput, ImageLimits, decode_base64, decode_image

_TRT_SCALARS = ("max_tokens", "min_length", "min_tokens", "temperature", "top_k", "top_p", "min_p", "seed",
                "repetition_penalty", "presence_penalty", "frequency_penalty", "end_id", "pad_id")
_FLAGS = ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
          "return_num_output_tokens", "return_logprobs", "return_cumulative_logprob", "return_log_probs",
          "return_text_output")
_GUIDE = ("guided_decoding_guide_type", "guided_decoding_guide")
KNOWN_INPUTS = frozenset({"text_input", "input_ids", "image", "sampling_parameters", "stop_words",
                          "bad_words", *_GUIDE, *_TRT_SCALARS, *_FLAGS})
IMAGE_LIMITS = ImageLimits()
"""tt_llm's `image` bounds (text/images.py's defaults, as the front's)."""
# TRT-LLM's guide types → vLLM's structured_outputs keys ("json" is any JSON object in TRT-LLM).
_GUIDE_TYPES = {"json": "json_object", "json_schema": "json", "regex": "regex", "ebnf_grammar": "grammar",
                "structural_tag": "structural_tag"}


@dataclass(frozen=True)
class GenerateRequest:
    prompt_text: str | None
    prompt_ids: tuple[int, ...] | None
    """Exactly one of prompt_text / prompt_ids is set; ids select the ids-out schema."""
    sampling: SamplingParams
    stream: bool = False
    exclude_input_in_output: bool = False
    return_finish_reason: bool = False
    return_num_input_tokens: bool = False
    return_num_output_tokens: bool = False
    return_logprobs: bool = False
    return_cumulative_logprob: bool = False
    return_log_probs: bool = False
    """TRT-LLM's flag (ids schema): `output_log_probs` and `cum_log_probs` carry real values."""
    return_text_output: bool = False
    """Ids schema: send `text_output` beside `output_ids` (the text schema always sends it)."""
    images: tuple[ImageInput, ...] = ()
    """`image`: vllm_backend's, one base64-encoded PNG, JPEG or WebP file per element."""

    @property
    def ids_mode(self) -> bool:
        return self.prompt_ids is not None


def parse_generate_request(inputs: dict[str, np.ndarray]) -> GenerateRequest:
    """Raise ValueError naming the input and its value on anything malformed."""
    unknown = sorted(set(inputs) - KNOWN_INPUTS)
    if unknown:
        raise ValueError(f"unknown input tensor(s) {unknown}")
    text = single_text(inputs, "text_input")
    ids = _ids(inputs, "input_ids")
    if (text is None) == (ids is None):
        raise ValueError("give exactly one of the inputs text_input or input_ids")
    flags = {name: _scalar_bool(inputs, name) for name in _FLAGS}
    sampling = _sampling(inputs)
    wants = ("return_logprobs", "return_cumulative_logprob", "return_log_probs")
    if any(flags[name] for name in wants) and sampling.logprobs is None:
        sampling = dataclasses.replace(sampling, logprobs=0)
    return GenerateRequest(prompt_text=text, prompt_ids=ids, sampling=sampling, images=_images(inputs),
                           **flags)


def _sampling(inputs: dict[str, np.ndarray]) -> SamplingParams:
    return SamplingParams.from_dict(sampling_values(inputs))


def sampling_values(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """The vLLM-style sampling values of `sampling_parameters` and the TRT-LLM tensors together
    (preprocessing sends them on to tt_llm as one `sampling_parameters` JSON)."""
    values: dict[str, Any] = {}
    raw_json = single_text(inputs, "sampling_parameters")
    if raw_json is not None and raw_json.strip():
        try:
            parsed = json.loads(raw_json)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"sampling_parameters is not valid JSON ({exc.msg}): {raw_json[:80]!r}") from None
        except RecursionError:
            raise ValueError("sampling_parameters nests too deeply to parse (JSON)") from None
        except ValueError:  # Python's 4,300-digit limit on integer text
            raise ValueError("sampling_parameters holds a number too long to parse "
                             "(over 4300 digits)") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"sampling_parameters must be a JSON object, got {raw_json[:80]!r}")
        values.update(parsed)
    trt: dict[str, Any] = {name: _scalar(inputs, name) for name in _TRT_SCALARS if name in inputs}
    for name, field in (("stop_words", "stop"), ("bad_words", "bad_words")):
        words = [w for w in _strings(inputs, name) if w]
        if words:
            trt[field] = words
    guide = _guide(inputs)
    if guide is not None:
        if values.get("structured_outputs") is not None or values.get("guided_decoding") is not None:
            raise ValueError("give guided_decoding_guide_type or structured_outputs in sampling_parameters, "
                             "not both")
        values["structured_outputs"] = guide
    if trt:
        overlap = sorted(set(trt) & set(values))
        if overlap:
            raise ValueError(f"{overlap} given both as input tensors and in sampling_parameters")
        tensors_choose, json_chooses = _SAMPLING_CHOICE & set(trt), _SAMPLING_CHOICE & set(values)
        if tensors_choose and json_chooses:
            raise ValueError(f"{sorted(tensors_choose)} given as input tensors and {sorted(json_chooses)} in "
                             "sampling_parameters: choose the sampling in one place")
        values.update(_trt_to_vllm(trt, greedy_default=not json_chooses))
    return values


def _guide(inputs: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """TRT-LLM's guided decoding inputs as vLLM's structured_outputs object."""
    kind, guide = (single_text(inputs, name) for name in _GUIDE)
    if kind is None and guide is None:
        return None
    if kind not in _GUIDE_TYPES:
        raise ValueError(f"guided_decoding_guide_type must be one of {', '.join(_GUIDE_TYPES)}, got {kind!r}")
    if kind == "json":
        return {"json_object": True}
    if not guide:
        raise ValueError(f"guided_decoding_guide_type {kind!r} needs guided_decoding_guide")
    return {_GUIDE_TYPES[kind]: guide}


_SAMPLING_CHOICE = frozenset({"temperature", "top_k", "top_p"})


def _trt_to_vllm(trt: dict[str, Any], greedy_default: bool = True) -> dict[str, Any]:
    """Map TRT-LLM sampling scalars onto SamplingParams values. Without `greedy_default` (the
    sampling_parameters chose temperature, top_k or top_p) TRT-LLM's greedy default for a request
    with neither top_k nor top_p does not apply: a max_tokens tensor beside them overrides nothing."""
    out: dict[str, Any] = {}
    top_k = parse_int("top_k", trt.get("top_k", 0))
    top_p = parse_float("top_p", trt.get("top_p", 0.0))
    if "max_tokens" in trt:
        out["max_tokens"] = parse_int("max_tokens", trt["max_tokens"])
    if "min_length" in trt and "min_tokens" in trt:
        raise ValueError("give min_tokens (TRT-LLM's name now) or min_length, not both")
    for name in ("min_length", "min_tokens"):
        if name in trt:
            out["min_tokens"] = parse_int(name, trt[name])
    if top_k == 0 and top_p == 0.0:
        if greedy_default:
            out["temperature"] = 0.0  # TRT-LLM: no top-k and no top-p means greedy
    else:
        out["temperature"] = parse_float("temperature", trt.get("temperature", 1.0))
        out["top_k"] = top_k
        out["top_p"] = top_p if top_p > 0 else 1.0
    for name in ("seed", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
                 "stop", "bad_words"):
        if name in trt:
            out[name] = trt[name]
    if "end_id" in trt:
        # end_id replaces the tokenizer's EOS as the token that ends generation.
        out["ignore_eos"] = True
        out["stop_token_ids"] = [parse_int("end_id", trt["end_id"])]
    # pad_id is accepted for compatibility: outputs are never padded here.
    return out


def _images(inputs: dict[str, np.ndarray]) -> tuple[ImageInput, ...]:
    """vllm_backend's `image` (src/utils/request.py: each element base64.b64decode'd, then opened
    with PIL), each checked here: `image[i]` names the one at fault."""
    if "image" not in inputs:
        return ()
    arr = inputs["image"]
    if arr.ndim > 2 or (arr.ndim == 2 and arr.shape[0] != 1):
        raise ValueError(f"input image must be a 1-D list of base64 images, got shape {list(arr.shape)}")
    values = arr.reshape(-1)
    IMAGE_LIMITS.check_count(len(values), f"image[{IMAGE_LIMITS.max_images}]")
    out = []
    for i, value in enumerate(values):
        if not isinstance(value, bytes | str):
            raise ValueError(f"image[{i}] must be a base64 string (BYTES), got {type(value).__name__}")
        data = decode_base64(bytes(value) if isinstance(value, bytes) else value, f"image[{i}]", IMAGE_LIMITS)
        out.append(decode_image(data, f"image[{i}]", IMAGE_LIMITS))
    return tuple(out)


def _one(inputs: dict[str, np.ndarray], name: str) -> Any | None:
    if name not in inputs:
        return None
    arr = inputs[name]
    if arr.size != 1:
        raise ValueError(f"input {name} must hold exactly one element, got shape {list(arr.shape)}")
    return arr.reshape(-1)[0]


def _scalar(inputs: dict[str, np.ndarray], name: str) -> Any:
    value = _one(inputs, name)
    if isinstance(value, bytes | np.bytes_ | str):
        raise ValueError(f"input {name} must be numeric, got {value!r}")
    return value.item() if isinstance(value, np.generic) else value


def _scalar_bool(inputs: dict[str, np.ndarray], name: str) -> bool:
    value = _one(inputs, name)
    if value is None:
        return False
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    raise ValueError(f"input {name} must be BOOL, got {value!r}")


def _decode(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | np.bytes_):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"input {name} is not valid UTF-8") from None
    raise ValueError(f"input {name} must be a string (BYTES), got {value!r}")


def single_text(inputs: dict[str, np.ndarray], name: str) -> str | None:
    """The one UTF-8 string of input `name` (None if absent); ValueError names what is wrong."""
    value = _one(inputs, name)
    return None if value is None else _decode(name, value)


def _strings(inputs: dict[str, np.ndarray], name: str) -> list[str]:
    if name not in inputs:
        return []
    return [_decode(name, v) for v in inputs[name].reshape(-1)]


def _ids(inputs: dict[str, np.ndarray], name: str) -> tuple[int, ...] | None:
    if name not in inputs:
        return None
    arr = inputs[name]
    if arr.dtype.kind not in "iu":
        raise ValueError(f"input {name} must be integer token ids, got dtype {arr.dtype}")
    if arr.ndim > 2 or (arr.ndim == 2 and arr.shape[0] != 1):
        raise ValueError(f"input {name} must be a 1-D list of token ids, got shape {list(arr.shape)}")
    return tuple(int(t) for t in arr.reshape(-1))
