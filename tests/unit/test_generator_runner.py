"""GeneratorRunner's step shapes over a recording stand-in for a tt-metal generator (no ttnn): how
the scheduler's merged plan of two data-parallel lanes becomes the generator's batch, page tables
and slots. The tier in tests/tt runs the same runner over real ttnn on mock devices."""

import dataclasses
from typing import Any

import pytest
import torch

from tt_backend.contract.modes import TraceMode
from tt_backend.contract.step import PlannedRow
from tt_backend.devices.tt.generator import TTCallForms
from tt_backend.devices.tt.kv_cache import TTPagedKVCache
from tt_backend.devices.tt.kv_layout import TTKVGeometry
from tt_backend.runtime.config import TraceConfig
from tt_backend.runtime.generator_runner import GeneratorRunner

BLOCKS, CAPACITY, WIDTH, VOCAB = 10, 2, 4, 8


class RecordingGenerator:
    """Logits whose every entry is the row's token id, so the runner's read-back order shows."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def prefill_forward(self, tokens: torch.Tensor, **kwargs: Any) -> Any:
        """Each row's logits: its last token (prompt_lens - 1) in every entry."""
        self.calls.append(("prefill", {"tokens": tokens, **kwargs}))
        last = torch.tensor(kwargs["prompt_lens"]) - 1
        if kwargs.get("sampling_params") is not None:  # tt-metal: (tokens [B, 1], log-probs [B])
            return (tokens[torch.arange(len(last)), last] + 100)[:, None], torch.ones(len(last))
        return tokens[torch.arange(len(last)), last][:, None, None].float().expand(-1, 1, VOCAB)

    def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor,
                       **kwargs: Any) -> list[torch.Tensor]:
        self.calls.append(("decode", {"tokens": tokens, "start_pos": start_pos, **kwargs}))
        if kwargs.get("sampling_params") is not None:  # "sampled" tokens: each row's input + 1
            return list(torch.chunk(tokens[:, 0] + 1, 2))
        return list(torch.chunk(tokens.float().expand(-1, VOCAB), 2))  # one output per submesh

    def read_decode_output(self, out: list[torch.Tensor], async_read: bool) -> Any:
        self.reads = getattr(self, "reads", 0) + 1
        return out, [f"event-{self.reads}-0", f"event-{self.reads}-1"]

    def process_decode_output_host(self, host: list[torch.Tensor], is_tokens: bool) -> Any:
        assert is_tokens == (host[0].dim() == 1), "is_tokens does not match the outputs"
        return (torch.cat(host), None) if is_tokens else (torch.cat(host)[:, None, :], None)


class Events:
    def __init__(self) -> None:
        self.waited: list[str] = []

    def event_synchronize(self, event: str) -> None:
        self.waited.append(event)


CALLS = TTCallForms(takes_start_pos=True, takes_empty_slots=True, takes_prefill_trace=True,
                    resume_alignment=32, async_read=True, warms_up_prefill=True, warms_up_decode=True)


def _runner(trace: TraceMode = TraceMode.DECODE_ONLY, batched: bool = True,
            calls: TTCallForms = CALLS) -> tuple[GeneratorRunner, RecordingGenerator, Events]:
    kv = TTPagedKVCache(TTKVGeometry(1, BLOCKS + 1, 1, 32, 32), lanes=2, release=lambda region: None)
    kv.allocate(lambda: ["lane-0 cache", "lane-1 cache"])
    generator, events = RecordingGenerator(), Events()
    runner = GeneratorRunner(events, generator, kv, blocks_per_lane=BLOCKS, table_width=WIDTH,
                             decode_capacity=CAPACITY, trace=TraceConfig(trace), calls=calls,
                             batched_prefill=batched, close_device=lambda: None)
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
    assert events.waited == ["event-1-0", "event-1-1"]
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
            PlannedRow((31,), 0, (7,), True, lane=1, slot=1)]
    logits = runner.prefill(rows)
    (mode, call), = generator.calls
    assert mode == "prefill"
    assert call["tokens"].tolist() == [[11, 12, 13], [31, 0, 0]]
    assert (call["prompt_lens"], call["start_pos"], call["enable_trace"]) == ([3, 1], [0, 0], False)
    # each row's lane × CAPACITY + slot; tt-metal: model_id = slot // max_batch_size_per_model (CAPACITY)
    assert call["empty_slots"] == [1, 3]
    assert call["page_table"].tolist() == [[1, 10, 10, 10], [7, 10, 10, 10]]
    assert call["kv_cache"] == ["lane-0 cache", "lane-1 cache"]
    assert logits[:, 0].tolist() == [13.0, 31.0]


