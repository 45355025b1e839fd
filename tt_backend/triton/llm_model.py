"""The `tt_llm` Triton model: parse → engine.add_request; stream results back.

Threads, each with one job:
- Triton's thread calls `execute`, which parses, tokenizes and enqueues; it never blocks.
- The engine thread runs the step loop and puts each output on the response queue.
- The response thread is the only one that sends responses, updates metrics and polls
  cancellation, so `pb_utils` is never used from two threads at once.
`finalize` stops the engine first (every live request gets its final response queued), then
the response thread.
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import triton_python_backend_utils as pb_utils

from tt_backend.assembly import build_engine, place_instance
from tt_backend.config import EngineConfig
from tt_backend.contract.errors import ErrorKind, kind_of
from tt_backend.contract.modes import FinishReason
from tt_backend.engine.outputs import RequestOutput
from tt_backend.engine.stats import EngineStats
from tt_backend.models.checkpoint import served_model_name
from tt_backend.text.tokenizer import check_prompt_bytes, max_token_bytes
from tt_backend.triton.errors import code_of, coded_error, wants_code_in_message
from tt_backend.triton.metrics import EngineMetrics
from tt_backend.triton.model_instance import instance_position
from tt_backend.triton.model_params import model_parameters, setup_logging, vllm_engine_parameters
from tt_backend.triton.request_inputs import parse_generate_request
from tt_backend.triton.response_builder import ResponseBuilder, Tensors

logger = logging.getLogger(__name__)

CANCEL_POLL_S = 0.05
FINALIZE_DUMP_S = 10.0
"""After this long in finalize, every thread's stack goes to the log."""


@dataclass
class _Live:
    sender: Any
    builder: ResponseBuilder
    code_in_message: bool
    """Its error's code goes at the head of the text too (errors.CODE_IN_MESSAGE)."""
    cancel_requested: bool = False


@dataclass(frozen=True)
class _Register:
    request_id: str
    live: _Live


@dataclass(frozen=True)
class _Output:
    output: RequestOutput


@dataclass(frozen=True)
class _Reject:
    sender: Any
    message: str
    request_id: str
    """Dropped from the live requests if it was registered before the engine refused it."""
    kind: ErrorKind
    code_in_message: bool


@dataclass(frozen=True)
class _EngineFailed:
    error: BaseException


