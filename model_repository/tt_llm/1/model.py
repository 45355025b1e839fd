"""tt_llm: the decoupled LLM model; everything lives in tt_backend.triton.llm_model."""

from tt_backend.triton.llm_model import TritonPythonModel

__all__ = ["TritonPythonModel"]
