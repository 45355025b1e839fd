"""The CPU path of the torch device: the instruction-set probe, the compute plan (dtypes and which
implementation each op takes), the native C++ kernels and the packed linear layers."""
