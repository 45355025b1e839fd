// bf16 inputs times a GGUF's blocks rounded to bf16, on AVX512-BF16 dot products (blocks_bf16_linear.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace tt_quant {

constexpr int64_t kBf16MaxRows = 8;  // rows one call takes (decode batches); more go to panels or oneDNN

#if defined(__AVX512BF16__)
// y [M, N] bf16 (fp32 with fp32_out) = x [M, K] bf16 @ bf16(W).T (+ bias), W the fp32 weights `blocks`
// hold; M <= kBf16MaxRows.
at::Tensor bf16_blocks_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t format, int64_t K,
                              const std::optional<at::Tensor>& bias, bool fp32_out = false);
#endif

}  // namespace tt_quant
