"""Sampling: SamplingParams and their validation (plain Python), the device path (token choice
inside the step) and the host path (the processor chain, logprobs)."""
