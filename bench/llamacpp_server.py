"""`python -m llama_cpp.server` with llama.cpp's extra CPU buffer types off (`use_extra_bufts=false`,
what llama.cpp's own `llama-server --no-repack` sets; llama-cpp-python's server has no setting for it).

Why: on a CPU with AMX (an Intel machine: AMX_INT8 in llama.cpp's system info) the weights went to the
AMX buffer type ("AMX model buffer size = 95.34 MiB": the 210 Q4_1 layers of the default model), and
the first decode crashed in `ggml_backend_amx_mul_mat` (SIGSEGV; gdb backtrace taken there with
llama-cpp-python 0.3.36; upstream llama.cpp issue #20824, open without a fix). Without AMX it changes
nothing for the default model: llama.cpp's other extra buffer type, REPACK, takes on x86 only Q4_0,
Q4_K, IQ4_NL and MXFP4 (ggml-cpu/repack.cpp), so the Q4_1 layers and the Q8_0 token embedding stay on
the plain CPU buffer either way (checked on an AMD AVX2 machine: "CPU_Mapped model buffer size = 92.10
MiB" with and without, the default only adding "cannot be used with preferred buffer type CPU_REPACK"
for all 273 tensors). Runs in .venv-llamacpp's python; its arguments are the server's.
"""

from __future__ import annotations

import runpy
from typing import Any

import llama_cpp.llama_cpp as lib  # the ctypes layer llama_cpp.Llama takes its default params from

_defaults = lib.llama_model_default_params


def _without_extra_buffers() -> Any:
    params = _defaults()
    params.use_extra_bufts = False
    return params


lib.llama_model_default_params = _without_extra_buffers
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
