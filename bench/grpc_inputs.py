"""Shared by the bench scripts: the gRPC inputs of one streamed tt_llm text request."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient


def text_stream_inputs(prompt: str, sampling: dict[str, Any],
                       return_num_output_tokens: bool = False) -> list[grpcclient.InferInput]:
    values = [("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
              ("sampling_parameters", np.array([json.dumps(sampling).encode()], dtype=np.object_), "BYTES"),
              ("stream", np.array([True]), "BOOL")]
    if return_num_output_tokens:
        values.append(("return_num_output_tokens", np.array([True]), "BOOL"))
    inputs = []
    for name, value, dtype in values:
        tensor = grpcclient.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs
