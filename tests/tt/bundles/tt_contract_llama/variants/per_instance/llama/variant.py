"""The current contract generator without data parallelism: its initialize_vllm_model takes no
tt_data_parallel, so it is not single-execute (models/tt_capabilities.py) and serves
data_parallel_size>1 only as one lane per Triton model instance, each on its own chips
(assembly/instances.py). A scenario selects it with
extra_models_dir=tests/tt/bundles/tt_contract_llama/variants/per_instance."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("tt_contract_llama_variant_entry",
                                               Path(__file__).resolve().parents[3] / "variant_entry.py")
assert _spec is not None and _spec.loader is not None
_entry = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_entry)
_Current: Any = _entry.generator().VARIANTS["current"]


class TTLlamaForCausalLM(_Current):  # type: ignore[misc]
    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              n_layers: int | None = None, optimizations: str = "performance") -> Any:
        """One submesh: the whole mesh this process opened."""
        return super().initialize_vllm_model(hf_config, mesh_device, max_batch_size, max_seq_len,
                                             n_layers=n_layers, optimizations=optimizations)
