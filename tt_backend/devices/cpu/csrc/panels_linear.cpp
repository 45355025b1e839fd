// bf16 inputs times a bf16 weight held in panels, on AVX512-BF16's vdpbf16ps with fp32 sums: the linear
// layers of a bf16 plan at avx512_bf16 (`panels.PanelsLinear`), rounded to bf16 once, and its LM head,
// returned in fp32 (the logits: oneDNN's bf16 linear rounded them to bf16, whose spacing at a logit of 25
// is 0.125, so two top logits closer than that tied and greedy decoding took whichever came first in
// the vocabulary: "What is the capital of France?" answered "L'..." where the fp32 model, 0.08 apart,
// says "The capital ...").
//
// The weight is held in panels of 16 output columns, [N / 16][K / 2][16][2] (`panels.panels`): one
// 64-byte load gives 16 columns by one pair of inputs, and a broadcast pair of one row's inputs times it
// adds to that row's 16 sums, one lane per column. A tile keeps kRows x kPanels of those in registers
// (24 sums, 3 weights, 1 input of 32), so each weight load serves 8 rows; while the first 8 rows of a
// group of panels are summed, the next group is fetched into L2 (the other rows find it in L2 then).
// Every sum (r, n) runs over the pairs in k order, whatever tile or batch its row is in: a row's result
// does not depend on its batch. Up to `small_rows` rows with `blocks` (a GGUF's, decode_blocks), the
// blocks are read instead (blocks_bf16_linear.cpp): fewer bytes at decode sizes.
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "blocks_bf16_linear.h"
#include "nibble_panels.h"
#include "panel_store.h"
#include "ops_library.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace {

#if defined(__AVX512BF16__)
constexpr int64_t kRows = 8;    // input rows a tile takes
constexpr int64_t kPanels = 3;  // panels of 16 columns a tile takes

// y[r, n0 + 16 g + l] for r < R, g < G (columns past N not stored): x holds R rows of `pairs` input
// pairs, w the G panels (`panel_words` 32-bit words apart); `next`, when given, the panels to fetch into L2.
template <int64_t R, int64_t G, typename Out>
void tile(const uint32_t* x, int64_t pairs, const uint32_t* w, int64_t panel_words, const float* bias,
          Out* y, int64_t N, int64_t n0, const uint32_t* next) {
  __m512 acc[R][G];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh wv[G];
    for (int64_t g = 0; g < G; ++g) wv[g] = (__m512bh)_mm512_loadu_si512(w + g * panel_words + p * 16);
    if (next != nullptr)
      for (int64_t g = 0; g < kPanels; ++g) __builtin_prefetch(next + g * panel_words + p * 16, 0, 2);
    for (int64_t r = 0; r < R; ++r) {
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[r * pairs + p]));
      for (int64_t g = 0; g < G; ++g) acc[r][g] = _mm512_dpbf16_ps(acc[r][g], xv, wv[g]);
    }
  }
  tt_panels::store_tile(acc, bias, y, N, n0);
}

template <int64_t G, typename Out, int64_t R = kRows>
void rows_tile(int64_t rows, const uint32_t* x, int64_t pairs, const uint32_t* w, int64_t panel_words,
               const float* bias, Out* y, int64_t N, int64_t n0, const uint32_t* next) {
  if constexpr (R > 0) {
    if (rows == R) tile<R, G>(x, pairs, w, panel_words, bias, y, N, n0, next);
    else rows_tile<G, Out, R - 1>(rows, x, pairs, w, panel_words, bias, y, N, n0, next);
  }
}

template <typename Out, int64_t G = kPanels>
void panels_tile(int64_t panels, int64_t rows, const uint32_t* x, int64_t pairs, const uint32_t* w,
                 int64_t panel_words, const float* bias, Out* y, int64_t N, int64_t n0, const uint32_t* next) {
  if constexpr (G > 0) {
    if (panels == G) rows_tile<G, Out>(rows, x, pairs, w, panel_words, bias, y, N, n0, next);
    else panels_tile<Out, G - 1>(panels, rows, x, pairs, w, panel_words, bias, y, N, n0, next);
  }
}

