"""The machinery under the contract generator's tt-metal-shaped methods (contract_generator.py):
submeshes, the KV cache on the device, the paged ops at each step's shapes, the host token cache
and HF numbers (host_compute.py), the trace bookkeeping, and the observables the tests read.

On a mock device a trace capture with ops, execute_trace and wait_for_event segfault, so nothing is
captured: what tt-metal would capture is recorded in `traces`, and a traced call whose trace tt-metal
would have to capture while serving raises.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import ttnn

from tt_backend.devices.tt.kv_layout import TTKVGeometry, allocate_layer_caches
from tt_backend.mesh_options import submesh_shape

HERE = Path(__file__).resolve().parent


def load_by_path(path: Path, name: str) -> ModuleType:
    """A module of this bundle (or tests/tt/paged_ops.py) by its file: the registry loads the bundle
    from its folder with no package around it. One module object per process, under `name`."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


rules = load_by_path(HERE / "contract_rules.py", "tt_contract_llama_rules")
host = load_by_path(HERE / "host_compute.py", "tt_contract_llama_host")
ops = load_by_path(HERE.parents[1] / "paged_ops.py", "tt_contract_llama_paged_ops")
require = rules.require


def create_submeshes(mesh_device: Any, data_parallel: int) -> list[Any]:
    """tt-metal generator.py `create_submeshes`: `data_parallel` equal submeshes (the mesh itself for one)."""
    if data_parallel == 1:
        return [mesh_device]
    rows, cols = submesh_shape((mesh_device.shape[0], mesh_device.shape[1]), data_parallel)
    return list(mesh_device.create_submeshes(ttnn.MeshShape(rows, cols)))


def prefill_buckets(max_seq_len: int) -> list[int]:
    """The padded prefill lengths a warmup covers (G `get_warmup_prefill_supported_seq_lens`):
    every get_padded_prefill_len value up to that of max_seq_len."""
    top, out, n = rules.padded_prefill_len(max_seq_len), [], 128
    while n <= top:
        out.append(n)
        n = rules.padded_prefill_len(n + 1)
    return out


