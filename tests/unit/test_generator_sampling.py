"""GeneratorRunner's device sampling and async decode over the recording stand-in of
test_generator_runner (no ttnn): the sampling_params it sends in tt-metal's form, the tokens it
reads back, the deferred reads of launched steps and the feed of one step's tokens into the next.
The tier in tests/tt checks the same paths against the contract generator on mock devices."""

import torch

from tests.unit.test_generator_runner import ROWS, _runner
from tt_backend.contract.modes import SampleOnDeviceMode, StepMode, StepVariant
from tt_backend.contract.sampling import SamplingPlan
from tt_backend.contract.step import PlannedRow, StepPlan
from tt_backend.devices.tt.generator import TTSamplingParams
from tt_backend.engine.step_sampling import device_computes
from tt_backend.runtime.config import SamplingConfig
from tt_backend.sampling.device_sampler import sampling_tensors
from tt_backend.sampling.params import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
TOP_K = SamplingParams(temperature=0.8, top_k=20, top_p=0.9)


def _plan(params: list[SamplingParams | None], seeds: list[int]) -> SamplingPlan:
    """One entry per plan row (None: a row that samples nothing)."""
    return SamplingPlan(StepVariant.SAMPLE_FILTERED, sampling_tensors(params, seeds, [0] * len(params)))


def test_a_device_sampled_decode_sends_tt_metals_params_per_batch_row_and_reads_tokens() -> None:
    runner, generator, events = _runner()
    plan = StepPlan(StepMode.DECODE, tuple(ROWS))
    sampled = runner.run_and_sample(plan, _plan([TOP_K, GREEDY, TOP_K], [7, 8, -1]))
    (_, call), = generator.calls
    # rows at slots 0, 2, 3 of the lanes x capacity batch; slot 1 is padding (greedy: top-1, top_p 0)
    assert call["sampling_params"] == TTSamplingParams(
        temperature=[torch.tensor(0.8).item(), 0.0, 0.0, torch.tensor(0.8).item()], top_k=[20, 1, 1, 20],
        top_p=[torch.tensor(0.9).item(), 0.0, 0.0, torch.tensor(0.9).item()],
        seed=[7, 0, 8, (1 << 64) - 1])
    assert sampled.tokens == (6, 7, 8)  # each row's token + 1, read in the plan's row order
    assert sampled.logprobs is None
    assert events.waited == ["event-1-0", "event-1-1"]
    assert runner.reads.bytes_read == 4 * 8  # 4 int64 tokens, not 4 x vocab logits


def test_a_device_sampled_prefill_returns_tokens_of_the_rows_that_sample() -> None:
    runner, generator, _ = _runner()
    rows = (PlannedRow((11, 12, 13), 0, (1,), True, lane=0, slot=1),
            PlannedRow((31,), 0, (7,), False, lane=1, slot=1))  # a partial chunk: samples nothing
    sampled = runner.run_and_sample(StepPlan(StepMode.PREFILL, rows), _plan([TOP_K, None], [5, 0]))
    # slots 1 and 3: one call each (tt-metal's batched prefill would write the tokens at 1 and 3)
    (_, first), (_, second) = generator.calls
    assert (first["sampling_params"].top_k, first["sampling_params"].seed) == ([20], [5])
    assert (second["sampling_params"].top_k, second["sampling_params"].seed) == ([1], [0])
    assert sampled.tokens == (113,)


def test_launched_steps_are_read_later_and_feed_their_tokens_to_the_next() -> None:
    runner, generator, events = _runner()
    plan = StepPlan(StepMode.DECODE, tuple(ROWS))
    sampling = _plan([GREEDY] * 3, [0, 0, 0])
    first = runner.launch(plan, sampling)
    assert events.waited == []  # launched, its read not waited for
    second = runner.launch(plan, sampling, after=first)
    assert events.waited == ["event-1-0", "event-1-1"]  # the first step's tokens, to feed the second
    (_, one), (_, two) = generator.calls
    assert one["tokens"][:, 0].tolist() == [5, 0, 6, 7]
    assert two["tokens"][:, 0].tolist() == [6, 0, 7, 8]  # the first step's tokens, at the same slots
    assert runner.complete(first).tokens == (6, 7, 8)
    assert runner.complete(second).tokens == (7, 8, 9)
    assert events.waited[2:] == ["event-2-0", "event-2-1"]


def test_drain_waits_for_every_launched_read() -> None:
    runner, _, events = _runner()
    runner.launch(StepPlan(StepMode.DECODE, tuple(ROWS)), _plan([GREEDY] * 3, [0, 0, 0]))
    assert runner.drain() == 1
    assert events.waited == ["event-1-0", "event-1-1"] and runner.drain() == 0


def test_the_engine_sends_a_batch_to_tt_metals_sampler_only_within_its_limits() -> None:
    tt = SamplingConfig(SampleOnDeviceMode.ALL, device_max_top_k=32, device_min_p=False)
    torch_sampler = SamplingConfig(SampleOnDeviceMode.ALL)
    cases = {GREEDY: True, SamplingParams(temperature=0.0, top_k=100): True, TOP_K: True,
             SamplingParams(temperature=0.8, top_k=32): True,
             SamplingParams(temperature=0.8, top_k=33): False,
             SamplingParams(temperature=0.8): False,  # unrestricted: tt-metal would draw from its top 32
             SamplingParams(temperature=0.8, top_k=5, min_p=0.1): False}
    assert {params: device_computes(tt, params) for params in cases} == cases
    assert all(device_computes(torch_sampler, params) for params in cases)


def test_device_sampled_prefill_rows_share_a_call_only_at_slots_from_zero() -> None:
    runner, _, _ = _runner()
    at = [PlannedRow((1,), 0, (1,), True, lane=0, slot=s) for s in (0, 1)]
    apart = [PlannedRow((1,), 0, (1,), True, lane=0, slot=1), PlannedRow((2,), 0, (2,), True, lane=1, slot=0)]
    assert runner.prefill_calls(at, device_sampled=True) == [[0, 1]]
    assert runner.prefill_calls(apart, device_sampled=True) == [[0], [1]]
    assert runner.prefill_calls(apart) == [[0, 1]]  # logits come back in row order
