"""The `preprocessing`/`postprocessing` Triton models import no torch, and encode like the engine.

A fresh interpreter stands in a bare `triton_python_backend_utils` module (the real one exists
only inside tritonserver's Python stub; initialize and encode never touch it), imports the models,
resolves the default model directory and initializes both models from a model_config.
Torch stays out through the tokenizer load and both models' work (transformers' AutoTokenizer
would import it; `load_tokenizer` loads the class the tokenizer config names), and the ids are
compared with this process's; the class is the one AutoTokenizer picks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tt_backend.text.detokenizer import delta_text

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write the word 'café' three times."

CHILD = """
import json, sys, types

sys.modules["triton_python_backend_utils"] = types.ModuleType("triton_python_backend_utils")
from tt_backend.models.checkpoint import resolve_model_dir
from tt_backend.text.detokenizer import delta_text
from tt_backend.triton.tokenizer_models import PostprocessingModel, PreprocessingModel

seen = {"after_import": "torch" in sys.modules}
resolve_model_dir("")
seen["after_resolve"] = "torch" in sys.modules
pre = PreprocessingModel()
pre.initialize({"model_config": json.dumps(
    {"name": "preprocessing", "parameters": {"apply_chat_template": {"string_value": "true"}}})})
plain = PreprocessingModel()
plain.initialize({"model_config": json.dumps(
    {"name": "preprocessing", "parameters": {"apply_chat_template": {"string_value": "false"}}})})
post = PostprocessingModel()
post.initialize({"model_config": json.dumps({"name": "postprocessing"})})
ids = pre.encode(sys.argv[1])
seen["after_load"] = "torch" in sys.modules
print(json.dumps({"seen": seen, "class": type(pre.tokenizer).__name__,
                  "chat": pre.chat, "ids": ids, "plain_ids": plain.encode(sys.argv[1]),
                  "delta": delta_text(post.tokenizer, ids[:-4], ids[-4:])}))
"""


def test_tokenizer_models_import_no_torch_and_encode_like_the_engine(
        model_dir: Path, tokenizer: Any, chat_ids: Callable[[str], list[int]]) -> None:
    # model_dir: the default GGUF is converted (which needs torch) before the child resolves it.
    assert model_dir.is_dir()
    child = subprocess.run([sys.executable, "-c", CHILD, PROMPT], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout.splitlines()[-1])
    assert result["seen"] == {"after_import": False, "after_resolve": False, "after_load": False}
    from transformers import AutoTokenizer
    assert result["class"] == type(AutoTokenizer.from_pretrained(model_dir)).__name__
    assert result["chat"] is True
    ids = chat_ids(PROMPT)
    assert result["ids"] == ids
    assert result["plain_ids"] == list(tokenizer(PROMPT).input_ids)
    assert result["plain_ids"] != ids  # the template adds the system and user turns
    assert result["delta"] == delta_text(tokenizer, ids[:-4], ids[-4:])
