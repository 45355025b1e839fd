"""Sampling through the engine on the real model (fp32): seeded requests independent of the batch
on both paths, the per-batch host fallback, logprobs against HF transformers, stop strings and
bad words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import CHAT_PROMPTS
from tests.unit.test_engine import generate
from tt_backend.assembly import build_engine
from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.engine.outputs import RequestOutput
from tt_backend.sampling.params import SamplingParams


class Served:
    """A started engine; `generate` runs requests to completion (it may be called again)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._ids = 0

    def generate(self, requests: list[tuple[list[int], SamplingParams]]) -> list[list[RequestOutput]]:
        self._ids += 1
        outputs = generate(self.engine, requests, prefix=f"q{self._ids}-")
        lanes = self.engine.scheduler.lanes
        assert all(lane.pool.num_free == lane.pool.num_blocks for lane in lanes)
        return outputs


def started(**options: Any) -> Iterator[Served]:
    engine = build_engine(EngineConfig(dtype="float32", max_model_len=256, max_num_seqs=8, **options))
    engine.start()
    yield Served(engine)
    engine.shutdown()


@pytest.fixture(scope="module")
def device_path() -> Iterator[Served]:
    yield from started()


@pytest.fixture(scope="module")
def host_path() -> Iterator[Served]:
    yield from started(always_compat_sampling=True)


def token_ids(outs: list[RequestOutput]) -> list[int]:
    return [t for o in outs for t in o.new_token_ids]


def text(outs: list[RequestOutput]) -> str:
    return "".join(o.text for o in outs)


SEEDED = SamplingParams(max_tokens=24, temperature=0.9, top_p=0.95, seed=1234, ignore_eos=True)


def batch_of_eight(chat_ids: Any) -> list[tuple[list[int], SamplingParams]]:
    others = [SamplingParams(max_tokens=16 + i, temperature=0.7 + 0.1 * i, top_k=(0, 20)[i % 2], seed=i)
              for i in range(4)] + [SamplingParams(max_tokens=20, temperature=0.0)] * 3
    prompts = [chat_ids(p) for p in CHAT_PROMPTS * 2]
    requests = [(prompts[i + 1], p) for i, p in enumerate(others)]
    return requests[:3] + [(prompts[0], SEEDED)] + requests[3:]


@pytest.mark.parametrize("path", ["device_path", "host_path"])
def test_seeded_request_gets_the_same_tokens_alone_and_in_a_batch_of_eight(
        path: str, chat_ids: Any, request: pytest.FixtureRequest) -> None:
    served: Served = request.getfixturevalue(path)
    before = served.engine.pipeline.host_sampling_steps
    alone = token_ids(served.generate([(chat_ids(CHAT_PROMPTS[0]), SEEDED)])[0])
    batched = served.generate(batch_of_eight(chat_ids))
    assert len(batched) == 8 and token_ids(batched[3]) == alone
    assert len(alone) == 24
    took_host = served.engine.pipeline.host_sampling_steps - before
    assert (took_host > 0) == (path == "host_path")


def test_both_paths_choose_the_same_tokens(device_path: Served, host_path: Served, chat_ids: Any) -> None:
    requests = batch_of_eight(chat_ids)
    assert [token_ids(o) for o in device_path.generate(requests)] == \
        [token_ids(o) for o in host_path.generate(requests)]


def test_a_logprobs_request_sends_its_batch_to_the_host_and_leaves_others_unchanged(
        device_path: Served, chat_ids: Any) -> None:
    plain = [(chat_ids(p), SamplingParams(max_tokens=12, temperature=0.8, seed=9 + i, ignore_eos=True))
             for i, p in enumerate(CHAT_PROMPTS[:3])]
    alone = [token_ids(o) for o in device_path.generate(plain)]
    before = device_path.engine.pipeline.host_sampling_steps
    wants = (chat_ids(CHAT_PROMPTS[3]), SamplingParams(max_tokens=12, temperature=0.0, logprobs=2))
    mixed = device_path.generate(plain + [wants])
    assert [token_ids(o) for o in mixed[:3]] == alone
    assert device_path.engine.pipeline.host_sampling_steps - before >= 12  # every step with that row in it
    assert all(o.logprobs is None for outs in mixed[:3] for o in outs)
    positions = [p for o in mixed[3] for p in (o.logprobs or ())]
    assert len(positions) == len(token_ids(mixed[3])) == 12
    assert all(len(p) in (2, 3) for p in positions)  # the sampled token plus the top 2


