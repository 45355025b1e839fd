"""The finishing step the torch and the Tenstorrent engine share: tokenizer, end-of-sequence ids,
the scheduler's config and the LLMEngine over the runner."""

from __future__ import annotations

from pathlib import Path

from tt_backend.config import EngineConfig
from tt_backend.engine.engine import LLMEngine
from tt_backend.models.image_prompts import ImagePrompts
from tt_backend.runtime.step_runner import StepRunner
from tt_backend.scheduler.scheduled_step import SchedulerConfig
from tt_backend.text.tokenizer import eos_token_ids, load_tokenizer


def finish_engine(config: EngineConfig, runner: StepRunner, model_dir: Path, vocab_size: int,
                  takes_images: bool, bidirectional_images: bool = False,
                  cross_tokens_per_tile: int = 0, max_images: int | None = None) -> LLMEngine:
    """The engine over a warmed-up runner (config resolved for the model, KV capacity final); a
    failure here closes the runner (and with it the device). `takes_images`: the model's
    ModelCapabilities.takes_images (without it the engine refuses requests that bring images; with it
    the model's HF processor expands their placeholders); `cross_tokens_per_tile`: for a model that
    reads images by cross-attention (Mllama), an image tile's tokens in its cross-attention KV;
    `max_images`: the most images a request may bring to this model (None: the input limits' alone)."""
    try:
        tokenizer = load_tokenizer(model_dir)
        prompts = ImagePrompts.load(model_dir, bidirectional_images, cross_tokens_per_tile, max_images) \
            if takes_images else None
        return LLMEngine(config, SchedulerConfig.from_engine_config(config), runner, tokenizer, vocab_size,
                         eos_token_ids(model_dir, tokenizer.eos_token_id), takes_images, prompts)
    except BaseException:
        runner.close()
        raise
