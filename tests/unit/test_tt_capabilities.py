"""A tt-metal generator class read as the plugin reads it (tt_backend/models/tt_capabilities.py):
model_capabilities first, with tt-metal's keys; signatures only where a class declares nothing or
is explicit about what it lacks. The classes here are shaped like tt-metal's at two points in its
history: current (`prefill_forward(*args, **kwargs)` forwarding to a `prefill_forward_text` that
takes everything by keyword, read_decode_output(tt_out, async_read)) and older (d9d95fa:
prefill_forward_text(tokens, page_table, kv_cache, prompt_lens), read_decode_output(tt_out,
unpadded_batch, is_tokens))."""

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from tt_backend.models.tt_capabilities import generator_traits, sliding_window, takes


class Current:
    model_capabilities: dict[str, bool | int] = {"supports_prefix_caching": True,
                                                 "supports_async_decode": True}

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              n_layers: int | None = None, tt_data_parallel: int = 1) -> None: ...

    def prefill_forward(self, *args: Any, **kwargs: Any) -> None: ...

    def prefill_forward_text(self, tokens: Any, page_table: Any = None, kv_cache: Any = None,
                             prompt_lens: Any = None, empty_slots: Any = None, enable_trace: bool = True,
                             sampling_params: Any = None, start_pos: Any = None, **kwargs: Any) -> None: ...

    def read_decode_output(self, tt_out: Any, async_read: bool = False) -> None: ...


class Opaque(Current):
    """Every step method takes only *args, **kwargs: the declaration decides."""

    def prefill_forward_text(self, *args: Any, **kwargs: Any) -> None: ...


class Older:
    """No model_capabilities; tt-metal d9d95fa's prefill and read."""

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int,
                              max_seq_len: int) -> None: ...

    def prefill_forward(self, *args: Any, **kwargs: Any) -> None: ...

    def prefill_forward_text(self, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any) -> None: ...

    def read_decode_output(self, tt_out: Any, unpadded_batch: int, is_tokens: bool = False) -> None: ...


HF = SimpleNamespace(sliding_window=None)


def test_current_tt_metal_is_read_from_its_declaration_and_signatures() -> None:
    traits = generator_traits(Current, HF, 32, 32)
    caps = traits.capabilities
    assert (caps.prefix_caching, caps.chunked_prefill, caps.async_decode, caps.device_sampling) == \
        (True, False, True, False)
    assert (caps.single_execute, caps.batched_prefill, caps.max_prefill_batch) == (True, True, 32)
    calls = traits.calls
    assert (traits.declared, calls.takes_start_pos, calls.takes_empty_slots, calls.takes_prefill_trace) == \
        (True, True, True, True)
    assert (calls.resume_alignment, calls.async_read, calls.warms_up_prefill, calls.warms_up_decode) == \
        (32, True, False, False)


def test_a_declaring_generator_of_only_kwargs_gets_the_plugins_contract() -> None:
    traits = generator_traits(Opaque, HF, 8, 64)
    calls = traits.calls
    assert calls.takes_start_pos and calls.takes_empty_slots and calls.takes_prefill_trace
    assert traits.capabilities.prefix_caching


def test_an_older_generator_falls_back_to_its_signatures() -> None:
    traits = generator_traits(Older, HF, 8, 32)
    caps = traits.capabilities
    assert not (traits.declared or traits.calls.takes_start_pos or traits.calls.takes_empty_slots)
    assert not traits.calls.async_read
    assert (caps.prefix_caching, caps.chunked_prefill, caps.single_execute) == (False, False, False)


def test_an_undeclared_kwargs_only_method_takes_nothing() -> None:
    class Bare:
        def prefill_forward(self, *args: Any, **kwargs: Any) -> None: ...
    assert not takes(Bare, "prefill_forward", "start_pos", declared=False)
    assert takes(Bare, "prefill_forward", "start_pos", declared=True)


def test_chunked_prefill_and_the_resume_alignment_come_from_tt_metals_keys() -> None:
    class Chunked(Current):
        model_capabilities = {"supports_prefix_caching": True, "supports_chunked_prefill": True,
                              "resumed_prefill_token_alignment": 128, "supports_sample_on_device": True}
    traits = generator_traits(Chunked, HF, 32, 32)
    assert (traits.capabilities.chunked_prefill, traits.capabilities.device_sampling) == (True, True)
    assert traits.calls.resume_alignment == 128  # lcm(block 32, 128)
    assert generator_traits(Chunked, HF, 32, 96).calls.resume_alignment == 384


def test_our_old_made_up_keys_are_unknown(caplog: pytest.LogCaptureFixture) -> None:
    class MadeUp(Current):
        model_capabilities = {"supports_device_sampling": True, "supports_single_execute": True}
    with caplog.at_level(logging.WARNING):
        caps = generator_traits(MadeUp, HF, 32, 32).capabilities
    assert not caps.device_sampling and not caps.prefix_caching
    assert "unknown key 'supports_device_sampling'=True ignored" in caplog.text
    assert "unknown key 'supports_single_execute'=True ignored" in caplog.text


def test_a_sliding_window_model_gets_no_prefix_caching() -> None:
    windowed = SimpleNamespace(sliding_window=4096)
    assert not generator_traits(Current, windowed, 32, 32).capabilities.prefix_caching
    # Qwen2's config carries a window it does not use
    qwen2 = SimpleNamespace(sliding_window=4096, use_sliding_window=False)
    assert sliding_window(qwen2) is None
    assert generator_traits(Current, qwen2, 32, 32).capabilities.prefix_caching


