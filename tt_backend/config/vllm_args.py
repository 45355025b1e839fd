"""vLLM engine arguments (a vllm_backend `model.json`) mapped onto this engine's options.

vllm_backend reads `model.json` from the model's version folder (`tt_llm/1/model.json`): a JSON
object of vLLM `AsyncEngineArgs`. Each argument there is, by VLLM_ARGS:
- `Mapped`: it sets one of our options (its value converted), and the log says to what;
- `Ignored`: accepted with a warning that says why it has no effect here;
- `Refused`: the load fails with a message naming it, unless its value is one the table accepts
  (the value vLLM's default means, which is what this engine does anyway).
Our own option names (EngineConfig's, bare or `tt.`-prefixed, also inside `additional_config`)
are accepted as they are; any other name is refused as unknown.
`config.pbtxt` parameters (and `serve.sh --set`) win over model.json: each argument they override
is logged as such.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

MODEL_JSON = "model.json"

JsonValue = object


def _text(value: JsonValue) -> str | None:
    """An option string as config.pbtxt would carry it (None: set nothing, keep our default)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _dtype(value: JsonValue) -> str | None:
    return {"half": "float16", "float": "float32"}.get(str(value), _text(value))


def _eager(value: JsonValue) -> str | None:
    return "none" if _text(value) == "true" else None


def _one_name(value: JsonValue) -> str | None:
    if isinstance(value, list):  # vLLM serves several names; this front one
        if len(value) != 1:
            raise ValueError(f"served_model_name={value!r}: this server serves one name; give one")
        value = value[0]
    return _text(value)


@dataclass(frozen=True)
class Mapped:
    option: str
    effect: str
    convert: Callable[[JsonValue], str | None] = _text


@dataclass(frozen=True)
class Ignored:
    why: str


@dataclass(frozen=True)
class Refused:
    why: str
    accepts: tuple[JsonValue, ...] = ()
    """Values taken without effect (what vLLM's default means, and this engine does)."""


Rule = Mapped | Ignored | Refused

_V0 = Ignored("a vLLM V0 scheduling option; this engine's scheduler has no such setting")
_TRACES = Ignored("traces cover every padded batch shape of a step; trace_mode chooses which steps replay")
_LORA_OFF = Ignored("LoRA adapters are not supported (enable_lora)")
_FRONT = Ignored("an option of the OpenAI front, not of the engine: pass it to the front "
                 "(scripts/serve.sh --openai-arg=--FLAG=VALUE)")
_NO_DOWNLOAD = Ignored("nothing is downloaded: an HF id is read from the local HF cache (HF_HUB_CACHE)")
_NO_REQUEST_LOG = Ignored("request logging is not configurable: prompts are not logged; refusals and "
                          "failures are")
_AS_IS = "the model's config.json is used as is; change it in a copy of the checkpoint"

