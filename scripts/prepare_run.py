"""Lay out one serving run: a copy of model_repository/ with --set options written into the
models' parameters, and a backend directory holding the Python backend with the stub that
matches this interpreter. Prints shell assignments for serve.sh to eval.

The repository in git is never edited. `model` goes to tt_llm, preprocessing and
postprocessing (the tokenizer follows the model); `apply_chat_template` goes to preprocessing;
every other key goes to tt_llm, whose engine validates it at load. `--model-json FILE` puts a
vllm_backend model.json (vLLM engine arguments) at tt_llm/1/model.json; --set options win over it.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import sysconfig
import typing
from pathlib import Path

import pytriton

from tt_backend.config.vllm_args import MODEL_JSON, engine_parameters, find_model_json
from tt_backend.devices.cpu.isa import IsaLevel, torch_caps_env

TOKENIZER_MODELS = ("preprocessing", "postprocessing")
PREPROCESSING_ONLY = ("apply_chat_template",)
INSTANCE_GROUP = "instance_group [ { count: 1, kind: KIND_CPU } ]"


def pbtxt_parameters(params: dict[str, str]) -> str:
    lines = []
    for key, value in params.items():
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{escaped}" }} }}')
    return "\n".join(lines) + "\n"


def write_repository(source: Path, dest: Path, settings: dict[str, str], instances: int = 1,
                     model_json: Path | None = None) -> None:
    shutil.copytree(source, dest)
    if model_json is not None:  # where vllm_backend reads it: the version folder
        for old in (dest / "tt_llm" / "1" / MODEL_JSON, dest / "tt_llm" / MODEL_JSON):
            old.unlink(missing_ok=True)
        shutil.copy2(model_json, dest / "tt_llm" / "1" / MODEL_JSON)
    if instances != 1:  # tt_llm's stub processes (serve.sh --instances)
        config = dest / "tt_llm" / "config.pbtxt"
        text = config.read_text(encoding="utf-8")
        assert INSTANCE_GROUP in text, f"{config} has no {INSTANCE_GROUP}"
        group = f"instance_group [ {{ count: {instances}, kind: KIND_CPU }} ]"
        config.write_text(text.replace(INSTANCE_GROUP, group), encoding="utf-8")
    per_model: dict[str, dict[str, str]] = {
        "tt_llm": {k: v for k, v in settings.items() if k not in PREPROCESSING_ONLY},
        "preprocessing": {k: v for k, v in settings.items() if k in PREPROCESSING_ONLY},
    }
    if "model" in settings:
        for name in TOKENIZER_MODELS:
            per_model.setdefault(name, {})["model"] = settings["model"]
    for name, params in per_model.items():
        if not params:
            continue
        config = dest / name / "config.pbtxt"
        with open(config, "a", encoding="utf-8") as f:
            f.write("\n# written by scripts/serve.sh --set\n" + pbtxt_parameters(params))


def write_backends(dest: Path) -> Path:
    root = Path(pytriton.__file__).parent / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise SystemExit(f"nvidia-pytriton ships no Python backend stub for Python {version}")
    python_dir = dest / "python"
    shutil.copytree(root / "backends" / "python", python_dir,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(stub, python_dir / "triton_python_backend_stub")
    return dest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--instances", type=int, default=1, help="tt_llm's instance_group count")
    parser.add_argument("--model-json", type=Path, default=None,
                        help="a vllm_backend model.json (vLLM engine arguments) for tt_llm")
    args = parser.parse_args()
    settings: dict[str, str] = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set expects KEY=VALUE, got {item!r}")
        settings[key] = value

    # Convert the checkpoint now, with a progress bar, so model loads only read the cache. The
    # options tt_llm will load with: model.json's arguments under the --set ones.
    from tt_backend.models.checkpoint import resolve_model_dir, served_model_name
    try:
        model_json = args.model_json or find_model_json(args.repository / "tt_llm")
        if model_json is not None and not model_json.is_file():
            raise ValueError(f"--model-json {model_json}: no such file")
        engine = engine_parameters(settings, model_json).parameters
        model = engine.get("model", engine.get("tt.model", ""))
        model_dir = resolve_model_dir(model)
        served = served_model_name(model, engine.get("served_model_name",
                                                     engine.get("tt.served_model_name", "")))
    except (ValueError, FileNotFoundError) as exc:
        raise SystemExit(f"serve: {exc}") from None

    repo = args.run_dir / "model_repository"
    if args.instances < 1:
        raise SystemExit(f"serve: --instances expects a count of at least 1, got {args.instances}")
    write_repository(args.repository, repo, settings, args.instances, args.model_json)
    backends = write_backends(args.run_dir / "backends")
    tritonserver = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
    libs = Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs"
    values = {
        "MODEL_DIR": str(model_dir),
        "SERVED_MODEL_NAME": served,
        # The OpenAI front's max context: tt_llm's option when set (0: the model's positions).
        "MAX_MODEL_LEN": engine.get("max_model_len", engine.get("tt.max_model_len", "")) or "0",
        "REPO": str(repo),
        "BACKENDS": str(backends),
        "TRITONSERVER": str(tritonserver),
        # The stub links the first libpython3.x it finds: make it this interpreter's.
        "LIBPATH": f"{sysconfig.get_config_var('LIBDIR')}:{libs}",
    }
    for key, value in values.items():
        print(f"{key}={shlex.quote(value)}")
    # An explicit cpu_isa caps torch's own kernels too (read at process start, so set here); a name
    # that is no level fails the model load with the engine's message.
    level = engine.get("cpu_isa", engine.get("tt.cpu_isa", "auto"))
    if level in typing.get_args(IsaLevel):
        for key, value in torch_caps_env(level).items():  # type: ignore[arg-type]
            print(f"export {key}={shlex.quote(value)}")


if __name__ == "__main__":
    main()
