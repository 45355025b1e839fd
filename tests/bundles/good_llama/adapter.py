"""A test bundle: an adapter that serves Llama-architecture weights under its own name."""

from tt_backend.models.llama import LlamaForCausalLM


class BundleLlama(LlamaForCausalLM):
    """Our Llama core, registered from EXTRA_MODELS_DIR as BundleLlamaForCausalLM."""
