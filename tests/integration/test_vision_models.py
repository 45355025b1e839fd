"""Tiny random vision-language models (tests/vision_checkpoints.py: LLaVA, Gemma 3 with its vision
tower, Qwen2.5-VL, Llama 3.2 Vision) served through the real tritonserver and the OpenAI front: a chat
request with an image (the openai SDK, a data: URL) and tt_llm's `image` input (tritonclient gRPC;
`text_input` as vllm_backend takes it, and `input_ids`) give HF transformers' greedy tokens; a
second request with the same picture reads the encoder cache (`vllm:mm_cache_hits_total`); a prompt
whose placeholders do not pair with its images is refused naming `image` while a stream in flight
carries on; the client example asks about an image both ways."""

from __future__ import annotations

import base64
import io
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai import OpenAI

from tests.integration.clients import grpc_stream, s, scrape, series, wait_for_metrics
from tests.integration.conftest import ROOT, Server, start_server, stop_server, wait_ready
from tests.vision_checkpoints import (
    build_tiny_gemma3,
    build_tiny_llava,
    build_tiny_mllama,
    build_tiny_qwen2_5_vl,
    hf_vision_greedy,
    picture,
)

pytestmark = pytest.mark.integration
GREEDY = '{"temperature": 0, "max_tokens": 8, "ignore_eos": true}'


@dataclass(frozen=True)
class Family:
    build: Callable[[Path, Path], None]
    placeholder: str
    prompt_format: str
    """A raw prompt around {question}, with one placeholder (as a tt_llm client writes it)."""

    def prompt(self, question: str) -> str:
        return self.prompt_format.format(question=question)


FAMILIES = {
    "llava": Family(build_tiny_llava, "<image>", "USER: <image>\n{question}\nASSISTANT:"),
    "gemma3": Family(build_tiny_gemma3, "<start_of_image>", "<start_of_turn>user\n<start_of_image>{question}"
                     "<end_of_turn>\n<start_of_turn>model\n"),
    # Qwen2-VL is served by the same class and paths (tests/unit/test_qwen2_vl.py checks both against HF)
    "qwen2_5_vl": Family(build_tiny_qwen2_5_vl, "<|image_pad|>", "<|im_start|>user\n<|vision_start|>"
                         "<|image_pad|><|vision_end|>{question}<|im_end|>\n<|im_start|>assistant\n"),
    # Llama 3.2 Vision: the image read by cross-attention layers (its placeholder is not expanded)
    "mllama": Family(build_tiny_mllama, "<|image|>", "<|im_start|>user\n<|image|>{question}<|im_end|>\n"
                     "<|im_start|>assistant\n"),
}


@dataclass(frozen=True)
class Served:
    family: Family
    name: str
    model_dir: Path
    server: Server


@pytest.fixture(scope="module", params=list(FAMILIES))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
           model_dir: Path) -> Iterator[Served]:
    family = FAMILIES[request.param]
    weights = tmp_path_factory.mktemp(f"tiny_{request.param}")
    family.build(model_dir, weights)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    name = f"tiny-{request.param}"
    log = tmp_path_factory.mktemp(f"triton_{request.param}") / "server.log"
    proc, srv = start_server(log, "dtype=float32", f"model={weights}", f"served_model_name={name}",
                             "max_model_len=256", openai_port=port)
    try:
        wait_ready(proc, srv)
        yield Served(family, name, weights, srv)
    finally:
        stop_server(proc)


def b64(data: bytes) -> np.ndarray:
    return np.array([base64.b64encode(data)], dtype=np.object_)


def rendered(model_dir: Path, question: str) -> str:
    """The chat template's prompt of one user turn: an image, then the question (as HF renders it)."""
    from tt_backend.models.processors import load_processor

    turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    processor = load_processor(model_dir)
    text: str = processor.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    return text


