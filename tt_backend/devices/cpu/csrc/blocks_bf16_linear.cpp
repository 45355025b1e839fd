// A bf16 plan's decode rows on a GGUF's blocks (`decode_blocks`, quant_linear.cpp's
// blocks_or_packed_linear): bf16 inputs times each weight dequantized (ggml's fp32 value, quant_pairs.h)
// and rounded to bf16 (nearest, ties to even: what `.to(torch.bfloat16)` gives, so the very values of the
// bf16 weight the panels or oneDNN serve the larger calls with), multiplied in pairs by AVX512-BF16's
// vdpbf16ps into fp32 sums; the bias added in fp32 and the result rounded to bf16 once (or returned in
// fp32: the LM head's logits, panels_linear.cpp). So the plan
// computes one bf16 model whichever path a call takes; only the order of the fp32 sums differs.
//
// Each sum (r, n) runs in 16 lanes over k in pairs, then the lanes in _mm512_reduce_add_ps's order: a
// row's result does not depend on the batch it is in. Up to 4 rows, 4 columns share a pass over the
// blocks (16 sums); 5 to 8 rows, 2 columns (up to 16 sums).
#include "blocks_bf16_linear.h"

#if defined(__AVX512BF16__)
#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

#include "numerics.h"
#include "quant_k.h"
#include "quant_pairs.h"

namespace tt_quant {
namespace {

// Rows x[0 .. R) by the C weight rows w[c] (nb blocks each) into y[r * N + c] (bf16 bits or fp32, bias
// added), storing only the first `valid` columns; asks for the weight `ahead` bytes further on.
template <int64_t F, int64_t R, int64_t C, typename Out>
void bf16_group(const uint16_t* x, int64_t K, const uint8_t* const* w, int64_t nb, const float* bias,
                Out* y, int64_t N, int64_t valid, int64_t ahead) {
  constexpr int64_t B = block_bytes(F), BW = block_weights(F);
  __m512 acc[R][C];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  KScales ks[is_k(F) ? C : 1];
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (is_k(F))
      for (int64_t c = 0; c < C; ++c) k_scales<F>(w[c] + b * B, ks[c]);
    each_chunk<F>([&](auto chunk) __attribute__((always_inline)) {
      constexpr int64_t j = decltype(chunk)::value;
      if (ahead > 0 && ((b * chunks(F) + j) & 1) == 0)  // a prefetch per 64 weights
        for (int64_t c = 0; c < C; ++c) __builtin_prefetch(w[c] + b * B + j * B / chunks(F) + ahead);
      __m512bh wv[C];
      for (int64_t c = 0; c < C; ++c) {
        __m512 lo, hi;
        chunk_pair<F>(w[c] + b * B, ks[is_k(F) ? c : 0], j, lo, hi);
        wv[c] = _mm512_cvtne2ps_pbh(hi, lo);  // weights 0-15 from lo, 16-31 from hi: in k order
      }
      const int64_t k = b * BW + j * kQk;
      for (int64_t r = 0; r < R; ++r) {
        const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + r * K + k);
        for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
      }
    });
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < valid; ++c) {
      const float sum = _mm512_reduce_add_ps(acc[r][c]);
      y[r * N + c] = tt_kernels::from_float<Out>(bias != nullptr ? sum + bias[c] : sum);
    }
}

template <int64_t F, int64_t C, int64_t R, typename Out>
void rows_of(int64_t M, const uint16_t* x, int64_t K, const uint8_t* const* w, int64_t nb, const float* bias,
             Out* y, int64_t N, int64_t valid, int64_t ahead) {
  if constexpr (R > 0) {
    if (M == R) bf16_group<F, R, C>(x, K, w, nb, bias, y, N, valid, ahead);
    else rows_of<F, C, R - 1>(M, x, K, w, nb, bias, y, N, valid, ahead);
  }
}

template <int64_t F, int64_t C, typename Out>
void bf16_columns(const uint16_t* x, const uint8_t* w, const float* bias, Out* y, int64_t M, int64_t N,
                  int64_t K) {
  const int64_t nb = K / block_weights(F), row_bytes = nb * block_bytes(F);
  const int64_t groups = (N + C - 1) / C;
  const int64_t grain = std::max<int64_t>(1, 65536 / (C * row_bytes));  // ~64 KB of weights a task
  at::parallel_for(0, groups, grain, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t n0 = g * C, valid = std::min(C, N - n0);
      const uint8_t* wc[C];
      for (int64_t c = 0; c < C; ++c) wc[c] = w + std::min(n0 + c, N - 1) * row_bytes;  // the tail repeats
      rows_of<F, C, C == 4 ? 4 : kBf16MaxRows>(M, x, K, wc, nb, bias != nullptr ? bias + n0 : nullptr, y + n0,
                                               N, valid, C * row_bytes);
    }
  });
}

}  // namespace

at::Tensor bf16_blocks_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t format, int64_t K,
                              const std::optional<at::Tensor>& bias, bool fp32_out) {
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "bf16_blocks_linear: x must be bfloat16");
  const int64_t N = blocks.size(0), M = x.numel() / K;
  TORCH_CHECK(M >= 1 && M <= kBf16MaxRows, "bf16_blocks_linear: 1 to ", kBf16MaxRows, " rows, got ", M);
  at::Tensor b;
  if (bias.has_value()) b = bias->to(at::kFloat).contiguous();
  const auto xc = x.contiguous();
  auto y = at::empty({M, N}, x.options().dtype(fp32_out ? at::kFloat : at::kBFloat16));
  const auto* xp = static_cast<const uint16_t*>(xc.data_ptr());
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  const auto run = [&](auto* yp) {
    by_format(format, [&](auto f) {
      constexpr int64_t F = decltype(f)::value;
      if (M <= 4) bf16_columns<F, 4>(xp, blocks.data_ptr<uint8_t>(), bp, yp, M, N, K);
      else bf16_columns<F, 2>(xp, blocks.data_ptr<uint8_t>(), bp, yp, M, N, K);
    });
  };
  if (fp32_out) run(y.data_ptr<float>());
  else run(static_cast<uint16_t*>(y.data_ptr()));
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes);
}

}  // namespace tt_quant
#endif
