"""Through the OpenAI front and a real tritonserver, with the official `openai` SDK: chat and
completions, streamed and not; fp32 greedy chat text equal to HF's; exact usage; one [DONE];
400s naming the field while other streams carry on; a client disconnect frees the KV cache."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import requests
from openai import BadRequestError, NotFoundError, OpenAI

from tests.integration.clients import idle_scrape, series, wait_for_metrics
from tests.integration.conftest import Server

MODEL = "SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def client(server: Server) -> OpenAI:
    assert server.openai is not None
    return OpenAI(base_url=server.openai, api_key="unused", max_retries=0, timeout=300)


def test_models_lists_the_served_model_with_its_context(client: OpenAI) -> None:
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL]
    assert models[0].model_extra == {"root": MODEL, "parent": None, "max_model_len": 8192}


@pytest.mark.parametrize("question", [QUESTION, "Name three colours."])
def test_chat_greedy_text_and_usage_equal_hf(client: OpenAI, question: str, tokenizer: Any,
                                             hf_greedy: Any) -> None:
    messages = [{"role": "user", "content": question}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    expected = hf_greedy(tuple(prompt), 24)
    eos = expected.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in expected else len(expected)
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0)
    choice = reply.choices[0]
    assert choice.message.content == tokenizer.decode(expected[:eos], skip_special_tokens=True)
    assert choice.finish_reason == ("stop" if eos < len(expected) or expected[-1] == tokenizer.eos_token_id
                                    else "length")
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(prompt), eos)
    assert reply.usage.total_tokens == len(prompt) + eos
    assert reply.id.startswith("chatcmpl-") and reply.model == MODEL and reply.object == "chat.completion"


def test_streamed_chat_equals_non_streamed_and_ends_with_usage_and_one_done(server: Server,
                                                                             client: OpenAI) -> None:
    messages = [{"role": "user", "content": QUESTION}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0)
    body = {"model": MODEL, "messages": messages, "max_tokens": 24, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    assert server.openai is not None
    lines = [line for line in requests.post(f"{server.openai}/chat/completions", json=body, stream=True,
                                            timeout=300).iter_lines(decode_unicode=True) if line]
    assert all(line.startswith("data: ") for line in lines)
    assert [line for line in lines if line == "data: [DONE]"] == ["data: [DONE]"]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {c["id"] for c in chunks} == {chunks[0]["id"]} and chunks[0]["object"] == "chat.completion.chunk"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert text == whole.choices[0].message.content
    assert reasons[-1] == whole.choices[0].finish_reason and set(reasons[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and whole.usage is not None
    assert chunks[-1]["usage"] == whole.usage.model_dump(exclude_none=True)


def test_completion_streamed_and_not_with_logprobs_and_stop(client: OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=12,
                                      temperature=0, logprobs=2)
    parts = list(client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=12,
                                           temperature=0, logprobs=2, stream=True))
    choice = whole.choices[0]
    assert "".join(p.choices[0].text for p in parts) == choice.text and choice.text.startswith(" Paris")
    assert choice.logprobs is not None and len(choice.logprobs.tokens or []) == whole.usage.completion_tokens
    assert "".join(choice.logprobs.tokens or []) == choice.text
    assert all(len(top) == 2 for top in choice.logprobs.top_logprobs or [])
    cut = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=12,
                                    temperature=0, stop=["."])
    assert cut.choices[0].text == choice.text.split(".")[0] and cut.choices[0].finish_reason == "stop"
    echoed = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=12,
                                       temperature=0, echo=True)
    assert echoed.choices[0].text == "The capital of France is" + choice.text


def test_a_prompt_of_token_ids_gives_the_text_prompts_completion(client: OpenAI, tokenizer: Any) -> None:
    """Ids go to tt_llm as they are (no special tokens added): the text prompt's own ids give its
    completion, usage counts them exactly, and echo gives them back as text."""
    prompt = "The capital of France is"
    ids = list(tokenizer(prompt).input_ids)
    by_text = client.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0)
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=10, temperature=0, echo=True)
    assert by_ids.choices[0].text == tokenizer.decode(ids) + by_text.choices[0].text
    assert by_ids.usage is not None and by_ids.usage.prompt_tokens == len(ids)
    streamed = list(client.completions.create(model=MODEL, prompt=[ids], max_tokens=10, temperature=0,
                                              stream=True))
    assert "".join(p.choices[0].text for p in streamed if p.choices) == by_text.choices[0].text
    with pytest.raises(BadRequestError, match="outside the vocabulary"):
        client.completions.create(model=MODEL, prompt=[1, 10**6], max_tokens=2)


def test_seeded_sampling_repeats(client: OpenAI) -> None:
    def ask() -> str | None:
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Tell a joke."}], max_tokens=16,
            temperature=1.0, seed=1234)
        return reply.choices[0].message.content

    assert ask() == ask()


BAD: list[tuple[dict[str, Any], str]] = [
    ({"temperature": -1}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_completion_tokens": -3}, "max_completion_tokens"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"seed": 2**63}, "seed"),  # vLLM's range: int64
    ({"stop": [""]}, "stop"),
    ({"stop": 5}, "stop"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 500}}, "logit_bias"),
    ({"n": 0}, "n"),
    ({"n": 2, "best_of": 3}, "best_of"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 99}, "top_logprobs"),
    ({"max_tokens": 3, "max_completion_tokens": 4}, "max_tokens"),
    ({"continue_final_message": True}, "continue_final_message"),  # add_generation_prompt defaults true
    ({"chat_template": "{{ messages }}"}, "chat_template"),  # needs --trust-request-chat-template
    ({"chat_template_kwargs": {"tokenize": False}}, "chat_template_kwargs.tokenize"),
    ({"stream": "true"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
    ({"top_k": -5}, "top_k"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function",
      "function": {"name": "g"}}}, "tool_choice.function.name"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema", "json_schema": 3}}, "response_format.json_schema"),
    ({"structured_outputs": {"regex": ""}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a"}, "response_format": {"type": "json_object"}},
     "structured_outputs"),
]


def test_bad_requests_get_a_400_naming_the_field_while_a_stream_carries_on(server: Server,
                                                                          client: OpenAI) -> None:
    assert server.openai is not None
    outcome: dict[str, Any] = {}

    def long_stream() -> None:
        parts = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                               max_tokens=48, temperature=0, stream=True)
        outcome["text"] = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)

    thread = threading.Thread(target=long_stream)
    thread.start()
    for change, field in BAD:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **change}
        reply = requests.post(f"{server.openai}/chat/completions", json=body, timeout=60)
        assert reply.status_code == 400, (change, reply.text)
        error = reply.json()["error"]
        assert error["param"] == field and field.split("[")[0] in error["message"], (change, error)
        assert error["type"] == "invalid_request_error"
    for raw, status in ((b"{not json", 400), (b"[1, 2]", 400), (b"x" * (5 << 20), 413)):
        reply = requests.post(f"{server.openai}/chat/completions", data=raw, timeout=60,
                              headers={"Content-Type": "application/json"})
        assert reply.status_code == status and reply.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(NotFoundError):
        client.chat.completions.create(model="gpt-4", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(BadRequestError, match="max_model_len"):  # the engine's own refusal, as a 400
        client.completions.create(model=MODEL, prompt="hi " * 9000, max_tokens=4)
    thread.join(timeout=300)
    whole = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                           max_tokens=48, temperature=0)
    assert outcome["text"] == whole.choices[0].message.content


def test_a_client_that_disconnects_mid_stream_frees_its_kv(server: Server) -> None:
    assert server.openai is not None
    before = idle_scrape(server.metrics)
    body = {"model": MODEL, "prompt": "Count from one to a thousand:", "max_tokens": 2000, "temperature": 0,
            "ignore_eos": True, "stream": True}
    with requests.post(f"{server.openai}/completions", json=body, stream=True, timeout=300) as reply:
        lines = reply.iter_lines()
        got = [next(lines) for _ in range(8)]  # a few chunks in, then hang up
    assert all(line.startswith(b"data: ") or not line for line in got)
    expected = {series("vllm:request_success_total", finished_reason="abort"): 1}
    assert wait_for_metrics(server.metrics, expected, before, timeout=30) == expected
    after = idle_scrape(server.metrics)
    assert after[series("vllm:kv_cache_usage_perc")] == 0
    assert after[series("vllm:num_requests_running")] == 0


def test_seeded_stop_and_logprobs_behave_as_through_tt_llm(server: Server, client: OpenAI) -> None:
    """The same sampling through the front and straight to tt_llm: the same text, stop, logprobs."""
    prompt, params = "The best thing about the sea is", {"temperature": 0.9, "top_p": 0.95, "seed": 77,
                                                         "max_tokens": 24, "stop": [" and"], "logprobs": 2}
    front = client.completions.create(model=MODEL, prompt=prompt, **params)  # type: ignore[arg-type]
    direct = requests.post(f"http://{server.http}/v2/models/tt_llm/generate", timeout=300, json={
        "text_input": prompt, "sampling_parameters": json.dumps(params), "exclude_input_in_output": True,
        "return_logprobs": True, "return_finish_reason": True}).json()
    choice = front.choices[0]
    assert choice.text == direct["text_output"] and choice.finish_reason == direct["finish_reason"]
    sampled = [next(iter(position.values())) for position in json.loads(direct["logprobs"])]
    assert choice.logprobs is not None
    assert choice.logprobs.token_logprobs == [p["logprob"] for p in sampled]
    assert choice.logprobs.tokens == [p["decoded_token"] for p in sampled]