VLLM_ARGS: dict[str, Rule] = {
    # -- mapped
    "model": Mapped("model", "the checkpoint: a folder, a .gguf file or an HF id in the local HF cache"),
    "tokenizer": Mapped("model", "the tokenizer is read from the model's folder; it must name the model"),
    "served_model_name": Mapped("served_model_name", "the name clients send and metrics carry", _one_name),
    "dtype": Mapped("dtype", "weights and activations in this dtype (half: float16, float: float32)", _dtype),
    "seed": Mapped("seed", "the engine's generator seed for requests that bring none"),
    "max_model_len": Mapped("max_model_len", "the longest prompt + output of one request"),
    "max_num_seqs": Mapped("max_num_seqs", "running requests per lane (data_parallel_size lanes)"),
    "max_num_batched_tokens": Mapped("max_num_batched_tokens", "the tokens one step may compute"),
    "block_size": Mapped("block_size", "tokens per KV block"),
    "enable_prefix_caching": Mapped("enable_prefix_caching", "KV blocks of shared prefixes are reused"),
    "enable_chunked_prefill": Mapped("enable_chunked_prefill", "long prompts are prefilled in chunks"),
    "gpu_memory_utilization": Mapped(
        "kv_cache_memory_fraction", "the KV cache takes this fraction of the memory the weights and the "
        "step's measured peak leave free (vLLM: of the whole GPU, weights included)"),
    "kv_cache_memory_bytes": Mapped("kv_cache_memory_bytes", "the KV cache's memory, shared by all lanes"),
    "num_gpu_blocks_override": Mapped("num_kv_blocks", "physical KV blocks per lane"),
    "enforce_eager": Mapped("trace_mode", "true: trace_mode=none (every step eager); false: trace_mode "
                            "keeps its default (auto)", _eager),
    "async_scheduling": Mapped("async_scheduling", "host work overlaps the device's step"),
    "data_parallel_size": Mapped("data_parallel_size", "lanes: independent schedulers and KV caches "
                                 "whose steps run as one batch"),
    "tensor_parallel_size": Mapped("tensor_parallel_size", "1 only: the mesh shape sets parallelism"),
    "pipeline_parallel_size": Mapped("pipeline_parallel_size", "1 only: the mesh shape sets parallelism"),
    "device": Mapped("device", "cpu, cuda, tt or auto"),
    "enable_lora": Mapped("enable_lora", "false only: LoRA adapters are not supported yet"),
    # -- accepted, no effect here
    "disable_log_requests": _NO_REQUEST_LOG,
    "enable_log_requests": _NO_REQUEST_LOG,
    "disable_log_stats": Ignored("no periodic stats log: the engine's stats are Prometheus metrics on "
                                 "Triton's metrics port, always on"),
    "trust_remote_code": Ignored("no checkpoint code runs: architectures come from tt_backend's registry "
                                 "(builtins and EXTRA_MODELS_DIR bundles)"),
    "swap_space": Ignored("a preempted request is recomputed, never swapped to host memory"),
    "preemption_mode": Ignored("a preempted request is always recomputed"),
    "download_dir": _NO_DOWNLOAD,
    "hf_token": _NO_DOWNLOAD,
    "max_seq_len_to_capture": _TRACES,
    "cuda_graph_sizes": _TRACES,
    "compilation_config": _TRACES,
    "max_parallel_loading_workers": Ignored("one process loads the weights"),
    "distributed_executor_backend": Ignored("one engine process per Triton instance; lanes run in it"),
    "worker_use_ray": Ignored("one engine process per Triton instance; no Ray"),
    "disable_custom_all_reduce": Ignored("no NCCL all-reduce runs here"),
    "tokenizer_pool_size": Ignored("Triton's preprocessing model and the OpenAI front tokenize"),
    "guided_decoding_backend": Ignored("structured outputs always compile with llguidance"),
    "structured_outputs_config": Ignored("structured outputs always compile with llguidance"),
    "max_logprobs": Ignored("top logprobs per token are capped at 20 (vLLM's default), not configurable"),
    "generation_config": Ignored("sampling defaults come from each request (EOS ids from "
                                 "generation_config.json are used)"),
    "model_impl": Ignored("implementations come from tt_backend's registry"),
    "config_format": Ignored("the checkpoint's config.json (or the GGUF's metadata) is read"),
    "ignore_patterns": _NO_DOWNLOAD,
    "calculate_kv_scales": Ignored("the KV cache is kept in the model's dtype; no scales"),
    "disable_cascade_attn": Ignored("no cascade attention here"),
    "prefix_caching_hash_algo": Ignored("blocks are hashed by this engine's own scheme"),
    "use_v2_block_manager": _V0,
    "num_scheduler_steps": _V0,
    "num_lookahead_slots": _V0,
    "disable_async_output_proc": _V0,
    "long_prefill_token_threshold": _V0,
    "max_num_partial_prefills": _V0,
    "max_long_partial_prefills": _V0,
    "otlp_traces_endpoint": Ignored("no OpenTelemetry export; Prometheus metrics on Triton's port"),
    "collect_detailed_traces": Ignored("no OpenTelemetry export; Prometheus metrics on Triton's port"),
    "max_loras": _LORA_OFF,
    "max_lora_rank": _LORA_OFF,
    "max_cpu_loras": _LORA_OFF,
    "reasoning_parser": _FRONT,
    "tool_call_parser": _FRONT,
    "enable_auto_tool_choice": _FRONT,
    "chat_template": _FRONT,
    # -- refused unless at the value vLLM's default means
    "kv_cache_dtype": Refused("the KV cache is kept in the model's dtype (the dtype option)", ("auto",)),
    "quantization": Refused("a quantized checkpoint loads as a GGUF file (its Q8_0/Q4_0/Q4_1 blocks kept "
                            "or widened by weight_dtype)", (None, "gguf")),
    "load_format": Refused("weights are read as safetensors or GGUF, by the files present",
                           ("auto", "safetensors", "gguf")),
    "tokenizer_mode": Refused("the checkpoint's Hugging Face tokenizer is used", ("auto", "hf")),
    "skip_tokenizer_init": Refused("the engine tokenizes text_input and detokenizes outputs", (False,)),
    "revision": Refused("an HF id serves the HF cache's main snapshot; for another revision set model "
                        "to its snapshot folder", (None, "main")),
    "task": Refused("this engine generates text only", ("auto", "generate")),
    "runner": Refused("this engine generates text only", ("auto", "generate")),
    "convert": Refused("this engine generates text only", ("auto", "none")),
    "pooler_config": Refused("this engine generates text only", (None,)),
    "scheduling_policy": Refused("requests are scheduled first come, first served", ("fcfs",)),
    "speculative_config": Refused("speculative decoding is not supported yet", (None,)),
    "num_speculative_tokens": Refused("speculative decoding is not supported yet", (None, 0)),
    "rope_scaling": Refused(_AS_IS, (None, {})),
    "rope_theta": Refused(_AS_IS, (None,)),
    "hf_overrides": Refused(_AS_IS, (None, {})),
    "limit_mm_per_prompt": Refused("tt_llm takes up to 4 images a request; the OpenAI front's "
                                   "--limit-mm-per-prompt sets the front's limit", (None, {})),
    "mm_processor_kwargs": Refused("a vision model's HF processor runs with the options its checkpoint "
                                   "saves (processor_config.json); change them in a copy of the checkpoint",
                                   (None, {})),
    "kv_transfer_config": Refused("no disaggregated prefill or KV transfer", (None,)),
    "enable_expert_parallel": Refused("no expert parallelism; the mesh shape sets parallelism", (False,)),
    "disable_sliding_window": Refused("a sliding window applies as the model's config.json declares",
                                      (False,)),
    "enable_sleep_mode": Refused("no sleep mode: the weights stay loaded", (False,)),
    "cpu_offload_gb": Refused("weights are never offloaded; they stay on the device", (0,)),
    "logits_processors": Refused("custom logits processors register through logits_processor_modules "
                                 "(modules imported at start)", (None, [])),
}


