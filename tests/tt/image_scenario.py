"""The `engine_images` scenario of scenarios.py: chat prompts with images through the engine on the
mesh, one after another (greedy); returns their tokens and what the contract generator was given:
each prefill's prompt lengths and the images of each of its rows (Mllama's: the pictures' sizes and
the cross_page_table), and the rope deltas of each decode (Mllama's: the rows given masks, with
their cross_page_table rows)."""

from __future__ import annotations

import base64
import threading
from typing import Any

from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.params import SamplingParams
from tt_backend.text.images import ImageLimits, decode_image


def engine_images(params: dict[str, str], requests: list[dict[str, Any]], max_tokens: int,
                  together: bool = False) -> dict[str, Any]:
    """Each request: {"text": the prompt, with one placeholder per image, "images": base64 files}.
    One after another, or `together`: all added before the engine starts (one step prefills them)."""
    llm = build_engine(EngineConfig.from_parameters(params))
    runner: Any = llm.runner
    generator = runner.generator
    prefill, decode, runner_prefill = generator.prefill_forward, generator.decode_forward, runner.prefill
    prefills: list[dict[str, Any]] = []
    decode_deltas: list[list[int]] = []
    decode_masks: list[dict[int, list[int]]] = []

    def recording_prefill(tokens: Any, **kwargs: Any) -> Any:
        grids = kwargs.get("image_grid_thw") or [None] * tokens.shape[0]
        prefills.append({"prompt_lens": list(kwargs["prompt_lens"]),
                         "images": [None if p is None else [list(x.shape) for x in p]
                                    for p in kwargs.get("pixel_values", [None] * tokens.shape[0])],
                         "grids": [None if g is None else [x.tolist() for x in g] for g in grids],
                         "enable_trace": kwargs.get("enable_trace"),
                         "pictures": [None if im is None else list(im.size)
                                      for im in kwargs.get("images", [])],
                         "cross_page_table": _listed(kwargs.get("cross_page_table"))})
        return prefill(tokens, **kwargs)

    def recording_decode(*args: Any, **kwargs: Any) -> Any:
        decode_deltas.append(list(kwargs.get("rope_deltas_all_users") or []))
        masks = kwargs.get("decode_cross_attention_masks")
        if masks is not None:  # Mllama: which batch rows got masks, and the cross table of those rows
            table = kwargs["cross_page_table"]
            decode_masks.append({row: table[row].tolist() for row, mask in enumerate(masks)
                                 if mask is not None})
        return decode(*args, **kwargs)

    steps_with_prefill = 0

    def counting_prefill(*args: Any, **kwargs: Any) -> Any:
        nonlocal steps_with_prefill
        steps_with_prefill += 1
        return runner_prefill(*args, **kwargs)

    generator.prefill_forward, generator.decode_forward = recording_prefill, recording_decode
    runner.prefill = counting_prefill
    outputs: list[list[int]] = [[] for _ in requests]
    errors: list[str] = []
    done = [threading.Event() for _ in requests]
    if not together:
        llm.start()
    try:
        for i, request in enumerate(requests):
            def on_output(out: RequestOutput, i: int = i) -> None:
                outputs[i].extend(out.new_token_ids)
                if out.error is not None:
                    errors.append(out.error)
                if out.finished or out.error is not None:
                    done[i].set()
            images = tuple(decode_image(base64.b64decode(data), "image", ImageLimits())
                           for data in request["images"])
            ids = llm.tokenizer(request["text"]).input_ids
            greedy = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
            llm.add_request(f"r{i}", ids, greedy, on_output, images, request["text"])
            if not together:
                assert done[i].wait(timeout=600), f"request r{i} did not finish"
        if together:
            llm.start()
            assert all(event.wait(timeout=600) for event in done), "a request did not finish"
        assert not errors, errors[0]
        seen = {"prefill_calls": generator.prefill_calls, "decode_calls": generator.decode_calls}
    finally:
        llm.shutdown()
    return {"tokens": outputs, "prefills": prefills, "decode_deltas": decode_deltas,
            "decode_masks": decode_masks, **seen, "steps_with_prefill": steps_with_prefill,
            "trace_prefill": runner.trace.prefill, "eager_steps": runner.eager_steps,
            "traced_steps": runner.traced_steps}


def _listed(table: Any) -> list[list[int]] | None:
    return None if table is None else table.tolist()
