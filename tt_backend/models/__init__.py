"""Models: the architecture registry (TT prefix, bundles from `extra_models_dir`), checkpoint and
weight loading (safetensors, GGUF), and the torch Llama family."""
