"""The torch device (CPU by default, CUDA when present): allocation, capture (TorchScript traces on
the CPU, CUDA graphs), asynchronous launches and reads."""
