"""postprocessing: output_ids (+ context_ids) → exact text delta."""

from tt_backend.triton.tokenizer_models import PostprocessingModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
