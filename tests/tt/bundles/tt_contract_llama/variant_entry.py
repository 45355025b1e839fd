"""The module of every variant bundle (variants/<name>/llama/variant.py is a link to this file): the
class `contract_generator.VARIANTS[<name>]`, <name> being the folder two levels above the link. A
scenario selects it with extra_models_dir=tests/tt/bundles/tt_contract_llama/variants/<name> (see
RULES.md). `generator()` is contract_generator.py, loaded once by its path (the registry loads a
bundle's file alone)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

_LINK = Path(__file__).absolute()  # the link's own path (resolving it would lose the variant's name)
_NAME = "tt_contract_llama_generator"


def generator() -> ModuleType:
    if _NAME not in sys.modules:
        path = Path(os.path.realpath(__file__)).with_name("contract_generator.py")
        spec = importlib.util.spec_from_file_location(_NAME, path)
        assert spec is not None and spec.loader is not None
        sys.modules[_NAME] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[_NAME])
    return sys.modules[_NAME]


if _LINK.parents[1].name in generator().VARIANTS:
    TTLlamaForCausalLM: type = generator().VARIANTS[_LINK.parents[1].name]
