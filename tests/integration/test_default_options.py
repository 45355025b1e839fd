"""What `make serve` serves on this machine, no option set, through tritonserver and the OpenAI front:
the answer to the first prompt a user tries is HF fp32's, and its logprobs are fp32 ones. On a CPU with
AVX512-BF16 the default plan runs bf16 activations, and its LM head once rounded the logits to bf16:
"The" (HF's first token, ahead by 0.08) and "L" both came out at 25.375, argmax took "L", and the
answer was "L'Étoile, la Marseillaise, ..." (devices/cpu/logits.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from openai import OpenAI

from tests.conftest import CHAT_PROMPTS
from tests.integration.conftest import Server, free_ports, start_server, stop_server, wait_ready
from tt_backend.devices.cpu.compute_plan import BF16_LEVELS
from tt_backend.devices.cpu.isa import probe

pytestmark = pytest.mark.integration
LEVEL = probe().resolve("auto")
BF16 = LEVEL in BF16_LEVELS
TOLERANCE = 0.3 if BF16 else 1e-3
"""How far a logprob may be from HF fp32's: bf16 hidden states put the default model's logits up to
about 0.25 off (tests/unit/test_engine_cpu_isa.py bounds them); fp32 ones differ by summation order."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    proc, srv = start_server(tmp_path_factory.mktemp("defaults") / "server.log", openai_port=free_ports(1)[0])
    try:
        wait_ready(proc, srv)
        yield srv
    finally:
        stop_server(proc)


def test_the_log_names_the_lm_heads_path(served: Server) -> None:
    log = served.log_text()
    assert f"compute: cpu_isa={LEVEL}, " in log
    head = f"LM head: tt_backend_{LEVEL}::panels_linear (fp32 logits, the GGUF's blocks up to 4 rows)"
    assert (head in log) == BF16


def test_the_france_answer_and_its_logprobs_are_hf_fp32s(served: Server, model_dir: Path, chat_ids: Any,
                                                         hf_greedy: Any, tokenizer: Any) -> None:
    from transformers import AutoModelForCausalLM

    prompt = chat_ids(CHAT_PROMPTS[0])
    expected = tokenizer.decode(hf_greedy(tuple(prompt), 16), skip_special_tokens=True)
    assert expected == "The capital of France is Paris."
    assert served.openai is not None
    client = OpenAI(base_url=served.openai, api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": CHAT_PROMPTS[0]}]
    reply = client.chat.completions.create(model=model, messages=messages,
                                           max_tokens=16, temperature=0, logprobs=True, top_logprobs=2)
    choice = reply.choices[0]
    assert choice.message.content == expected
    assert choice.logprobs is not None and choice.logprobs.content
    first = choice.logprobs.content[0]
    top = [(t.token, t.logprob) for t in first.top_logprobs]
    assert [token for token, _ in top] == ["The", "L"]
    assert top[0][1] > top[1][1]  # no tie
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        want = torch.log_softmax(hf(torch.tensor([prompt])).logits[0, -1], dim=-1)
    for (_, logprob), token_id in zip(top, (504, 60), strict=True):
        assert abs(logprob - float(want[token_id])) <= TOLERANCE, (logprob, float(want[token_id]))
