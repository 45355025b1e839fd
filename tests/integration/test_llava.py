"""A tiny random LLaVA (tests/vision_checkpoints.py) served through the real tritonserver and the
OpenAI front: a chat request with an image (the openai SDK, a data: URL) and tt_llm's `image` input
(tritonclient gRPC; `text_input` as vllm_backend takes it, and `input_ids`) give HF transformers'
greedy tokens; a second request with the same picture reads the encoder cache
(`vllm:mm_cache_hits_total`); a prompt whose placeholders do not pair with its images is a 400
naming `image` while a stream in flight carries on."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai import OpenAI

from tests.integration.clients import grpc_stream, s, scrape, series, wait_for_metrics
from tests.integration.conftest import ROOT, Server, start_server, stop_server, wait_ready
from tests.vision_checkpoints import build_tiny_llava, hf_vision_greedy, picture

pytestmark = pytest.mark.integration
NAME = "tiny-llava"
PROMPT = "USER: <image>\nWhat is in this picture?\nASSISTANT:"
GREEDY = '{"temperature": 0, "max_tokens": 8, "ignore_eos": true}'


@pytest.fixture(scope="module")
def llava_dir(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("tiny_llava")
    build_tiny_llava(model_dir, out)
    return out


@pytest.fixture(scope="module")
def llava_server(tmp_path_factory: pytest.TempPathFactory, llava_dir: Path) -> Iterator[Server]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc, srv = start_server(tmp_path_factory.mktemp("triton_llava") / "server.log", "dtype=float32",
                             f"model={llava_dir}", f"served_model_name={NAME}", "max_model_len=256",
                             openai_port=port)
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


def b64(data: bytes) -> np.ndarray:
    return np.array([base64.b64encode(data)], dtype=np.object_)


def test_chat_with_an_image_through_the_front_gives_hf_greedy_text(llava_server: Server, llava_dir: Path,
                                                                   tokenizer: Any) -> None:
    from transformers import AutoProcessor

    assert llava_server.openai is not None
    url = "data:image/png;base64," + base64.b64encode(picture(11)).decode()
    content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}},
                                     {"type": "text", "text": "What is in this picture?"}]
    messages = [{"role": "user", "content": content}]
    rendered = AutoProcessor.from_pretrained(llava_dir).apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": content[1]["text"]}]}],
        add_generation_prompt=True, tokenize=False)
    greedy = hf_vision_greedy(llava_dir, rendered, [picture(11)], 8)
    prompt, ref = greedy.prompt, greedy.tokens
    client = OpenAI(base_url=llava_server.openai, api_key="unused", max_retries=0, timeout=300)
    reply = client.chat.completions.create(model=NAME, messages=messages,  # type: ignore[arg-type]
                                           max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
    assert reply.usage is not None and reply.usage.prompt_tokens == len(prompt)
    assert reply.choices[0].message.content == tokenizer.decode(ref, skip_special_tokens=True)


def test_tt_llm_takes_the_image_input_and_a_second_request_reads_the_encoder_cache(
        llava_server: Server, llava_dir: Path) -> None:
    greedy = hf_vision_greedy(llava_dir, PROMPT, [picture(12)], 8)
    prompt, ref = greedy.prompt, greedy.tokens
    queries, hits = (series(name, model_name=NAME) for name in ("vllm:mm_cache_queries_total",
                                                                 "vllm:mm_cache_hits_total"))
    before = scrape(llava_server.metrics)
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(llava_dir).encode(PROMPT, add_special_tokens=False)
    by_ids = grpc_stream(llava_server.grpc, "tt_llm", {
        "input_ids": np.array(ids, dtype=np.int32), "image": b64(picture(12)),
        "sampling_parameters": s(GREEDY), "exclude_input_in_output": np.array([True])})
    assert by_ids.error is None and by_ids.ids() == ref
    by_text = grpc_stream(llava_server.grpc, "tt_llm", {
        "text_input": s(PROMPT), "image": b64(picture(12)), "sampling_parameters": s(GREEDY),
        "return_num_input_tokens": np.array([True])})
    assert by_text.error is None
    counted = {queries: 2.0, hits: 1.0}
    assert wait_for_metrics(llava_server.metrics, counted, before) == counted
    assert int(by_text.responses[-1]["num_input_tokens"].reshape(-1)[0]) == len(prompt)


def test_placeholders_that_do_not_pair_with_the_images_are_refused_while_a_stream_carries_on(
        llava_server: Server) -> None:
    outcome: dict[str, Any] = {}
    long = {"text_input": s(PROMPT), "image": b64(picture(13)), "stream": np.array([True]),
            "sampling_parameters": s('{"temperature": 0, "max_tokens": 48, "ignore_eos": true}')}
    def long_stream() -> None:
        outcome["result"] = grpc_stream(llava_server.grpc, "tt_llm", long, timeout=300)

    thread = threading.Thread(target=long_stream)
    thread.start()
    bad = grpc_stream(llava_server.grpc, "tt_llm", {
        "text_input": s("USER: no placeholder\nASSISTANT:"), "image": b64(picture(13)),
        "sampling_parameters": s(GREEDY)})
    assert bad.responses == [] and bad.error is not None
    assert "image: the prompt holds 0 image placeholder(s) ('<image>') and 1 image(s) came with it" \
        in bad.error
    thread.join(timeout=300)
    alone = grpc_stream(llava_server.grpc, "tt_llm", long, timeout=300)
    assert outcome["result"].error is None and outcome["result"].text() == alone.text() != ""


def test_the_client_example_asks_about_an_image_both_ways(llava_server: Server, llava_dir: Path,
                                                          tmp_path: Path, tokenizer: Any) -> None:
    assert llava_server.openai is not None
    photo = tmp_path / "photo.png"
    photo.write_bytes(picture(14))
    example = [sys.executable, str(ROOT / "client_examples" / "image_chat.py"), str(photo), "What is it?",
               "--max-tokens", "6"]
    front = subprocess.run([*example, "--base-url", llava_server.openai], capture_output=True, text=True,
                           timeout=300, check=True)
    grpc = subprocess.run([*example, "--grpc", "--grpc-url", llava_server.grpc, "--prompt-format",
                           "USER: <image>\n{question}\nASSISTANT:"], capture_output=True, text=True,
                          timeout=300, check=True)
    from transformers import AutoProcessor

    rendered = AutoProcessor.from_pretrained(llava_dir).apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
        add_generation_prompt=True, tokenize=False)
    for text, out in ((rendered, front), ("USER: <image>\nWhat is it?\nASSISTANT:", grpc)):
        ref = hf_vision_greedy(llava_dir, text, [picture(14)], 6).tokens
        expected = tokenizer.decode(ref, skip_special_tokens=True)
        assert out.stdout == expected + "\n"
