"""The `engine_images` scenario of scenarios.py: chat prompts with images through the engine on the
mesh, one after another (greedy); returns their tokens and what the contract generator was given:
each prefill's prompt lengths and the images of each of its rows, and the rope deltas of each decode."""

from __future__ import annotations

import base64
import threading
from typing import Any

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.images import ImageLimits, decode_image


def engine_images(params: dict[str, str], requests: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    """Each request: {"text": the prompt, with one placeholder per image, "images": base64 files}."""
    llm = build_engine(EngineConfig.from_parameters(params))
    runner: Any = llm.runner
    generator = runner.generator
    prefill, decode = generator.prefill_forward, generator.decode_forward
    prefills: list[dict[str, Any]] = []
    decode_deltas: list[list[int]] = []

    def recording_prefill(tokens: Any, **kwargs: Any) -> Any:
        grids = kwargs.get("image_grid_thw") or [None] * tokens.shape[0]
        prefills.append({"prompt_lens": list(kwargs["prompt_lens"]),
                         "images": [None if p is None else [list(x.shape) for x in p]
                                    for p in kwargs.get("pixel_values", [None] * tokens.shape[0])],
                         "grids": [None if g is None else [x.tolist() for x in g] for g in grids]})
        return prefill(tokens, **kwargs)

    def recording_decode(*args: Any, **kwargs: Any) -> Any:
        decode_deltas.append(list(kwargs.get("rope_deltas_all_users") or []))
        return decode(*args, **kwargs)

    generator.prefill_forward, generator.decode_forward = recording_prefill, recording_decode
    outputs: list[list[int]] = [[] for _ in requests]
    errors: list[str] = []
    llm.start()
    try:
        for i, request in enumerate(requests):
            done = threading.Event()

            def on_output(out: RequestOutput, i: int = i, done: threading.Event = done) -> None:
                outputs[i].extend(out.new_token_ids)
                if out.error is not None:
                    errors.append(out.error)
                if out.finished or out.error is not None:
                    done.set()
            images = tuple(decode_image(base64.b64decode(data), "image", ImageLimits())
                           for data in request["images"])
            ids = llm.tokenizer(request["text"]).input_ids
            greedy = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
            llm.add_request(f"r{i}", ids, greedy, on_output, images, request["text"])
            assert done.wait(timeout=600), f"request r{i} did not finish"
        assert not errors, errors[0]
        seen = {"prefill_calls": generator.prefill_calls, "decode_calls": generator.decode_calls}
    finally:
        llm.shutdown()
    return {"tokens": outputs, "prefills": prefills, "decode_deltas": decode_deltas, **seen,
            "eager_steps": runner.eager_steps, "traced_steps": runner.traced_steps}