_STOP = object()


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        setup_logging()
        model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(model_config):
            raise ValueError("tt_llm must be configured with model_transaction_policy { decoupled: true }")
        config = EngineConfig.from_parameters(vllm_engine_parameters(args, model_parameters(model_config)))
        # Before anything asks ttnn for a device: on device=tt each instance opens its own chips
        instance = instance_position(args.get("model_instance_name", ""), model_config)
        config = place_instance(config, instance.index, instance.count)
        self.engine = build_engine(config)
        self.tokenizer = self.engine.tokenizer
        self._token_bytes = max_token_bytes(self.tokenizer)
        self._ids = itertools.count()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._live: dict[str, _Live] = {}  # response thread only
        resolved = self.engine.config
        name = served_model_name(config.model, config.served_model_name)
        logger.info("serving %s as %r (the OpenAI front's `model`, the metrics' model_name)",
                    config.model or "the default model", name)
        self.metrics = EngineMetrics(args["model_name"], name,
                                     resolved.data_parallel_size, self.engine.cache_info,
                                     self.engine.max_model_len, resolved.max_num_batched_tokens,
                                     first_lane=instance.index * resolved.data_parallel_size)
        self.engine.set_stats_listener(self._queue.put)
        self.engine.set_failure_listener(lambda exc: self._queue.put(_EngineFailed(exc)))
        self._thread = threading.Thread(target=self._response_loop, name="tt-responses", daemon=True)
        self._thread.start()
        self.engine.start()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            self._submit(request)
        return None

    def finalize(self) -> None:
        # Triton waits its exit timeout (30 s) on a model that does not unload: if this takes
        # long, every thread's stack goes to the log, to say where it waits.
        faulthandler.dump_traceback_later(FINALIZE_DUMP_S, exit=False)
        started = time.monotonic()
        self.engine.shutdown()
        self._queue.put(_STOP)
        self._thread.join()
        faulthandler.cancel_dump_traceback_later()
        logger.info("finalized in %.2f s", time.monotonic() - started)

    # ---- intake (Triton's thread) -----------------------------------------------------------
    def _submit(self, request: Any) -> None:
        sender = request.get_response_sender()
        request_id = f"req-{next(self._ids)}"
        code_in_message = wants_code_in_message(request)
        try:
            inputs = {t.name(): t.as_numpy() for t in request.inputs()}
            parsed = parse_generate_request(inputs)
            prompt_ids = parsed.prompt_ids
            if prompt_ids is None:
                assert parsed.prompt_text is not None
                check_prompt_bytes("text_input", parsed.prompt_text, self.engine.max_model_len,
                                   self._token_bytes)
                prompt_ids = tuple(self.tokenizer(parsed.prompt_text).input_ids)
            # Registered before the engine sees it, so no output can overtake the registration.
            self._queue.put(_Register(request_id, _Live(sender, ResponseBuilder(parsed, prompt_ids),
                                                             code_in_message)))
            self.engine.add_request(request_id, list(prompt_ids), parsed.sampling,
                                    lambda out: self._queue.put(_Output(out)), parsed.images,
                                    parsed.prompt_text if parsed.prompt_ids is None else None)
        except Exception as exc:  # noqa: BLE001 (every refusal is this request's final response)
            self._queue.put(_Reject(sender, str(exc), request_id, kind_of(exc), code_in_message))

    # ---- responses (the response thread) ---------------------------------------------------
    def _response_loop(self) -> None:
        last_poll = time.monotonic()
        while True:
            try:
                item = self._queue.get(timeout=CANCEL_POLL_S)
            except queue.Empty:
                item = None
            if item is _STOP:
                return
            try:
                self._handle(item)
            except Exception:
                logger.exception("failed to send a response")
            if time.monotonic() - last_poll >= CANCEL_POLL_S:
                self._poll_cancellation()
                last_poll = time.monotonic()

    def _handle(self, item: object) -> None:
        if isinstance(item, _Register):
            self._live[item.request_id] = item.live
        elif isinstance(item, _Reject):
            self._live.pop(item.request_id, None)
            self._send_error(item.sender, item.message, code_of(item.kind), item.code_in_message)
        elif isinstance(item, _Output):
            self._on_output(item.output)
        elif isinstance(item, EngineStats):
            self.metrics.update(item)
        elif isinstance(item, _EngineFailed):
            # A failed loop queued every pending request's error before this item; a hung step
            # (the watchdog) queued none, so whatever is still live ends here. Then the stub
            # exits: scripts/supervise.py sees it gone and restarts tritonserver (Triton itself
            # would go on reporting ready while this model fails every request).
            for live in self._live.values():
                self._send_error(live.sender, f"engine failed: {item.error}", code_of(ErrorKind.UNAVAILABLE),
                                 live.code_in_message)
            self._live.clear()
            self.metrics.engine_failed()
            logger.critical("the engine failed (%r); exiting the model instance", item.error)
            os._exit(1)

    def _on_output(self, out: RequestOutput) -> None:
        live = self._live.get(out.request_id)
        if live is None:  # its stream already ended (its response failed to build): nothing to send
            return
        if out.finished:
            del self._live[out.request_id]
        if out.finish_reason is FinishReason.ABORT:
            if live.cancel_requested:
                self._send_error(live.sender, "Request was cancelled", "CANCELLED", live.code_in_message)
            else:
                self._send_error(live.sender, "request aborted: the model is shutting down",
                                 code_of(ErrorKind.UNAVAILABLE), live.code_in_message)
        elif out.finish_reason is FinishReason.ERROR:
            self._send_error(live.sender, out.error or "request failed", code_of(out.error_kind),
                             live.code_in_message)
        else:
            try:
                tensors = live.builder.on_output(out)
            except Exception as exc:  # noqa: BLE001 (its response fails to build: it alone ends)
                logger.exception("request %s: building its response failed", out.request_id)
                self._live.pop(out.request_id, None)
                if not out.finished:
                    self.engine.abort(out.request_id)
                self._send_error(live.sender, f"building the response failed: {exc}",
                                 code_of(ErrorKind.INTERNAL), live.code_in_message)
                return
            if tensors is not None:
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if out.finished else 0
                live.sender.send(_response(tensors), flags=flags)

    def _poll_cancellation(self) -> None:
        for request_id, live in self._live.items():
            if not live.cancel_requested and live.sender.is_cancelled():
                live.cancel_requested = True
                self.engine.abort(request_id)

    @staticmethod
    def _send_error(sender: Any, message: str, code: str, code_in_message: bool) -> None:
        """The request's final response: an error with the TritonError code named `code`."""
        error = coded_error(message, code, code_in_message)
        sender.send(pb_utils.InferenceResponse(output_tensors=[], error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def _response(tensors: Tensors) -> Any:
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor(name, value) for name, value in tensors.items()])
