"""Devices: the Device protocol (device.py: allocate, copy in/out, capture, replay, synchronize,
release) and its implementations by kind: torch/ (CPU, CUDA), cpu/ (the CPU path's probe, compute
plan, kernels and linears), tt/ (the ttnn mesh and tt-metal's KV layout)."""
