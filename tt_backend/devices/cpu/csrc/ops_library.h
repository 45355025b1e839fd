// Each instruction-set level's kernel library registers its ops in a namespace of its own,
// `TT_NS` (tt_backend_<level>, set by devices/cpu_kernels.py), so the libraries of several levels
// load into one process side by side.
#pragma once

#include <torch/library.h>

#ifndef TT_NS
#error "TT_NS is not set: the kernels are built by tt_backend/devices/cpu_kernels.py"
#endif

// One level of indirection, so that TT_NS expands before TORCH_LIBRARY pastes it into names.
#define TT_EXPAND_LIBRARY(kind, ns, m) kind(ns, m)
#define TT_EXPAND_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)
#define TT_LIBRARY(m) TT_EXPAND_LIBRARY(TORCH_LIBRARY, TT_NS, m)
#define TT_LIBRARY_FRAGMENT(m) TT_EXPAND_LIBRARY(TORCH_LIBRARY_FRAGMENT, TT_NS, m)
#define TT_LIBRARY_IMPL(key, m) TT_EXPAND_LIBRARY_IMPL(TT_NS, key, m)
