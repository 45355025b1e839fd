"""preprocessing: text_input → input_ids with the model's tokenizer."""

from tt_backend.triton.tokenizer_models import PreprocessingModel as TritonPythonModel

__all__ = ["TritonPythonModel"]
