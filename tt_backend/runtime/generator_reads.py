"""A decode step's outputs on their way from a tt-metal generator to the host, in the four steps
the Tenstorrent vLLM plugin takes (`async_decode.py`):

    decode_forward(read_from_device=False) ─▶ read_decode_output(async_read=True) ─▶ (host outputs,
    one event per submesh) ─▶ ttnn.event_synchronize(each) ─▶ process_decode_output_host(is_tokens)

`start` issues the non-blocking read as soon as the step is launched; `finish` waits for its
events and processes the outputs, once (a step fed back into the next is finished before that
one launches, and completed later from the same result). What the reads copied is counted
(`bytes_read`): logits are rows × vocabulary values, sampled tokens one value per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tt_backend.devices.tt.generator import TTGenerator


@dataclass
class DecodeRead:
    host_out: Any
    events: list[Any]
    slots: list[int]
    """The batch rows (lane × capacity + slot) of the step's planned rows, in row order."""
    is_tokens: bool
    result: torch.Tensor | None = field(default=None)


class DecodeReads:
    def __init__(self, ttnn: Any, generator: TTGenerator) -> None:
        self.ttnn = ttnn
        self.generator = generator
        self.bytes_read = 0
        self.reads = 0

    def start(self, device_out: Any, slots: list[int], is_tokens: bool) -> DecodeRead:
        host_out, events = self.generator.read_decode_output(device_out, async_read=True)
        return DecodeRead(host_out, list(events), slots, is_tokens)

    def finish(self, read: DecodeRead) -> torch.Tensor:
        """The planned rows' outputs: tokens [rows] (is_tokens) or logits [rows, vocab]."""
        if read.result is None:
            for event in read.events:
                self.ttnn.event_synchronize(event)
            processed = self.generator.process_decode_output_host(read.host_out, is_tokens=read.is_tokens)
            read.result = self.rows(processed, read.slots, read.is_tokens)
        return read.result

    def rows(self, processed: Any, slots: list[int], is_tokens: bool) -> torch.Tensor:
        """The planned rows of a whole batch's host outputs ((outputs, log-probs) from current
        tt-metal; the outputs alone from older generators), counting the bytes read."""
        out = torch.as_tensor(processed[0] if isinstance(processed, tuple) else processed)
        self.bytes_read += out.numel() * out.element_size()
        self.reads += 1
        index = torch.tensor(slots)
        return out.reshape(-1)[index] if is_tokens else out.reshape(out.shape[0], -1)[index]