def test_chat_with_an_image_through_the_front_gives_hf_greedy_text(served: Served, tokenizer: Any) -> None:
    assert served.server.openai is not None
    question = "What is in this picture?"
    url = "data:image/png;base64," + base64.b64encode(picture(11)).decode()
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}},
                                     {"type": "text", "text": question}]
    ref = hf_vision_greedy(served.model_dir, rendered(served.model_dir, question), [picture(11)], 8)
    client = OpenAI(base_url=served.server.openai, api_key="unused", max_retries=0, timeout=300)
    reply = client.chat.completions.create(model=served.name, messages=[{"role": "user", "content": content}],  # type: ignore[list-item]
                                           max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    assert reply.usage is not None and reply.usage.prompt_tokens == len(ref.prompt)
    assert reply.choices[0].message.content == tokenizer.decode(ref.tokens, skip_special_tokens=True)


def test_tt_llm_takes_the_image_input_and_a_second_request_reads_the_encoder_cache(served: Served,
                                                                                 tokenizer: Any) -> None:
    from transformers import AutoTokenizer

    prompt = served.family.prompt("What is in this picture?")
    ref = hf_vision_greedy(served.model_dir, prompt, [picture(12)], 8)
    queries, hits = (series(name, model_name=served.name) for name in ("vllm:mm_cache_queries_total",
                                                                        "vllm:mm_cache_hits_total"))
    before = scrape(served.server.metrics)
    by_text = grpc_stream(served.server.grpc, "tt_llm", {
        "text_input": s(prompt), "image": b64(picture(12)), "sampling_parameters": s(GREEDY),
        "return_num_input_tokens": np.array([True]), "exclude_input_in_output": np.array([True])})
    assert by_text.error is None and by_text.text() == tokenizer.decode(ref.tokens, skip_special_tokens=True)
    assert int(by_text.responses[-1]["num_input_tokens"].reshape(-1)[0]) == len(ref.prompt)
    # Other text before the image: no KV block of the first prompt is reused, the encoder output is.
    other = "Once more. " + prompt
    ids = AutoTokenizer.from_pretrained(served.model_dir)(other).input_ids
    by_ids = grpc_stream(served.server.grpc, "tt_llm", {
        "input_ids": np.array(ids, dtype=np.int32), "image": b64(picture(12)),
        "sampling_parameters": s(GREEDY), "exclude_input_in_output": np.array([True])})
    # ids that tokenize their own text are processed as that text
    expected = hf_vision_greedy(served.model_dir, other, [picture(12)], 8).tokens
    assert by_ids.error is None and by_ids.ids() == expected
    counted = {queries: 2.0, hits: 1.0}
    assert wait_for_metrics(served.server.metrics, counted, before) == counted


def test_placeholders_that_do_not_pair_with_the_images_are_refused_while_a_stream_carries_on(
        served: Served) -> None:
    outcome: dict[str, Any] = {}
    long = {"text_input": s(served.family.prompt("Describe it.")), "image": b64(picture(13)),
            "stream": np.array([True]),
            "sampling_parameters": s('{"temperature": 0, "max_tokens": 48, "ignore_eos": true}')}

    def long_stream() -> None:
        outcome["result"] = grpc_stream(served.server.grpc, "tt_llm", long, timeout=300)

    thread = threading.Thread(target=long_stream)
    thread.start()
    bad = grpc_stream(served.server.grpc, "tt_llm", {
        "text_input": s("no placeholder here"), "image": b64(picture(13)), "sampling_parameters": s(GREEDY)})
    assert bad.responses == [] and bad.error is not None
    placeholder = served.family.placeholder
    assert f"image: the prompt holds 0 image placeholder(s) ({placeholder!r}) and 1 image(s) came with it; " \
        f"write one {placeholder!r} where each image goes" in bad.error
    thread.join(timeout=300)
    alone = grpc_stream(served.server.grpc, "tt_llm", long, timeout=300)
    assert outcome["result"].error is None and outcome["result"].text() == alone.text() != ""


def test_the_client_example_asks_about_an_image_both_ways(served: Served, tmp_path: Path,
                                                          tokenizer: Any) -> None:
    assert served.server.openai is not None
    photo = tmp_path / "photo.png"
    photo.write_bytes(picture(14))
    example = [sys.executable, str(ROOT / "client_examples" / "image_chat.py"), str(photo), "What is it?",
               "--max-tokens", "6"]
    front = subprocess.run([*example, "--base-url", served.server.openai], capture_output=True, text=True,
                           timeout=300, check=True)
    grpc = subprocess.run([*example, "--grpc", "--grpc-url", served.server.grpc, "--prompt-format",
                           served.family.prompt_format], capture_output=True, text=True, timeout=300,
                          check=True)
    asked = ((rendered(served.model_dir, "What is it?"), front), (served.family.prompt("What is it?"), grpc))
    for text, out in asked:
        ref = hf_vision_greedy(served.model_dir, text, [picture(14)], 6).tokens
        assert out.stdout == tokenizer.decode(ref, skip_special_tokens=True) + "\n"


def test_the_trtllm_ensemble_takes_image_urls_and_pixels(served: Served, tokenizer: Any) -> None:
    from PIL import Image

    prompt = served.family.prompt("What is in this picture?")
    ref = hf_vision_greedy(served.model_dir, prompt, [picture(15)], 8).tokens
    eos = tokenizer.eos_token_id
    expected = tokenizer.decode(ref[:ref.index(eos) + 1] if eos in ref else ref, skip_special_tokens=True)
    request = {"text_input": np.array([[prompt.encode()]], dtype=np.object_),
               "max_tokens": np.array([[8]], dtype=np.int32), "exclude_input_in_output": np.array([[True]])}
    url = b"data:image/png;base64," + base64.b64encode(picture(15))
    # [1 prompt, 1 image, H, W, 3]
    pixels = np.asarray(Image.open(io.BytesIO(picture(15))).convert("RGB"))[None, None]
    for images in ({"image_url_input": np.array([[url]], dtype=np.object_)}, {"image_bytes_input": pixels}):
        result = grpc_stream(served.server.grpc, "ensemble", {**request, **images})
        assert result.error is None and result.text() == expected, (images.keys(), result.error)
    bad = grpc_stream(served.server.grpc, "ensemble", {
        **request, "image_url_input": np.array([[b"http://127.0.0.1:1/cat.png"]], dtype=np.object_)})
    assert bad.error is not None and "image_url_input[0]: http: URLs are not fetched" in bad.error