def test_a_block_output_model_is_refused() -> None:
    class Blocks(Current):
        model_capabilities = {"output_tokens_per_step": 4}
    with pytest.raises(ValueError, match=r"\.Blocks declares output_tokens_per_step=4: block-output models "
                       r"\(more than one token per step\) are not supported$"):
        generator_traits(Blocks, HF, 32, 32)


def test_a_read_decode_output_of_neither_form_names_both() -> None:
    class Odd(Current):
        def read_decode_output(self, tt_out: Any, blocking: bool) -> None: ...  # type: ignore[override]
    with pytest.raises(ValueError) as err:
        generator_traits(Odd, HF, 32, 32)
    assert str(err.value).startswith(
        "test_a_read_decode_output_of_neither_form_names_both.<locals>.Odd.read_decode_output(self, tt_out: "
        "Any, blocking: bool) -> None is neither tt-metal's read_decode_output(tt_out, async_read=False) nor "
        "the older (tt_out, unpadded_batch, is_tokens=False)")


class Multimodal(Current):
    """Shaped like tt-metal's Qwen2_5_VLForConditionalGeneration (models/demos/qwen25_vl/tt/
    generator_vllm.py): vLLM's SupportsMultiModal marker, prefill_forward(tokens, page_table, kv_cache,
    prompt_lens, enable_trace, **kwargs)."""

    supports_multimodal = True
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True}

    def prefill_forward(self, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any,  # type: ignore[override]
                        enable_trace: bool, **kwargs: Any) -> None: ...


def test_a_multimodal_generator_takes_images_and_an_mrope_one_rope_deltas() -> None:
    from transformers import Qwen2_5_VLConfig

    qwen = Qwen2_5_VLConfig(text_config={"rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                                             "mrope_section": [16, 24, 24]}})
    traits = generator_traits(Multimodal, qwen, 4, 32)
    assert traits.capabilities.takes_images
    assert (traits.calls.takes_images, traits.calls.rope_deltas) == (True, True)
    plain = generator_traits(Multimodal, HF, 4, 32)  # Gemma 3's or Mistral 3's: images, one position a token
    assert (plain.calls.takes_images, plain.calls.rope_deltas) == (True, False)
    text = generator_traits(Current, qwen, 4, 32)
    assert not text.capabilities.takes_images
    assert (text.calls.takes_images, text.calls.rope_deltas) == (False, False)


def test_a_generator_whose_images_nothing_reaches_is_served_text_only() -> None:
    """tt-metal's Mistral3ForConditionalGeneration reads images only from `images` objects the plugin
    never sends (docs/tt_multimodal_generators.md 2.3): the loader serves it text only."""
    from tt_backend.models.registry import TT_BUILTINS, TT_IMAGES_UNREACHABLE
    from tt_backend.models.tt_capabilities import without_images

    assert set(TT_IMAGES_UNREACHABLE) == {"TTMistral3ForConditionalGeneration"} <= set(TT_BUILTINS)
    qwen_like = generator_traits(Multimodal, HF, 4, 32)
    text_only = without_images(qwen_like)
    assert not text_only.capabilities.takes_images
    assert (text_only.calls.takes_images, text_only.calls.rope_deltas) == (False, False)
    assert text_only.capabilities.async_decode and text_only.calls.takes_prefill_trace  # the rest kept


class CrossAttention(Current):
    """Shaped like tt-metal's MllamaForConditionalGeneration (generator_vllm.py, the newest found):
    vLLM's multimodal marker, an explicit prefill_forward naming cross_page_table, and the base
    Generator's warmup hooks."""

    supports_multimodal = True
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True,
                          "supports_sample_on_device": False}

    def prefill_forward(self, tokens: Any, images: Any, page_table: Any, kv_cache: Any,  # type: ignore[override]
                        prompt_lens: Any, cross_page_table: Any) -> None: ...

    def warmup_model_prefill(self, *args: Any, **kwargs: Any) -> None: ...

    def warmup_model_decode(self, *args: Any, **kwargs: Any) -> None: ...


def test_a_generator_naming_cross_page_table_reads_its_image_by_cross_attention() -> None:
    """Its prefill takes no start_pos, empty_slots or enable_trace, and its warmup hooks are not
    called (tt-metal's warmup_model_decode calls decode_forward in the text form, which Mllama's
    decode_forward_llama_vision does not take)."""
    traits = generator_traits(CrossAttention, HF, 4, 32)
    calls = traits.calls
    assert traits.capabilities.takes_images and calls.takes_images and calls.cross_attention
    assert not (calls.takes_start_pos or calls.takes_empty_slots or calls.takes_prefill_trace)
    assert (calls.warms_up_prefill, calls.warms_up_decode, calls.rope_deltas) == (False, False, False)
    assert not traits.capabilities.prefix_caching and not traits.capabilities.device_sampling
    assert not generator_traits(Multimodal, HF, 4, 32).calls.cross_attention  # Qwen's, Gemma's: images only
    without = type("NoMarker", (CrossAttention,), {"supports_multimodal": False})  # no images, no cross
    assert not generator_traits(without, HF, 4, 32).calls.cross_attention