def test_logprobs_equal_log_softmax_of_the_reference_model(device_path: Served, chat_ids: Any,
                                                           model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    prompt = chat_ids("Name three colours.")
    params = SamplingParams(max_tokens=8, temperature=0.7, seed=5, logprobs=3)
    outs = device_path.generate([(prompt, params)])[0]
    ids = token_ids(outs)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        reference = torch.log_softmax(hf(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1], -1)
    positions = [p for o in outs for p in (o.logprobs or ())]
    cumulative = 0.0
    for k, (token, position) in enumerate(zip(ids, positions, strict=True)):
        sampled = next(iter(position.items()))
        assert sampled[0] == token
        assert sampled[1].logprob == pytest.approx(reference[k, token].item(), abs=1e-4)
        assert sampled[1].rank == int((reference[k] >= reference[k, token]).sum())
        top = torch.topk(reference[k], 3)
        for token_id, value in zip(top.indices.tolist(), top.values.tolist(), strict=True):
            assert position[token_id].logprob == pytest.approx(value, abs=1e-4)
        cumulative += reference[k, token].item()
    assert outs[-1].cumulative_logprob == pytest.approx(cumulative, abs=1e-3)


def test_stop_strings_cut_the_text_as_vllm_does(device_path: Served, chat_ids: Any) -> None:
    prompt = chat_ids(CHAT_PROMPTS[1])
    greedy = SamplingParams(max_tokens=40, temperature=0.0)
    full = text(device_path.generate([(prompt, greedy)])[0])
    stop = full[12:16]  # four characters from the middle of the greedy answer
    start = full.index(stop)
    for include, expected in ((False, full[:start]), (True, full[:start + len(stop)])):
        params = SamplingParams(max_tokens=40, temperature=0.0, stop=("NEVER-SEEN", stop),
                                include_stop_str_in_output=include)
        outs = device_path.generate([(prompt, params)])[0]
        assert text(outs) == expected and outs[-1].finish_reason == "stop"
        assert stop not in "".join(o.text for o in outs[:-1]) or include  # never streamed before the cut


def test_bad_words_are_never_generated(device_path: Served, chat_ids: Any, tokenizer: Any) -> None:
    prompt = chat_ids(CHAT_PROMPTS[0])
    greedy = SamplingParams(max_tokens=20, temperature=0.0)
    assert "Paris" in text(device_path.generate([(prompt, greedy)])[0])
    banned = SamplingParams(max_tokens=20, temperature=0.0, bad_words=("Paris",))
    assert "Paris" not in text(device_path.generate([(prompt, banned)])[0])


def test_token_ids_outside_the_vocabulary_are_refused(device_path: Served) -> None:
    engine = device_path.engine
    with pytest.raises(ValueError, match=r"logit_bias holds 999999, outside the vocabulary \[0, 49152\)"):
        engine.add_request("bad", [1, 2], SamplingParams(logit_bias=((999999, 1.0),)), lambda out: None)
    with pytest.raises(ValueError, match="logits_processors names 'nope', which is not registered"):
        engine.add_request("bad", [1, 2], SamplingParams(logits_processors=("nope",)), lambda out: None)


@pytest.mark.parametrize("mode, host_steps", [("decode_only", 1), ("none", 6)])
def test_sample_on_device_mode_names_the_operations_that_sample_inside_the_step(
        mode: str, host_steps: int, chat_ids: Any) -> None:
    """One greedy request of 6 tokens: 1 prefill step and 5 decode steps."""
    served = next(started(sample_on_device_mode=mode))
    try:
        outs = served.generate([(chat_ids(CHAT_PROMPTS[0]), SamplingParams(max_tokens=6, temperature=0.0,
                                                                           ignore_eos=True))])
        assert len(token_ids(outs[0])) == 6
        assert served.engine.pipeline.host_sampling_steps == host_steps
    finally:
        served.engine.shutdown()


def test_an_unknown_sample_on_device_mode_is_refused() -> None:
    message = "sample_on_device_mode='sometimes' is not one of all, decode_only, none"
    with pytest.raises(ValueError, match=message):
        EngineConfig(sample_on_device_mode="sometimes")  # type: ignore[arg-type]