class ContractCore:
    """State and steps shared by every generator variant of this bundle."""

    floors_resume_offsets = True
    """The newer tt-metal floors a nonzero start_pos (AT); a generator without start_pos has none."""
    reference: Any = host.HFReference
    """The host model the numbers come from (a vision-language variant's takes its images)."""

    def __init__(self, hf_config: Any, mesh_device: Any, max_batch_size: int, max_seq_len: int,
                 tt_data_parallel: int) -> None:
        require(max_batch_size % tt_data_parallel == 0,
                f"max_batch_size={max_batch_size} does not split into tt_data_parallel={tt_data_parallel} "
                "submeshes (ModelArgs takes max_batch_size // tt_data_parallel)")
        self.hf_config, self.mesh_device, self.max_seq_len = hf_config, mesh_device, max_seq_len
        self.submeshes = create_submeshes(mesh_device, tt_data_parallel)
        self.max_batch_size = max_batch_size // tt_data_parallel
        """Rows per submesh (tt-metal's model_args[i].max_batch_size)."""
        self.hf = self.reference(str(hf_config._name_or_path))
        text = hf_config.get_text_config()  # a vision-language model's text_config
        self.num_layers: int = text.num_hidden_layers
        self.num_kv_heads: int = text.num_key_value_heads
        self.num_heads: int = text.num_attention_heads
        self.head_dim: int = getattr(text, "head_dim", None) or text.hidden_size // self.num_heads
        chips = self.submeshes[0].get_num_devices()
        self.kv_heads_chip = rules.per_chip_kv_heads(self.num_kv_heads, chips)
        self.q_heads_chip = self.num_heads * self.kv_heads_chip // self.num_kv_heads
        self.regions: list[list[list[Any]]] = []
        self.token_caches: list[Any] = []
        self.already_warmed_up_prefill = False
        """tt-metal's flag: warmup_model_prefill returns at once while it is set (P resets it)."""
        self.compiled = {"prefill": False, "decode": False}
        self.traced_prefill: set[tuple[int, int]] = set()  # (submesh, padded length) captured
        self.decode_trace: tuple[int, int] | None = None  # (batch, page-table width) captured
        self._in_warmup = False
        self._pending: dict[int, tuple[Any, torch.Tensor]] = {}  # id(output) -> (output, its logits)
        # observables for the tests
        self.rows_per_submesh = [0] * len(self.submeshes)
        """Live rows each submesh computed, prefill and decode (warmups not counted)."""
        self.warmups: list[list[Any]] = []
        """Each warmup call: [name, its arguments but the cache]."""
        self.prefill_calls: list[dict[str, Any]] = []
        """Each prefill: prompt_lens, start_pos as given, start_pos floored, empty_slots, enable_trace."""
        self.decode_calls = 0
        self.traces: list[list[Any]] = []
        """What tt-metal would capture: ["prefill", submesh, padded length] / ["decode", batch, width]."""

    @property
    def data_parallel(self) -> int:
        return len(self.submeshes)

    @property
    def block_size(self) -> int:
        return self.token_caches[0].block_size

    # ---- KV cache ---------------------------------------------------------------------------
    def allocate(self, kv_cache_shape: Any, dtype: Any, num_layers: int) -> list[list[list[Any]]]:
        blocks, heads, block, dim = rules.check_kv_request(
            kv_cache_shape, dtype, num_layers, layers=self.num_layers, kv_heads=self.kv_heads_chip,
            head_dim=self.head_dim)
        geometry = TTKVGeometry(num_layers, blocks, heads, block, dim)
        self.regions = [allocate_layer_caches(ttnn, submesh, geometry) for submesh in self.submeshes]
        self.token_caches = [host.TokenCache(blocks, block) for _ in self.submeshes]
        return self.regions

    def _check_cache(self, kv_cache: Any) -> None:
        require(bool(self.regions), "allocate_kv_cache must run before any forward or warmup")
        rules.same_regions(kv_cache, self.regions)

    # ---- prefill ----------------------------------------------------------------------------
    def prefill(self, tokens: Any, page_table: Any, kv_cache: Any, prompt_lens: Any, start_pos: Any,
                empty_slots: Any, enable_trace: bool) -> torch.Tensor:
        """Logits [B, 1, vocab] of each row's last token; row i computes tokens[i, s:prompt_lens[i]]
        (s: start_pos floored) on submesh empty_slots[i] // max_batch_size."""
        self._check_cache(kv_cache)
        tokens = rules.int_tensor("tokens", tokens, 2)
        table = rules.int_tensor("page_table", page_table, 2)
        rows = tokens.shape[0]
        require(table.shape[0] == rows, f"page_table has {table.shape[0]} rows for {rows} prompts")
        lens = rules.int_list("prompt_lens", [tokens.shape[1]] * rows if prompt_lens is None else prompt_lens,
                              rows)
        starts = [0] * rows if start_pos is None else rules.int_list("start_pos", start_pos, rows)
        slots = list(range(rows)) if empty_slots is None else rules.int_list("empty_slots", empty_slots, rows)
        declared = (getattr(self, "model_capabilities", None) or {}).get("resumed_prefill_token_alignment")
        floored = [rules.align_resume_offset(s, n, self.block_size, declared) if self.floors_resume_offsets
                   else s for s, n in zip(starts, lens, strict=True)]
        self.prefill_calls.append({"prompt_lens": lens, "start_pos": starts, "start_pos_floored": floored,
                                   "empty_slots": slots, "enable_trace": enable_trace})
        written: dict[tuple[int, int], int] = {}
        out = torch.zeros(rows, 1, self.hf.vocab_size)
        for i in range(rows):
            model_id = slots[i] // self.max_batch_size
            require(0 <= model_id < self.data_parallel, f"row {i}: empty_slots[{i}]={slots[i]} routes to "
                    f"submesh {model_id}; there are {self.data_parallel} of {self.max_batch_size} rows each")
            out[i, 0] = self._prefill_row(i, model_id, tokens[i].tolist(), table[i], starts[i], floored[i],
                                          lens[i], enable_trace, written)
        return out

    def _prefill_row(self, i: int, model_id: int, row: list[int], table_row: torch.Tensor, start: int, s: int,
                     length: int, enable_trace: bool, written: dict[tuple[int, int], int]) -> torch.Tensor:
        cache, block = self.token_caches[model_id], self.block_size
        rules.check_prefill_row(i, start, length, table_row.shape[0], block_size=block,
                                max_seq_len=self.max_seq_len, tokens_width=len(row))
        used = -(-length // block)
        rules.check_block_ids(f"row {i} page table", table_row[:used].tolist(), cache.num_blocks)
        bucket = rules.padded_prefill_len(length - s)
        if enable_trace:  # G _easy_trace_prefill captures a bucket it has not seen, while serving
            require((model_id, bucket) in self.traced_prefill, f"row {i}: traced prefill of padded length "
                    f"{bucket} on submesh {model_id} was never captured by warmup_model_prefill(enable_trace="
                    "True): tt-metal would capture it while serving")
        hashes = host.chain(row[:length])
        problem = host.prefix_problem(*cache.read(table_row, s), hashes[:s])
        require(problem is None, f"row {i}: the cached prefix [0, {s}) it reads (start_pos={start}, floored "
                f"to {s}) is not its tokens: {problem}; tokens must be the whole sequence and the page table "
                "its blocks")
        for slot, h in zip(cache.slots(table_row, s, length).tolist(), hashes[s:], strict=True):
            other = written.setdefault((model_id, slot), h)
            require(other == h, f"row {i}: slot {slot} on submesh {model_id} is written by two rows of one "
                    "prefill")
        cache.write(table_row, s, row[s:length], hashes[s:])
        # the suffix's KV through its blocks: [1, used - s // block] of the row's page table
        ops.fill_row(ttnn, self.submeshes[model_id], self.regions[model_id],
                     table_row[None, s // block: used], length - s, self.kv_heads_chip, self.head_dim)
        self.rows_per_submesh[model_id] += 1
        logits: torch.Tensor = self.hf.prefill(row[:length], hashes[-1], **self.prefill_extras(i))
        return logits

    def prefill_extras(self, row: int) -> dict[str, Any]:
        """What the host model takes beside row `row`'s tokens in this prefill (a variant's images)."""
        return {}

    def decode_extras(self, row: int) -> dict[str, Any]:
        """What the host model takes beside batch row `row`'s token in this decode (a rope delta)."""
        return {}

    # ---- decode -----------------------------------------------------------------------------
    def decode(self, tokens: Any, start_pos: Any, page_table: Any, kv_cache: Any,
               enable_trace: bool) -> list[tuple[Any, torch.Tensor]]:
        """One step at the fixed batch, torch.chunk'ed into one chunk per submesh (G decode_forward);
        per submesh (device logits [1, 1, rows, vocab], host logits [rows, vocab], NaN on inactive rows)."""
        self._check_cache(kv_cache)
        tokens = rules.int_tensor("tokens", tokens, 2)
        positions = rules.int_tensor("start_pos", start_pos, 1)
        table = rules.int_tensor("page_table", page_table, 2)
        batch, width = tokens.shape[0], table.shape[1]
        full = self.data_parallel * self.max_batch_size
        require(tokens.shape[1] == 1, f"decode tokens must be [batch, 1], got {tuple(tokens.shape)}")
        require(batch == full and positions.shape[0] == full and table.shape[0] == full,
                f"decode runs at the fixed batch data_parallel x max_batch_size = {full} (inactive rows at "
                f"start_pos -1); got tokens {tuple(tokens.shape)}, start_pos {tuple(positions.shape)}, "
                f"page_table {tuple(table.shape)}")
        self._decode_trace_rules(enable_trace, batch, width)
        if not self._in_warmup:
            self.decode_calls += 1
        chunks = zip(torch.chunk(tokens, self.data_parallel), torch.chunk(positions, self.data_parallel),
                     torch.chunk(table, self.data_parallel), strict=True)
        return [self._decode_submesh(m, *chunk) for m, chunk in enumerate(chunks)]

    def _decode_trace_rules(self, enable_trace: bool, batch: int, width: int) -> None:
        if self._in_warmup and enable_trace:  # P warmup_model: capture only after the untraced compile
            require(self.compiled["decode"], "warmup_model_decode(enable_trace=True) before "
                    "warmup_model_decode(enable_trace=False) compiled the decode programs")
            self.decode_trace = (batch, width)
            self.traces.append(["decode", batch, width])
        elif self._in_warmup:
            self.compiled["decode"] = True
        elif enable_trace:  # G _decode_forward_trace_text captures on its first call
            require(self.decode_trace is not None, "decode_forward(enable_trace=True) with no decode trace "
                    "captured by warmup_model_decode(enable_trace=True) (a generator without warmup hooks "
                    "captures on its first traced decode): tt-metal would capture it while serving")
            require(self.decode_trace == (batch, width), f"traced decode at batch {batch}, page-table width "
                    f"{width}; the trace was captured at {self.decode_trace} (its input buffers' shape)")
        elif not self.compiled["decode"]:  # P warmup_model: a compile behind live traces can corrupt them
            require(not self.traces, "decode_forward before warmup_model_decode compiled the "
                    f"decode programs, with traces captured ({self.traces[:2]}...): tt-metal compiles them "
                    "inside this serving step, behind live traces")
            self.compiled["decode"] = True

    def _decode_submesh(self, m: int, tokens: torch.Tensor, positions: torch.Tensor,
                        table: torch.Tensor) -> tuple[Any, torch.Tensor]:
        device, cache, block = self.submeshes[m], self.token_caches[m], self.block_size
        sdpa = ops.decode_step(ttnn, device, self.regions[m], table, positions, self.q_heads_chip,
                               self.kv_heads_chip, self.head_dim)
        ttnn.deallocate(sdpa)
        logits = torch.full((tokens.shape[0], self.hf.vocab_size), float("nan"))
        written: set[int] = set()
        for r, p in enumerate(positions.tolist()):
            if p < 0:
                continue
            where = f"decode row {m * self.max_batch_size + r} (submesh {m}, row {r}) at position {p}"
            require(p < self.max_seq_len, f"{where}: past max_seq_len={self.max_seq_len}")
            require(p // block < table.shape[1], f"{where}: page table has {table.shape[1]} blocks")
            rules.check_block_ids(f"{where} page table", table[r, : p // block + 1].tolist(),
                                  cache.num_blocks)
            if self._in_warmup:  # G warmup: every row at position 0 through a zeros page table
                cache.clobber(table[r], p, p + 1)
                continue
            slot = int(cache.slots(table[r], p, p + 1)[0])
            require(slot not in written, f"{where}: slot {slot} is written by two rows of one decode")
            written.add(slot)
            context, hashes = cache.read(table[r], p)
            problem = host.context_problem(context, hashes)
            require(problem is None, f"{where}: the context it reads is not one written sequence: {problem}")
            token, before = int(tokens[r, 0]), hashes[-1] if hashes else 0
            after = hash((before, token))
            cache.write(table[r], p, [token], [after])
            logits[r] = self.hf.decode(context, token, before, after,
                                       **self.decode_extras(m * self.max_batch_size + r))
            self.rows_per_submesh[m] += 1
        out = ops.to_device(ttnn, device, logits.nan_to_num(0.0)[None, None], ttnn.bfloat16, ttnn.TILE_LAYOUT)
        return out, logits

    # ---- outputs ----------------------------------------------------------------------------
    def remember(self, output: Any, logits: torch.Tensor) -> None:
        self._pending[id(output)] = (output, logits)

    def recall(self, output: Any, what: str) -> torch.Tensor:
        """The host logits of a decode output (device tensor or its host copy), forgotten once read."""
        entry = self._pending.pop(id(output), None)
        require(entry is not None, f"{what} was given an output decode_forward did not return (or one "
                "already processed)")
        assert entry is not None
        return entry[1]

    # ---- warmup -----------------------------------------------------------------------------
    def warm_prefill(self, kv_cache: Any, enable_trace: bool, serving: bool) -> None:
        """G warmup_model_prefill's work: the prefill programs at every warmup length on every
        submesh through a zeros page table (block 0 takes what they write), or with enable_trace
        their traces (recorded, not captured). `serving`: G's prefill_forward_text runs it inside a
        serving call while already_warmed_up_prefill is False."""
        self._check_cache(kv_cache)
        require(not (serving and enable_trace), "prefill_forward_text(enable_trace=True) while "
                "already_warmed_up_prefill is False: tt-metal runs warmup_model_prefill(enable_trace=True) "
                "inside this call and captures prefill traces while serving")
        require(not (serving and self.traces and not self.compiled["prefill"]), "prefill_forward_text before "
                "warmup_model_prefill compiled the prefill programs, with traces captured: tt-metal compiles "
                "them inside this serving call, behind live traces")
        if enable_trace:  # P warmup_model: capture only after the untraced compile
            require(self.compiled["prefill"], "warmup_model_prefill(enable_trace=True) before "
                    "warmup_model_prefill(enable_trace=False) compiled the prefill programs")
        block = self.block_size
        for m, submesh in enumerate(self.submeshes):
            for length in prefill_buckets(self.max_seq_len):
                zeros = torch.zeros((1, -(-length // block)), dtype=torch.int32)
                if enable_trace:
                    self.traced_prefill.add((m, length))
                    self.traces.append(["prefill", m, length])
                else:
                    ops.fill_row(ttnn, submesh, self.regions[m], zeros, length, self.kv_heads_chip,
                                 self.head_dim)
                self.token_caches[m].clobber(zeros[0], 0, min(length, block))
        self.compiled["prefill"] = True
