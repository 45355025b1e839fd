"""The current contract generator without data parallelism: its initialize_vllm_model takes no
tt_data_parallel, so it is not single-execute (models/tt_capabilities.py) and serves
data_parallel_size>1 only as one lane per Triton model instance, each on its own chips
(assembly/instances.py). A scenario selects it with
extra_models_dir=tests/tt/bundles/tt_contract_llama/variants/per_instance."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve()
_NAME = "tt_contract_llama_generator"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _HERE.parents[3] / "contract_generator.py")
    assert _spec is not None and _spec.loader is not None
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])

_Current: Any = sys.modules[_NAME].VARIANTS["current"]


class TTLlamaForCausalLM(_Current):  # type: ignore[misc]
    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              n_layers: int | None = None, optimizations: str = "performance") -> Any:
        """One submesh: the whole mesh this process opened."""
        return super().initialize_vllm_model(hf_config, mesh_device, max_batch_size, max_seq_len,
                                             n_layers=n_layers, optimizations=optimizations)
