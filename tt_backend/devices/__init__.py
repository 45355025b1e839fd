"""Devices: the Device protocol (allocate, copy in/out, capture, replay, synchronize, release),
the torch device (CPU, CUDA), and the CPU path's capability probe, compute plan and native kernels."""
