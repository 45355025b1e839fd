"""What the scheduler hands out and takes back: its configuration, the step it scheduled (one type
for a lane's own step and for the merged step of every lane), and the tokens a step sampled."""

from __future__ import annotations

from dataclasses import dataclass

from tt_backend.config import EngineConfig
from tt_backend.contract.modes import StepMode
from tt_backend.contract.step import StepPlan
from tt_backend.scheduler.request import Request


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int
    num_blocks: int
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    decode_steps_between_prefills: int = 1
    """Decode steps owed after a prefill step that leaves a prompt partly prefilled (between the
    chunks of a long prompt), while requests are ready to decode; 0 lets prefill run until no
    prefill work can be admitted."""
    max_prefill_tokens: int = 0
    """A waiting prompt joins a prefill step with rows only if the step then holds at most this
    many tokens; 0: max_num_batched_tokens."""

    def __post_init__(self) -> None:
        if self.max_prefill_tokens == 0:
            object.__setattr__(self, "max_prefill_tokens", self.max_num_batched_tokens)

    @classmethod
    def from_engine_config(cls, config: EngineConfig) -> SchedulerConfig:
        """The scheduler's part of a config resolved for the model (per lane)."""
        assert config.num_kv_blocks is not None and config.max_model_len is not None, \
            "resolve the config for the model first"
        return cls(max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens,
                   max_model_len=config.max_model_len, block_size=config.block_size,
                   num_blocks=config.num_kv_blocks,
                   enable_chunked_prefill=bool(config.enable_chunked_prefill),
                   enable_prefix_caching=bool(config.enable_prefix_caching),
                   decode_steps_between_prefills=config.decode_steps_between_prefills,
                   max_prefill_tokens=min(config.max_prefill_tokens or config.max_num_batched_tokens,
                                          config.max_num_batched_tokens))


@dataclass(frozen=True)
class ScheduledStep:
    plan: StepPlan
    request_ids: tuple[str, ...]
    """The request of each planned row, in row order."""
    preempted: tuple[str, ...] = ()
    lanes: tuple[LaneSlice, ...] = ()
    """The lanes' own steps a merged step is made of (empty in a lane's own step)."""

    @property
    def mode(self) -> StepMode:
        return self.plan.mode


@dataclass(frozen=True)
class LaneSlice:
    lane: int
    step: ScheduledStep
    """The lane's own step, with lane-local block ids."""


@dataclass(frozen=True)
class SampledToken:
    request: Request
    token_id: int


@dataclass
class DecodeCadence:
    """After a prefill step that leaves a prompt partly prefilled, the next
    `steps_between_prefills` steps are owed to decode. A prefill step that completes every
    prompt it touched owes nothing: the next waiting request is admitted at once (owing decode
    steps there delayed every request of a burst but the first by a whole decode step)."""

    steps_between_prefills: int
    owed: int = 0

    def record(self, mode: StepMode, prompt_left_partial: bool = False) -> None:
        if mode is StepMode.PREFILL:
            self.owed = self.steps_between_prefills if prompt_left_partial else 0
        elif mode is StepMode.DECODE:
            self.owed = max(0, self.owed - 1)
