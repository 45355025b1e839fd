"""tensorrt_llm_bls: TensorRT-LLM's BLS model over preprocessing → tt_llm → postprocessing."""

from tt_backend.triton.bls_model import BlsModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
