"""GeneratorRunner's step shapes over a recording stand-in for a tt-metal generator (no ttnn): how
the scheduler's merged plan of two data-parallel lanes becomes the generator's batch, page tables
and slots. The tier in tests/tt runs the same runner over real ttnn on mock devices."""

from typing import Any

import pytest
import torch

from tt_backend.contract.step import PlannedRow
from tt_backend.devices.tt.kv_cache import TTPagedKVCache
from tt_backend.devices.tt.kv_layout import TTKVGeometry
from tt_backend.runtime.generator_runner import GeneratorRunner

BLOCKS, CAPACITY, WIDTH, VOCAB = 10, 2, 4, 8


class RecordingGenerator:
    """Logits whose every entry is the row's token id, so the runner's read-back order shows."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def prefill_forward(self, tokens: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.calls.append(("prefill", {"tokens": tokens, **kwargs}))
        return tokens[:, :1, None].float().expand(-1, 1, VOCAB)

    def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor,
                       **kwargs: Any) -> list[torch.Tensor]:
        self.calls.append(("decode", {"tokens": tokens, "start_pos": start_pos, **kwargs}))
        return list(torch.chunk(tokens.float().expand(-1, VOCAB), 2))  # one output per submesh

    def read_decode_output(self, out: list[torch.Tensor], async_read: bool) -> Any:
        return out, ["event-0", "event-1"]

    def process_decode_output_host(self, host: list[torch.Tensor], is_tokens: bool) -> Any:
        return torch.cat(host)[:, None, :], None


class Events:
    def __init__(self) -> None:
        self.waited: list[str] = []

    def event_synchronize(self, event: str) -> None:
        self.waited.append(event)


def _runner() -> tuple[GeneratorRunner, RecordingGenerator, Events]:
    kv = TTPagedKVCache(TTKVGeometry(1, BLOCKS + 1, 1, 32, 32), lanes=2, release=lambda region: None)
    kv.allocate(lambda: ["lane-0 cache", "lane-1 cache"])
    generator, events = RecordingGenerator(), Events()
    runner = GeneratorRunner(events, generator, kv, blocks_per_lane=BLOCKS, table_width=WIDTH,
                             decode_capacity=CAPACITY, enable_trace=True, takes_start_pos=True,
                             takes_empty_slots=True, close_device=lambda: None)
    return runner, generator, events


# The merged plan: lane 0's rows first, then lane 1's, each row with its lane-local block ids.
ROWS = [PlannedRow((5,), 40, (3, 4), True, lane=0, slot=0),
        PlannedRow((6,), 7, (0,), True, lane=1, slot=0),
        PlannedRow((7,), 33, (2, 9), True, lane=1, slot=1)]


def test_decode_places_each_lanes_rows_in_its_chunk_with_local_block_ids() -> None:
    runner, generator, events = _runner()
    logits = runner.decode(ROWS)
    (mode, call), = generator.calls
    assert mode == "decode"
    # lanes x capacity rows: lane 0 at [0, 2), lane 1 at [2, 4); padding rows at position -1
    assert call["tokens"][:, 0].tolist() == [5, 0, 6, 7]
    assert call["start_pos"].tolist() == [40, -1, 7, 33]
    # the sink is each lane's block BLOCKS (one past its own); lane 1's ids are local
    assert call["page_table"].tolist() == [[3, 4, 10, 10], [10, 10, 10, 10], [0, 10, 10, 10], [2, 9, 10, 10]]
    assert call["kv_cache"] == ["lane-0 cache", "lane-1 cache"]
    assert (call["enable_trace"], call["read_from_device"]) == (True, False)
    assert events.waited == ["event-0", "event-1"]
    # logits come back in the plan's row order, read from each row's slot
    assert logits[:, 0].tolist() == [5.0, 6.0, 7.0]
    assert runner.traced_steps == 1


def test_decode_rows_land_at_lane_times_capacity_plus_their_slot() -> None:
    runner, generator, _ = _runner()
    # Slot 0 of each lane is free (its request finished): the rows keep their slots, not packed.
    rows = [PlannedRow((5,), 12, (3,), True, lane=0, slot=1),
            PlannedRow((6,), 20, (1, 2), True, lane=1, slot=1)]
    logits = runner.decode(rows)
    (_, call), = generator.calls
    assert call["tokens"][:, 0].tolist() == [0, 5, 0, 6]
    assert call["start_pos"].tolist() == [-1, 12, -1, 20]
    assert call["page_table"].tolist() == [[10, 10, 10, 10], [3, 10, 10, 10],
                                           [10, 10, 10, 10], [1, 2, 10, 10]]
    assert logits[:, 0].tolist() == [5.0, 6.0]


def test_prefill_sends_each_row_to_its_lane_by_empty_slots() -> None:
    runner, generator, _ = _runner()
    rows = [PlannedRow((11, 12, 13), 0, (1,), True, lane=0, slot=1),
            PlannedRow((21, 22), 32, (5, 6), True, lane=1, slot=0),
            PlannedRow((31,), 0, (7,), True, lane=1, slot=1)]
    logits = runner.prefill(rows)
    (mode, call), = generator.calls
    assert mode == "prefill"
    assert call["tokens"].tolist() == [[11, 12, 13], [21, 22, 0], [31, 0, 0]]
    assert call["prompt_lens"] == [3, 2, 1] and call["start_pos"] == [0, 32, 0]
    # each row's lane × CAPACITY + slot; tt-metal: model_id = slot // max_batch_size_per_model (CAPACITY)
    assert call["empty_slots"] == [1, 2, 3]
    assert call["page_table"].tolist() == [[1, 10, 10, 10], [5, 6, 10, 10], [7, 10, 10, 10]]
    assert call["kv_cache"] == ["lane-0 cache", "lane-1 cache"]
    assert logits[:, 0].tolist() == [11.0, 21.0, 31.0]


def test_a_slot_past_the_lanes_capacity_is_refused() -> None:
    runner, _, _ = _runner()
    rows = [PlannedRow((i,), 0, (i,), True, lane=1, slot=i) for i in range(CAPACITY + 1)]
    with pytest.raises(AssertionError, match="^lane 1 slot 2 is past its capacity 2$"):
        runner.decode(rows)


def test_block_ids_that_are_not_lane_local_are_refused() -> None:
    runner, _, _ = _runner()
    with pytest.raises(AssertionError,
                       match=r"^block ids \(3, 10\) are not lane-local \(each lane has 10\)$"):
        runner.decode([PlannedRow((1,), 4, (3, BLOCKS), True, lane=1, slot=0)])


def test_warmup_calls_the_generators_hooks_with_the_arguments_they_name() -> None:
    runner, generator, _ = _runner()
    seen: list[tuple[str, dict[str, Any]]] = []

    def prefill_hook(kv_cache: Any, enable_trace: bool) -> None:  # names two of tt-metal's four
        seen.append(("prefill", {"kv_cache": kv_cache, "enable_trace": enable_trace}))

    def decode_hook(**kwargs: Any) -> None:  # takes any: gets every one
        seen.append(("decode", kwargs))

    generator.warmup_model_prefill = prefill_hook  # type: ignore[attr-defined]
    generator.warmup_model_decode = decode_hook  # type: ignore[attr-defined]
    assert runner.warmup() == ["warmup_model_prefill", "warmup_model_decode"]
    caches = ["lane-0 cache", "lane-1 cache"]
    assert seen == [("prefill", {"kv_cache": caches, "enable_trace": True}),
                    ("decode", {"kv_cache": caches, "enable_trace": True, "max_batch_size": 2 * CAPACITY,
                                "num_blocks": WIDTH, "can_sample_on_device": False,
                                "non_greedy_decoding_on_device": False})]


def test_warmup_without_hooks_calls_nothing() -> None:
    runner, generator, _ = _runner()
    assert runner.warmup() == [] and generator.calls == []
