"""One variant of the contract generator as a bundle of its own: the class
`contract_generator.VARIANTS[<name>]`, <name> being the folder two levels up
(tt_contract_llama/variants/<name>/llama/). A scenario selects it with
extra_models_dir=tests/tt/bundles/tt_contract_llama/variants/<name> (see ../../../RULES.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve()
_NAME = "tt_contract_llama_generator"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _HERE.parents[3] / "contract_generator.py")
    assert _spec is not None and _spec.loader is not None
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])

TTLlamaForCausalLM: type = sys.modules[_NAME].VARIANTS[_HERE.parents[1].name]
