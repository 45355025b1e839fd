"""`tensorrt_llm_bls`: TensorRT-LLM's BLS model over our models: preprocessing → tt_llm →
postprocessing through `pb_utils.InferenceRequest`, streaming as TRT-LLM's does (one response per
tt_llm response, then an empty final one), with the inputs and outputs of TRT-LLM's
`tensorrt_llm_bls` (those of the ensemble: tt_backend.triton.trtllm_inputs).

execute() never blocks: each request runs on its own thread, which waits on the models it calls.
A cancelled request stops receiving; the Python backend of Triton 2.51 cannot cancel a BLS stream
(its response iterator has no cancel()), so tt_llm finishes that request up to its max_tokens.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import triton_python_backend_utils as pb_utils

from tt_backend.triton.model_params import setup_logging

logger = logging.getLogger(__name__)

_PRE, _LLM, _POST = "preprocessing", "tt_llm", "postprocessing"
_LLM_INPUTS = {"input_ids": "input_ids", "sampling_parameters": "sampling_parameters",
               "llm_stream": "stream", "llm_exclude_input_in_output": "exclude_input_in_output",
               "llm_return_log_probs": "return_log_probs", "llm_return_num_tokens": "return_num_input_tokens"}
"""preprocessing's outputs → tt_llm's inputs (the ensemble's config maps the same)."""
_PRE_OUTPUTS = [*_LLM_INPUTS]
_POST_OUTPUTS = ["text_output", "cum_log_probs", "output_log_probs", "batch_index", "sequence_index",
                 "num_input_tokens", "num_output_tokens"]
_POST_INPUTS = {"output_ids": "output_ids", "context_ids": "context_ids",
                "output_log_probs": "llm_output_log_probs", "cum_log_probs": "llm_cum_log_probs",
                "num_input_tokens": "llm_num_input_tokens", "num_output_tokens": "llm_num_output_tokens"}
"""tt_llm's outputs → postprocessing's inputs."""


class _Failed(Exception):
    """A called model answered with an error: it becomes this request's final response as is."""

    def __init__(self, error: Any) -> None:
        super().__init__(error.message())
        self.error = error


class BlsModel:
    def initialize(self, args: dict[str, str]) -> None:
        setup_logging()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            thread = threading.Thread(target=self._serve, args=(request,), name="tt-bls", daemon=True)
            with self._lock:
                self._threads.add(thread)
            thread.start()
        return None

    def finalize(self) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads:  # requests in flight end with their models' unloading
            thread.join(timeout=30)

    def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        try:
            self._stream(request, sender)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except _Failed as failed:
            _send_final_error(sender, failed.error)
        except Exception as exc:  # noqa: BLE001 (every failure is this request's final response)
            logger.exception("tensorrt_llm_bls: a request failed")
            _send_final_error(sender, pb_utils.TritonError(f"tensorrt_llm_bls: {exc}"))
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _stream(self, request: Any, sender: Any) -> None:
        pre = _exec(_PRE, list(request.inputs()), _PRE_OUTPUTS)
        llm_inputs = [_renamed(pre, name, new) for name, new in _LLM_INPUTS.items()]
        llm_inputs.append(_renamed(pre, "llm_return_num_tokens", "return_num_output_tokens"))
        llm = pb_utils.InferenceRequest(model_name=_LLM, inputs=llm_inputs,
                                        requested_output_names=list(_POST_INPUTS))
        for response in llm.exec(decoupled=True):
            if response.has_error():
                raise _Failed(response.error())
            if sender.is_cancelled():
                raise _Failed(pb_utils.TritonError("Request was cancelled", pb_utils.TritonError.CANCELLED))
            if not response.output_tensors():  # tt_llm's stream ended
                continue
            post = _exec(_POST, [_renamed(response, name, new) for name, new in _POST_INPUTS.items()],
                         _POST_OUTPUTS)
            sender.send(pb_utils.InferenceResponse(output_tensors=post.output_tensors()))


def _exec(model: str, inputs: list[Any], outputs: list[str]) -> Any:
    request = pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=outputs)
    response = request.exec()
    if response.has_error():
        raise _Failed(response.error())
    return response


def _renamed(response: Any, name: str, new: str) -> Any:
    tensor = pb_utils.get_output_tensor_by_name(response, name)
    assert tensor is not None, f"{name} missing from a response that always holds it"
    return pb_utils.Tensor(new, tensor.as_numpy())


def _send_final_error(sender: Any, error: Any) -> None:
    sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