@dataclass(frozen=True)
class Note:
    """One argument's effect, for the log: INFO when mapped or accepted, WARNING when ignored or
    overridden by config.pbtxt."""

    argument: str
    level: int
    message: str


@dataclass(frozen=True)
class EngineArguments:
    """model.json translated: our options as config.pbtxt strings, and one note per argument."""

    parameters: dict[str, str]
    notes: tuple[Note, ...]


def _own_options() -> set[str]:
    from tt_backend.config.options import EngineConfig  # options.py imports values.py, not this

    return {f.name for f in dataclasses.fields(EngineConfig) if not f.metadata.get("internal")}


def translate(arguments: Mapping[str, JsonValue], source: str = MODEL_JSON) -> EngineArguments:
    """Our options for vLLM engine `arguments`; a ValueError naming the argument for a refused or
    unknown one, or for two arguments that set one option differently."""
    own = _own_options()
    params: dict[str, str] = {}
    setters: dict[str, str] = {}
    notes: list[Note] = []

    def put(argument: str, option: str, value: str | None, effect: str) -> None:
        if value is None:
            notes.append(Note(argument, logging.INFO, f"{source}: {argument}: our default ({effect})"))
            return
        if option in params and params[option] != value:
            raise ValueError(f"{source}: {argument}={value!r} and {setters[option]}={params[option]!r} "
                             f"both set {option}, differently ({effect})")
        params[option], setters[option] = value, argument
        notes.append(Note(argument, logging.INFO, f"{source}: {argument} -> {option}={value} ({effect})"))

    for argument, value in arguments.items():
        name = argument.replace("-", "_")
        rule = VLLM_ARGS.get(name)
        if rule is None and name == "additional_config" and isinstance(value, dict):
            flat = {**{k: v for k, v in value.items() if k != "tt"}, **value.get("tt", {})}
            for key, item in flat.items():
                option = key.removeprefix("tt.")
                if option not in own:
                    raise ValueError(f"{source}: additional_config names {key!r}, which is no option of "
                                     f"this engine; known options: {', '.join(sorted(own))}")
                put(f"additional_config.{key}", option, _text(item), "this engine's option")
        elif rule is None:
            option = name.removeprefix("tt.")
            if option not in own:
                raise ValueError(f"{source}: unknown engine argument {argument!r}: neither a vLLM engine "
                                 "argument this backend knows nor one of its options (see the README's "
                                 "table of vLLM engine arguments)")
            put(argument, option, _text(value), "this engine's option")
        elif isinstance(rule, Mapped):
            put(argument, rule.option, rule.convert(value), rule.effect)
        elif isinstance(rule, Ignored):
            notes.append(Note(argument, logging.WARNING,
                              f"{source}: {argument}={value!r} has no effect here: {rule.why}"))
        elif value in rule.accepts:
            notes.append(Note(argument, logging.INFO,
                              f"{source}: {argument}={value!r}: as here ({rule.why})"))
        else:
            raise ValueError(f"{source}: {argument}={value!r} is not supported: {rule.why}")
    return EngineArguments(params, tuple(notes))


def find_model_json(model_folder: Path, version: str = "1") -> Path | None:
    """vllm_backend's `<model>/<version>/model.json`, or `<model>/model.json`; None when neither."""
    found = [p for p in (model_folder / version / MODEL_JSON, model_folder / MODEL_JSON) if p.is_file()]
    if len(found) > 1:
        raise ValueError(f"both {found[0]} and {found[1]} exist; keep one")
    return found[0] if found else None


def read_model_json(path: Path) -> EngineArguments:
    try:
        arguments = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"{path} must hold a JSON object of vLLM engine arguments")
    return translate(arguments, str(path))


def engine_parameters(pbtxt: Mapping[str, str], model_json: Path | None) -> EngineArguments:
    """The engine's options: model.json's mapped arguments, overridden by config.pbtxt's parameters
    (bare or `tt.`-prefixed), with model.json's notes and one per override."""
    if model_json is None:
        return EngineArguments(dict(pbtxt), ())
    translated = read_model_json(model_json)
    given = {name.removeprefix("tt.") for name in pbtxt}
    params = {k: v for k, v in translated.parameters.items() if k not in given}
    notes = list(translated.notes)
    for option in sorted(set(translated.parameters) & given):
        notes.append(Note(option, logging.WARNING, f"{model_json}: {option}={translated.parameters[option]} "
                          "is overridden by config.pbtxt's parameter (config.pbtxt wins)"))
    return EngineArguments({**params, **pbtxt}, tuple(notes))
