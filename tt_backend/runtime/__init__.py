"""The execution toolkit: frozen runtime configs, prefill planning, program and trace registries,
the paged KV cache, eager and traced executors, output reads, warmup and cleanup, composed by
ModelRunner. It knows planned rows, slots, page tables and tokens, never requests."""
