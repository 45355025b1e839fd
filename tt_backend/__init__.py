"""The TT LLM backend for Triton: an engine importable and testable without Triton, and the Triton
models over it (`triton/`). Layers, top to bottom: triton, engine, scheduler, runtime, sampling,
models, devices; `text`, `config` and `contract` below them all (see the README's architecture)."""
