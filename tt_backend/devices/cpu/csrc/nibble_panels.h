// GGUF weights (Q4_0, Q4_1: 4-bit; Q8_0: 8-bit, split into its two nibbles) repacked into panels of 16
// output columns for decode rows on AVX512-BF16 (nibble_panels.cpp); the layouts are the ones
// `nibble_panels.nibble_panels` (Python) builds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace tt_nibbles {

constexpr int64_t kNibblePanels = 100;  // panels_linear's `format` of 4-bit blocks in this layout
constexpr int64_t kBytePanels = 101;  // of Q8_0 blocks
constexpr int64_t kPanelBlockBytes = 320;  // 4-bit: one panel (16 columns) by one block (32 inputs): 256 + 32 + 32
constexpr int64_t kBytePanelBlockBytes = 544;  // Q8_0: 512 + 32
constexpr int64_t kMaxRows = 8;  // rows one call takes

#if defined(__AVX512BF16__)
// x [M, K] bf16 (M <= kMaxRows) @ W.T (+ bias) -> [M, N] fp32 (fp32_out) or bf16; `blocks` [ceil(N / 16),
// K / 32, kPanelBlockBytes] uint8 (format kNibblePanels) or [.., kBytePanelBlockBytes] (kBytePanels).
at::Tensor nibble_panels_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t format, int64_t N,
                                const std::optional<at::Tensor>& bias, bool fp32_out);
#endif

}  // namespace tt_nibbles