def test_a_row_past_a_cached_prefix_sends_its_whole_sequence_alone() -> None:
    # tt-metal's prefill takes every token with prompt_lens the full length and start_pos the
    # cached length, and computes tokens[start_pos:prompt_len]; its batched prefill ignores
    # start_pos, so the resumed row gets a call of its own.
    runner, generator, _ = _runner()
    prefix = tuple(range(100, 132))  # one cached block of 32
    rows = [PlannedRow((11, 12), 0, (1,), True, lane=0, slot=0),
            PlannedRow((21, 22), 32, (5, 6), True, lane=1, slot=0, prefix_token_ids=prefix),
            PlannedRow((31,), 0, (7,), True, lane=1, slot=1)]
    logits = runner.prefill(rows)
    (_, fresh), (_, resumed) = generator.calls
    assert fresh["tokens"].tolist() == [[11, 12], [31, 0]]
    assert (fresh["prompt_lens"], fresh["start_pos"], fresh["empty_slots"]) == ([2, 1], [0, 0], [0, 3])
    assert resumed["tokens"].tolist() == [[*prefix, 21, 22]]
    assert (resumed["prompt_lens"], resumed["start_pos"], resumed["empty_slots"]) == ([34], [32], [2])
    assert resumed["page_table"].tolist() == [[5, 6, 10, 10]]
    assert logits[:, 0].tolist() == [12.0, 22.0, 31.0]  # in the plan's row order
    assert runner.eager_steps == 1


def test_a_resumed_start_is_floored_to_the_alignment() -> None:
    # a later chunk of a chunked prefill starts mid-block; with resume_alignment 64 (block 32 and a
    # declared resumed_prefill_token_alignment of 64) it is sent from 64, and tt-metal recomputes
    runner, generator, _ = _runner(calls=dataclasses.replace(CALLS, resume_alignment=64))
    row = PlannedRow((7, 8), 100, (1, 2, 3, 4), False, lane=0, slot=0, prefix_token_ids=tuple(range(100)))
    runner.prefill([row])
    (_, call), = generator.calls
    assert (call["start_pos"], call["prompt_lens"], call["tokens"].shape[1]) == ([64], [102], 102)


def test_batched_prefill_off_calls_once_per_row_and_trace_all_traces_prefill() -> None:
    runner, generator, _ = _runner(trace=TraceMode.ALL, batched=False)
    runner.prefill([PlannedRow((1, 2), 0, (1,), True, lane=0, slot=0),
                    PlannedRow((3,), 0, (2,), True, lane=0, slot=1)])
    assert [call["tokens"].tolist() for _, call in generator.calls] == [[[1, 2]], [[3]]]
    assert [call["enable_trace"] for _, call in generator.calls] == [True, True]


def test_a_row_without_its_prefix_tokens_is_refused() -> None:
    runner, _, _ = _runner()
    with pytest.raises(AssertionError, match="^a row at position 32 came without its prefix tokens$"):
        runner.prefill([PlannedRow((21,), 32, (5, 6), True, lane=0, slot=0)])


def test_an_older_generator_reads_inside_decode_forward() -> None:
    class Older(RecordingGenerator):
        def decode_forward(self, tokens: torch.Tensor, start_pos: torch.Tensor, **kwargs: Any) -> Any:
            self.calls.append(("decode", kwargs))
            return tokens.float().expand(-1, VOCAB)[:, None, :]  # host logits, no (logits, log-probs)
    older = TTCallForms(False, True, False, 32, async_read=False, warms_up_prefill=False,
                        warms_up_decode=False)
    runner, _, events = _runner(calls=older)
    runner.generator = generator = Older()
    logits = runner.decode(ROWS)
    (_, call), = generator.calls
    assert call["read_from_device"] is True and events.waited == []
    assert logits[:, 0].tolist() == [5.0, 6.0, 7.0]


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


def test_warmup_compiles_everything_then_captures_with_the_arguments_the_hooks_name() -> None:
    runner, generator, _ = _runner(trace=TraceMode.ALL)
    seen: list[tuple[str, dict[str, Any]]] = []

    def prefill_hook(kv_cache: Any, enable_trace: bool) -> None:  # names two of tt-metal's four
        seen.append(("prefill", {"kv_cache": kv_cache, "enable_trace": enable_trace,
                                 "warmed": generator.already_warmed_up_prefill}))  # type: ignore
        generator.already_warmed_up_prefill = True  # type: ignore[attr-defined]

    def decode_hook(**kwargs: Any) -> None:  # takes only **kwargs: gets what the plugin passes
        seen.append(("decode", kwargs))

    generator.already_warmed_up_prefill = False  # type: ignore[attr-defined]
    generator.warmup_model_prefill = prefill_hook  # type: ignore[attr-defined]
    generator.warmup_model_decode = decode_hook  # type: ignore[attr-defined]
    assert runner.warmup() == ["warmup_model_prefill(False)", "warmup_model_decode(False)",
                               "warmup_model_prefill(True)", "warmup_model_decode(True)"]
    caches = ["lane-0 cache", "lane-1 cache"]
    decode = {"kv_cache": caches, "max_batch_size": 2 * CAPACITY, "num_blocks": WIDTH,
              "can_sample_on_device": False}
    # the flag tt-metal's prefill warmup sets is cleared before the capture phase
    assert seen == [("prefill", {"kv_cache": caches, "enable_trace": False, "warmed": False}),
                    ("decode", {**decode, "enable_trace": False}),
                    ("prefill", {"kv_cache": caches, "enable_trace": True, "warmed": False}),
                    ("decode", {**decode, "enable_trace": True})]


