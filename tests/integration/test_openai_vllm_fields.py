"""vLLM's request fields through the OpenAI front and a real tritonserver, with the `openai` SDK: a
`--chat-template` file that renders a `chat_template_kwargs` variable, a request's own
`chat_template` (with --trust-request-chat-template), an unknown field accepted and logged once,
`n=3` greedy (3 identical choices, the prompt's full blocks shared through the prefix cache), `n=3`
seeded (reproducible, not all equal), streamed `n=3` (each index's deltas join to the non-streamed
text), and `continuous_usage_stats` (usage in every chunk)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from openai import OpenAI

from tests.integration.clients import idle_scrape, series, wait_for_metrics
from tests.integration.conftest import Server, free_ports, start_server, stop_server, wait_ready

pytestmark = pytest.mark.integration
MODEL = "SmolLM2-135M-Instruct"
TEMPLATE = ("{%- if persona is defined %}<|im_start|>system\nYou are {{ persona }}.<|im_end|>\n{% endif %}"
            "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("vllm_fields")
    (folder / "template.jinja").write_text(TEMPLATE, encoding="utf-8")
    proc, srv = start_server(folder / "server.log", "dtype=float32", openai_port=free_ports(1)[0],
                             openai_args=(f"--chat-template={folder / 'template.jinja'}",
                                          "--trust-request-chat-template"))
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def client(front: Server) -> OpenAI:
    assert front.openai is not None
    return OpenAI(base_url=front.openai, api_key="unused", max_retries=0, timeout=300)


def ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def test_chat_template_kwargs_reach_the_front_template(client: OpenAI, tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    turn = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1)  # type: ignore[arg-type]
    pirate = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1,  # type: ignore[arg-type]
                                            extra_body={"chat_template_kwargs": {"persona": "a pirate"}})
    assert plain.usage is not None and pirate.usage is not None
    assert plain.usage.prompt_tokens == len(ids(tokenizer, turn))
    system = "<|im_start|>system\nYou are a pirate.<|im_end|>\n"
    assert pirate.usage.prompt_tokens == len(ids(tokenizer, system + turn))
    assert pirate.usage.prompt_tokens > plain.usage.prompt_tokens


def test_a_requests_own_chat_template_renders_its_kwargs(client: OpenAI, tokenizer: Any) -> None:
    own = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=1,
        extra_body={"chat_template": "{{ messages[0].content }} and {{ flavour }} tea",
                    "chat_template_kwargs": {"flavour": "mint"}})
    assert own.usage is not None and own.usage.prompt_tokens == len(ids(tokenizer, "Hi and mint tea"))


def test_an_unknown_field_is_accepted_and_logged_once(front: Server, client: OpenAI) -> None:
    for _ in range(2):
        reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, temperature=0,
                                          extra_body={"x_probe_field": 1})
        assert reply.choices[0].text
    line = "ignored the unknown request field 'x_probe_field' (on /v1/completions; logged once per name)"
    deadline = time.monotonic() + 10
    while line not in front.log_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert front.log_text().count(line) == 1


def test_n3_greedy_gives_three_identical_choices_sharing_the_prompts_blocks(front: Server, client: OpenAI,
                                                                           tokenizer: Any) -> None:
    prompt = "A fresh prompt for sharing: " + " ".join(f"word{i}" for i in range(20))
    n_prompt = len(ids(tokenizer, prompt))
    assert n_prompt > 32
    before = idle_scrape(front.metrics)
    reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0, n=3,
                                      extra_body={"ignore_eos": True})
    texts = [c.text for c in sorted(reply.choices, key=lambda c: c.index)]
    assert [c.index for c in sorted(reply.choices, key=lambda c: c.index)] == [0, 1, 2]
    assert texts[0] and texts == [texts[0]] * 3
    assert reply.usage is not None and reply.usage.prompt_tokens == n_prompt  # the prompt once
    assert reply.usage.completion_tokens == 3 * 8
    # Choices 1 and 2 went once choice 0's prompt was cached: each hit its full blocks (the last
    # token is always computed).
    expected = {series("vllm:prefix_cache_hits_total"): 2 * ((n_prompt - 1) // 16 * 16)}
    assert wait_for_metrics(front.metrics, expected, before) == expected


def test_n3_seeded_is_reproducible_and_the_choices_differ(client: OpenAI) -> None:
    def ask() -> list[str]:
        reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                                          temperature=1.0, seed=-5, n=3)
        return [c.text for c in sorted(reply.choices, key=lambda c: c.index)]

    first = ask()
    assert ask() == first and len(set(first)) > 1


def test_streamed_n3_deltas_join_to_the_non_streamed_choices(front: Server, client: OpenAI) -> None:
    messages = [{"role": "user", "content": "Tell a joke."}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16,  # type: ignore[arg-type]
                                           temperature=0.8, seed=11, n=3)
    assert front.openai is not None
    body = {"model": MODEL, "messages": messages, "max_tokens": 16, "temperature": 0.8, "seed": 11, "n": 3,
            "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    lines = [line for line in requests.post(f"{front.openai}/chat/completions", json=body, stream=True,
                                            timeout=300).iter_lines(decode_unicode=True) if line]
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    texts: dict[int, str] = {}
    counts: dict[int, list[int]] = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk["choices"]
        texts[choice["index"]] = texts.get(choice["index"], "") + (choice["delta"].get("content") or "")
        usage = chunk["usage"]  # continuous_usage_stats: this choice's tokens so far, in every chunk
        counts.setdefault(choice["index"], []).append(usage["completion_tokens"])
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert texts == {c.index: c.message.content for c in whole.choices}
    assert all(c == sorted(c) for c in counts.values())
    assert whole.usage is not None and chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == whole.usage.model_dump(exclude_none=True)
