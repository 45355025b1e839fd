"""The contract generator's Llama 3.2 Vision calls: a mixin over TTLlamaForCausalLM standing in for
tt-metal's `MllamaForConditionalGeneration` and the vision half of its base `Generator`, written
from their source (read, not copied):

    GM  tt-metal models/tt_transformers/tt/generator_vllm.py, the newest found (index id 54494048887:
        "Mllama is currently not supported in vLLM V1"): MllamaForConditionalGeneration
        (model_capabilities, initialize_vllm_model, max_cross_attn_tokens, prefill_forward,
        decode_forward = decode_forward_llama_vision, logits[0] of a tuple)
    G1  tt-metal models/tt_transformers/tt/generator.py (index id 7625586423): prefill_forward,
        prefill_forward_llama_vision, _prefill_forward_single_user, decode_forward_llama_vision,
        _decode_forward_no_trace (returns (tt_logits, tt_log_probs)), _easy_trace, read_decode_output
    LV  tt-metal models/tt_transformers/tt/multimodal/llama_vision_model.py @ fba455bb:
        compute_vision_tokens_masks, _pad_masks, _get_xattn_mask, prepare_decode_inputs_host,
        ttnn_prefill_forward / ttnn_decode_forward (cross_page_table: no separate xattn_caches)
    CF  llama_models api/chat_format.py create_vision_mask (GM's import)
    V0  tenstorrent/vllm dev_feb_2026_v0_final vllm/worker/tt_model_runner.py: the caller that
        served it (masks cached per sequence, sent back in decode; cross_page_table both ways)

Rules 90-99 of RULES.md. The numbers: HF's Mllama on the host (host_vision.MllamaReference) with
the image as transformers' MllamaImageProcessor makes it; tt-metal's own image transform
(llama_models VariableSizeImageTransform) and its bfloat8 caches differ from it on hardware only.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from PIL import Image

core = sys.modules["tt_contract_llama_core"]
require = core.rules.require

IMAGE_TOKEN = 128256
"""GM: self.MLLAMA_IMAGE_TOKEN_ID = 128256 (hard-coded)."""


def create_vision_mask(tokens: list[int], vision_token: int) -> list[list[int]]:
    """CF: [[first image token, -1]] for one image (it and every token after it see the image)."""
    places = [i for i, token in enumerate(tokens) if token == vision_token]
    if not places:
        return []
    if len(places) == 1:
        return [[places[0], -1]]
    masks = [[a, b] for a, b in zip(places[:-1], places[1:], strict=True)] + [[places[-1], len(tokens)]]
    end = masks[-1][1]
    for mask in reversed(masks):  # consecutive image tokens all see the text after the last of them
        if mask[0] == mask[1] - 1:
            mask[1] = end
        end = mask[1]
    return masks


def nearest_32(n: int) -> int:
    return -(-n // 32) * 32


class MllamaCalls:
    """GM's methods over ContractCore (the class using it also derives from TTLlamaForCausalLM)."""

    supports_multimodal = True  # GM: SupportsMultiModal
    model_capabilities = {"supports_prefix_caching": False, "supports_async_decode": True,
                          "supports_sample_on_device": False}

    @classmethod
    def initialize_vllm_model(cls, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                              tt_data_parallel: int = 1, optimizations: str | None = None) -> Any:
        require(optimizations is None, f"optimizations={optimizations!r}: GM asserts \"Custom optimizations "
                "are not supported for this model\"")
        return cls(hf_config, mesh_device, max_batch_size, max_seq_len,  # type: ignore[call-arg]
                   tt_data_parallel)

    @property
    def max_cross_attn_tokens(self) -> int:
        """GM: vision_max_num_chunks x nearest_32(vision_chunk_ntok), a tile's patches and its class token."""
        vision = self.hf_config.vision_config  # type: ignore[attr-defined]
        return int(vision.max_num_tiles) * nearest_32((vision.image_size // vision.patch_size) ** 2 + 1)

    def _vision_state(self) -> dict[str, Any]:
        if not hasattr(self, "_vision"):
            self._vision: dict[str, Any] = {"owner": {}, "of": {}, "masks": {}, "lengths": {}}
        return self._vision

    # GM prefill_forward -> G1 prefill_forward -> prefill_forward_llama_vision
    def prefill_forward(self, tokens: torch.Tensor, images: Any, page_table: torch.Tensor, kv_cache: Any,
                        prompt_lens: Any, cross_page_table: torch.Tensor) -> tuple[Any, ...]:
        s: Any = self
        rows = tokens.shape[0]
        count = len(images) if isinstance(images, list) else "?"
        require(isinstance(images, list) and len(images) == rows, f"images: GM reads images[user_id] for "
                f"each of the {rows} rows, got {type(images).__name__} of {count}")
        shape = getattr(cross_page_table, "shape", cross_page_table)
        require(isinstance(cross_page_table, torch.Tensor) and cross_page_table.ndim == 2
                and cross_page_table.shape[0] == rows, "cross_page_table: G1 asserts a torch.Tensor and "
                f"slices row idx of it for each of the {rows} rows, got {shape!r}")
        lens = core.rules.int_list("prompt_lens", prompt_lens, rows)
        pictures: list[Any] = []
        for i in range(rows):
            image = images[i]
            if isinstance(image, list):
                require(len(image) == 1, f"images[{i}]: GM asserts \"Only one image is supported for each "
                        f"user in the batch\", got {len(image)}")
                image = image[0]
            require(image is None or isinstance(image, Image.Image), f"images[{i}]: GM hands the image "
                    "itself to LV's image transform (llama_models VariableSizeImageTransform), which takes a "
                    f"PIL image; got {type(image).__name__}")
            if image is not None:
                prompt = tokens[i, :lens[i]].tolist()
                require(bool(create_vision_mask(prompt, IMAGE_TOKEN)), f"row {i}: an image and no token "
                        f"{IMAGE_TOKEN} in its prompt: GM's vision mask is empty and no token would see it")
            pictures.append(image)
        self._pictures = pictures
        logits = s.prefill(tokens, page_table, kv_cache, lens, None, None, False)  # G1: per user, untraced
        state, written = self._vision_state(), {}
        masks: list[tuple[Any, ...]] = []
        for i, picture in enumerate(pictures):
            if picture is None:  # G1: text_only_inference, the four masks None
                masks.append((None, None, None, None))
                continue
            m = i // s.max_batch_size  # G1: empty_slots None -> user i, model_id = i // max_batch_size
            need = -(-self.max_cross_attn_tokens // s.block_size)
            require(cross_page_table.shape[1] >= need, f"row {i}: cross_page_table has "
                    f"{cross_page_table.shape[1]} blocks; G1 _get_prefill_user_page_table takes the {need} "
                    f"of its {self.max_cross_attn_tokens} vision tokens")
            ids = cross_page_table[i, :need].tolist()
            core.rules.check_block_ids(f"row {i} cross_page_table", ids, s.token_caches[m].num_blocks)
            require(len(set(ids)) == len(ids), f"row {i}: cross_page_table {ids} holds a block twice: the "
                    "image's tokens would overwrite each other")
            key = core.host.chain(tokens[i, :lens[i]].tolist())[-1]
            for b in ids:  # LV compute_xattn_kv_cache: paged_fill_cache of each cross-attention layer
                require(written.setdefault((m, b), key) == key, f"row {i}: cross block {b} is written by two "
                        "rows of one prefill")
                state["owner"][(m, b)] = key
            state["of"][key], state["lengths"][key] = (m, ids), lens[i]
            vision_mask = create_vision_mask(tokens[i, :lens[i]].tolist(), IMAGE_TOKEN)
            state["masks"][key] = self._masks(lens[i], vision_mask)
            masks.append(state["masks"][key])
        return (logits, *[[row[k] for row in masks] for k in range(4)])

    def _masks(self, length: int, vision_mask: list[list[int]]) -> tuple[torch.Tensor, ...]:
        """LV _pad_masks + _get_xattn_mask for one image of max_num_tiles chunks: prefill [1, 1, L,
        vision tokens] (0 where a token sees the image, the float minimum where not) and [1, 1, L, 1]
        (whether a row sees anything), decode's [1, 1, 1, vision tokens] and [1, 1, 1, 1]."""
        vision = self.hf_config.vision_config  # type: ignore[attr-defined]
        tiles, ntok = int(vision.max_num_tiles), (vision.image_size // vision.patch_size) ** 2 + 1
        low = torch.finfo(torch.float32).min
        start, end = vision_mask[0]
        prefill = torch.full((1, length, 1, tiles), low)
        decode = torch.full((1, 1, 1, tiles), low)
        if end == -1:
            decode.fill_(0.0)
            end = length
        prefill[0, start:end] = 0.0
        out: list[torch.Tensor] = []
        for mask in (prefill, decode):
            dense = mask.repeat_interleave(ntok, dim=3).view(1, mask.shape[1], -1).unsqueeze(1)
            seen = (dense != low).any(dim=-1).float()[..., None]
            out += [dense * seen, seen]
        return out[0], out[1], out[2], out[3]

    def prefill_extras(self, row: int) -> dict[str, Any]:
        picture = self._pictures[row]
        return {} if picture is None else {"picture": picture}

    # GM decode_forward -> G1 decode_forward_llama_vision; GM returns logits[0] of a tuple
    def decode_forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.decode_forward_llama_vision(*args, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    def decode_forward_llama_vision(self, start_pos: torch.Tensor, tokens: torch.Tensor,
                                    prefill_cross_attention_masks: list[Any],
                                    prefill_full_text_row_masked_out_mask: list[Any],
                                    decode_cross_attention_masks: list[Any],
                                    decode_full_text_row_masked_out_mask: list[Any], xattn_caches: Any = None,
                                    page_table: Any = None, kv_cache: Any = None,
                                    cross_page_table: Any = None, enable_trace: bool = True,
                                    read_from_device: bool = True) -> Any:
        s: Any = self
        require(xattn_caches is None and isinstance(cross_page_table, torch.Tensor),
                "LV ttnn_decode_forward: with the paged kv_cache the cross-attention KV is read through "
                f"cross_page_table (a torch tensor), with no xattn_caches; got xattn_caches="
                f"{xattn_caches!r:.40}, cross_page_table={type(cross_page_table).__name__}")
        require(not enable_trace, "decode_forward_llama_vision(enable_trace=True): G1 _easy_trace captures "
                "the decode trace on its first call, while serving (no warmup captures it: W's "
                "warmup_model_decode calls decode_forward in the text form, which this decode does not take)")
        require(not read_from_device, "decode_forward_llama_vision(read_from_device=True): G1 reads "
                "_decode_forward_no_trace's (tt_logits, tt_log_probs) pair with read_decode_output, which "
                "takes neither a tuple of lists nor a list (it returns None); pass read_from_device=False")
        lists = (prefill_cross_attention_masks, prefill_full_text_row_masked_out_mask,
                 decode_cross_attention_masks, decode_full_text_row_masked_out_mask)
        batch = s.data_parallel * s.max_batch_size
        require(all(isinstance(lst, list) for lst in lists) and len({len(lst) for lst in lists}) == 1
                and len(lists[0]) <= batch, "the four mask lists: LV prepare_decode_inputs_host asserts "
                f"lists of one length, at most the batch ({batch}); got "
                f"{[len(lst) if isinstance(lst, list) else lst for lst in lists]}")
        self._check_rows(torch.as_tensor(start_pos), torch.as_tensor(page_table), cross_page_table, lists)
        outs = s.decode(tokens, start_pos, page_table, kv_cache, False)
        tt_logits = []
        for device_out, logits in outs:
            s.remember(device_out, logits)
            tt_logits.append(device_out)
        return tt_logits, [None] * len(tt_logits)  # G1 _decode_forward_no_trace

    def _check_rows(self, positions: torch.Tensor, table: torch.Tensor, cross_table: torch.Tensor,
                    lists: tuple[list[Any], ...]) -> None:
        """Each live row gets its own sequence's masks (None for a sequence without an image: LV's
        text-only row) and the cross blocks its prefill wrote, still its."""
        s: Any = self
        state = self._vision_state()
        for r, p in enumerate(positions.tolist()):
            if p < 0 or s._in_warmup:
                continue
            m, where = r // s.max_batch_size, f"decode row {r} at position {p}"
            _, hashes = s.token_caches[m].read(table[r], p)
            seqs = [key for key, length in state["lengths"].items() if len(hashes) >= length
                    and hashes[length - 1] == key]
            given = tuple(lst[r] if r < len(lst) else None for lst in lists)
            if not seqs:
                require(all(mask is None for mask in given), f"{where}: its sequence has no image, and it "
                        "was given masks (it would attend to another request's image)")
                continue
            key = seqs[0]
            require(all(a is b for a, b in zip(given, state["masks"][key], strict=True)), f"{where}: not the "
                    "masks its prefill returned (V0 keeps them per sequence and sends each row its own)")
            mesh, ids = state["of"][key]
            require(cross_table.shape[1] >= len(ids) and cross_table[r, :len(ids)].tolist() == ids,
                    f"{where}: cross_page_table row {cross_table[r, :len(ids)].tolist()} is not the blocks "
                    f"its prefill wrote the image's keys and values to ({ids})")
            stale = [b for b in ids if state["owner"].get((mesh, b)) != key]
            require(not stale, f"{where}: cross blocks {stale} were written by another request's image since")