template <typename Out>
void panels_rows(const uint32_t* x, int64_t M, int64_t pairs, const uint32_t* w, int64_t num_panels,
                 const float* bias, Out* y, int64_t N) {
  const int64_t panel_words = pairs * 16;
  const int64_t groups = (num_panels + kPanels - 1) / kPanels;
  at::parallel_for(0, groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t p0 = g * kPanels, panels = std::min(kPanels, num_panels - p0);
      const uint32_t* next = g + 1 < groups ? w + (p0 + kPanels) * panel_words : nullptr;
      for (int64_t r0 = 0; r0 < M; r0 += kRows)
        panels_tile(panels, std::min(kRows, M - r0), x + r0 * pairs, pairs, w + p0 * panel_words, panel_words,
                    bias, y + r0 * N, N, p0 * 16, r0 == 0 ? next : nullptr);
    }
  });
}
#endif

// x [..., K] bf16 @ W.T (+ bias) -> [..., N] bf16 (fp32 with fp32_out), W [N, K] held as `panels`, and as
// `blocks` of `format` (a GGUF's) for calls of up to `small_rows` rows when given.
at::Tensor panels_linear(const at::Tensor& x, const at::Tensor& panels, int64_t N,
                         const std::optional<at::Tensor>& blocks, int64_t format,
                         const std::optional<at::Tensor>& bias, int64_t small_rows, bool fp32_out) {
#if defined(__AVX512BF16__)
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "panels_linear: x must be bfloat16, got ", x.scalar_type());
  const int64_t K = x.size(-1), pairs = (K + 1) / 2, M = x.numel() / std::max<int64_t>(K, 1);
  const int64_t num_panels = (N + 15) / 16;
  TORCH_CHECK(panels.scalar_type() == at::kBFloat16 && panels.is_contiguous() &&
                  panels.numel() == num_panels * pairs * 32,
              "panels_linear: panels must be contiguous bfloat16 [", num_panels, ", ", pairs, ", 16, 2]");
  at::Tensor b;
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == N, "panels_linear: the bias must have ", N, " elements");
    b = bias->to(at::kFloat).contiguous();
  }
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  if (blocks.has_value() && M >= 1 && M <= small_rows) {
    // blocks repacked (nibble_panels.cpp)
    const bool nibbles = format == tt_nibbles::kNibblePanels || format == tt_nibbles::kBytePanels;
    if (nibbles && M <= tt_nibbles::kMaxRows)
      return tt_nibbles::nibble_panels_linear(x, *blocks, format, N, bias, fp32_out);
    if (!nibbles && M <= tt_quant::kBf16MaxRows)
      return tt_quant::bf16_blocks_linear(x, *blocks, format, K, bias, fp32_out).view(sizes);
  }
  at::Tensor xc = x.reshape({M, K}).contiguous();
  if (K % 2) xc = at::constant_pad_nd(xc, {0, 1});  // the last pair's second input is 0 (its weight too)
  auto y = at::empty({M, N}, x.options().dtype(fp32_out ? at::kFloat : at::kBFloat16));
  const auto* xp = static_cast<const uint32_t*>(xc.data_ptr());
  const auto* wp = static_cast<const uint32_t*>(panels.data_ptr());
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  if (M > 0 && fp32_out) panels_rows(xp, M, pairs, wp, num_panels, bp, y.data_ptr<float>(), N);
  else if (M > 0) panels_rows(xp, M, pairs, wp, num_panels, bp, static_cast<uint16_t*>(y.data_ptr()), N);
  return y.view(sizes);
#else
  (void)x, (void)panels, (void)N, (void)blocks, (void)format, (void)bias, (void)small_rows, (void)fp32_out;
  TORCH_CHECK(false, "panels_linear runs on AVX512-BF16 (the avx512_bf16 and amx libraries)");
#endif
}

}  // namespace

TT_LIBRARY_FRAGMENT(m) {
  m.def("panels_linear(Tensor x, Tensor panels, int out_features, Tensor? blocks, int format, Tensor? bias, "
        "int small_rows, bool fp32_out) -> Tensor");
}

TT_LIBRARY_IMPL(CPU, m) { m.impl("panels_linear", &panels_linear); }