def test_decode_only_tracing_captures_decode_alone_and_none_captures_nothing() -> None:
    both = ["warmup_model_decode(False)", "warmup_model_decode(True)"]
    for trace, expected in ((TraceMode.DECODE_ONLY, both), (TraceMode.NONE, both[:1])):
        runner, generator, _ = _runner(trace=trace)
        generator.warmup_model_decode = lambda **kwargs: None  # type: ignore[attr-defined]
        assert runner.warmup() == expected


def test_a_capture_that_overflows_the_trace_region_names_the_option() -> None:
    runner, generator, _ = _runner()

    def decode_hook(**kwargs: Any) -> None:
        if kwargs["enable_trace"]:
            raise RuntimeError("TT_FATAL: Creating trace buffers of size 52428800B exceeds the trace region")
    generator.warmup_model_decode = decode_hook  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"^capturing the traces in warmup_model_decode failed: they do not "
                                         r"fit the trace region; raise trace_region_size \(bytes\) or set "
                                         r"trace_mode=none\. ttnn: TT_FATAL"):
        runner.warmup()


def test_warmup_without_hooks_calls_nothing() -> None:
    runner, generator, _ = _runner()
    assert runner.warmup() == [] and generator.calls == []


def test_hooks_the_call_forms_do_not_name_are_not_called() -> None:
    """tt-metal's Mllama has both hooks, but they run its decode in a form it does not take: its call
    forms say neither is called (models/tt_capabilities.py), and none is."""
    cross = dataclasses.replace(CALLS, warms_up_prefill=False, warms_up_decode=False)
    runner, generator, _ = _runner(calls=cross)
    seen: list[str] = []
    generator.warmup_model_prefill = lambda **kwargs: seen.append("prefill")  # type: ignore[attr-defined]
    generator.warmup_model_decode = lambda **kwargs: seen.append("decode")  # type: ignore[attr-defined]
    assert runner.warmup() == [] and seen == []


class MropeGenerator(RecordingGenerator):
    """A multimodal M-RoPE generator's returns (tt-metal's Qwen2.5-VL): prefill (logits, rope_deltas
    [B, 1]), here each row's delta minus its first token."""

    def prefill_forward(self, tokens: torch.Tensor, **kwargs: Any) -> Any:
        return super().prefill_forward(tokens, **kwargs), -tokens[:, :1]


def test_images_go_to_prefill_as_the_plugin_sends_them_and_rope_deltas_come_back_into_decode() -> None:
    from tt_backend.contract.step import ImageSpan

    calls = dataclasses.replace(CALLS, takes_images=True, rope_deltas=True)
    runner, _, _ = _runner(trace=TraceMode.ALL, calls=calls)
    generator = MropeGenerator()
    runner.generator = generator
    pixels = [{"pixel_values": torch.full((4, 6), float(n)), "image_grid_thw": torch.tensor([[1, 2, 2]])}
              for n in (1, 2)]
    images = tuple(ImageSpan(f"k{n}", 1 + n, 1, pixels[n], grid=(1, 1, 1)) for n in (0, 1))
    rows = [PlannedRow((3, 9, 9, 4), 0, (1,), True, lane=0, slot=1, images=images),
            PlannedRow((5, 6), 0, (7,), True, lane=1, slot=0),
            PlannedRow((8, 8, 8), 0, (2,), True, lane=1, slot=1)]
    runner.prefill(rows)
    # the text rows together and traced; the row with images alone and untraced (tt-metal's batched
    # prefill hands every row the first row's images; its traced prefill drops them)
    text, image = (call for _, call in generator.calls)
    assert (text["tokens"].shape[0], text["pixel_values"], text["enable_trace"]) == (2, [None, None], True)
    assert "image_grid_thw" not in text
    assert ([[t[0, 0].item() for t in p] for p in image["pixel_values"]], image["enable_trace"]) == \
        ([[1.0, 2.0]], False)
    assert [[t.tolist() for t in g] for g in image["image_grid_thw"]] == [[[1, 2, 2], [1, 2, 2]]]
    # each row's delta is kept at its batch slot (lane x capacity + slot) and sent with every decode
    runner.decode([PlannedRow((4,), 4, (1,), True, lane=0, slot=1), PlannedRow((6,), 2, (7,), True, lane=1)])
    assert generator.calls[-1][1]["rope_deltas_all_users"] == [0, -3, -5, -8]


def test_a_text_generator_gets_no_image_or_rope_arguments() -> None:
    runner, generator, _ = _runner()
    runner.prefill([PlannedRow((5, 6), 0, (7,), True, lane=1, slot=0)])
    runner.decode([PlannedRow((6,), 2, (7,), True, lane=1, slot=0)])
    sent = {key for _, call in generator.calls for key in call}
    assert not {"pixel_values", "image_grid_thw", "rope_deltas_all_users"} & sent
