// Decode rows (up to 8) on a GGUF's 4-bit blocks repacked into panels of 16 output columns, on
// AVX512-BF16's vdpbf16ps: the dequantized fp32 weights q * d + m (Q4_0: m = -8 d), not rounded to bf16.
//
// The blocks kernel (blocks_bf16_linear.cpp) dequantizes every weight column by column, block by block,
// and rounds it to bf16 (a table lookup, conversions, a round per 32 weights), about 13 instructions per
// 32 weights: it kept pace with bf16 panels that stream 2.8x the bytes, and read its 5-bit weights at about
// half the memory bandwidth. Here a block's 32 inputs of 16 columns (`nibble_panels.nibble_panels`) are
// 256 bytes of nibbles, then the 16 columns' d and m (fp16). A nibble q becomes the bf16 128 + q by
// placing it under the high byte 0x43 (an unpack with a constant: bf16 0x43qq is 2^7 * (1 + qq / 128)),
// so 64 bytes give 4 pairs of inputs by 16 columns in 6 instructions, no conversion. Per block and column
//     sum_k x_k (q_k d + m) = d * sum_k x_k (128 + q_k) + (m - 128 d) * sum_k x_k,
// where x_k (128 + q_k) is exact in fp32 (8 by 8 significant bits) and sum_k x_k (per row and block) is
// summed once per call. Each 16 column sums of a block take one multiply-add for d and one for m - 128 d.
// The sums differ from the panels' (the bf16 weights) by the weights' rounding to bf16: these are the
// fp32 model's weights.
#include "nibble_panels.h"

#if defined(__AVX512BF16__)
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "panel_store.h"

namespace tt_nibbles {
namespace {

constexpr int64_t kPanels = 4;  // panels a task sums side by side

// y[r, n0 + 16 g + l] for r < R, g < G: x holds R rows of `pairs` input pairs, xs their sums per block
// (R x nb), w the first panel's blocks (`panel_bytes` apart); `next`, when given, the next task's
// panels, block by block fetched into L2 as this task's are summed.
template <int64_t R, int64_t G, typename Out>
void panels(const uint32_t* x, const float* xs, int64_t pairs, int64_t nb, const uint8_t* w,
            int64_t panel_bytes, const float* bias, Out* y, int64_t N, int64_t n0, const uint8_t* next) {
  const __m512i low = _mm512_set1_epi8(0x0f), tag = _mm512_set1_epi8(0x43);
  const __m512 minus128 = _mm512_set1_ps(-128.f);
  __m512 total[R][G];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < G; ++g) total[r][g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (next != nullptr)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t line = 0; line < kPanelBlockBytes; line += 64)
          __builtin_prefetch(next + g * panel_bytes + b * kPanelBlockBytes + line, 0, 2);
    __m512 acc[R][G];
    for (int64_t r = 0; r < R; ++r)
      for (int64_t g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < 4; ++j) {
      for (int64_t g = 0; g < G; ++g) {
        const __m512i v = _mm512_loadu_si512(w + g * panel_bytes + b * kPanelBlockBytes + 64 * j);
        const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        const __m512bh s[4] = {(__m512bh)_mm512_unpacklo_epi8(lo, tag), (__m512bh)_mm512_unpackhi_epi8(lo, tag),
                               (__m512bh)_mm512_unpacklo_epi8(hi, tag), (__m512bh)_mm512_unpackhi_epi8(hi, tag)};
        for (int64_t t = 0; t < 4; ++t) {
          const int64_t p = b * 16 + 4 * j + t;
          for (int64_t r = 0; r < R; ++r)
            acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)_mm512_set1_epi32(static_cast<int>(x[r * pairs + p])),
                                         s[t]);
        }
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* scales = w + g * panel_bytes + b * kPanelBlockBytes + 256;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
      const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32)));
      const __m512 c = _mm512_fmadd_ps(minus128, d, m);  // m - 128 d
      for (int64_t r = 0; r < R; ++r) {
        total[r][g] = _mm512_fmadd_ps(acc[r][g], d, total[r][g]);
        total[r][g] = _mm512_fmadd_ps(_mm512_set1_ps(xs[r * nb + b]), c, total[r][g]);
      }
    }
  }
  tt_panels::store_tile(total, bias, y, N, n0);
}

template <int64_t G, typename Out, int64_t R = kMaxRows>
void rows_panels(int64_t rows, const uint32_t* x, const float* xs, int64_t pairs, int64_t nb, const uint8_t* w,
                 int64_t panel_bytes, const float* bias, Out* y, int64_t N, int64_t n0, const uint8_t* next) {
  if constexpr (R > 0) {
    if (rows == R) panels<R, G>(x, xs, pairs, nb, w, panel_bytes, bias, y, N, n0, next);
    else rows_panels<G, Out, R - 1>(rows, x, xs, pairs, nb, w, panel_bytes, bias, y, N, n0, next);
  }
}

template <typename Out, int64_t G = kPanels>
void some_panels(int64_t count, int64_t rows, const uint32_t* x, const float* xs, int64_t pairs, int64_t nb,
                 const uint8_t* w, int64_t panel_bytes, const float* bias, Out* y, int64_t N, int64_t n0,
                 const uint8_t* next) {
  if constexpr (G > 0) {
    if (count == G) rows_panels<G, Out>(rows, x, xs, pairs, nb, w, panel_bytes, bias, y, N, n0, next);
    else some_panels<Out, G - 1>(count, rows, x, xs, pairs, nb, w, panel_bytes, bias, y, N, n0, next);
  }
}

// A task's `count` panels, `side` at a time (the registers hold rows x side sums twice: 4 panels side by
// side up to 2 rows, 2 up to 4, 1 beyond), `next` the next task's panels.
template <typename Out>
void task_panels(int64_t count, int64_t rows, const uint32_t* x, const float* xs, int64_t pairs, int64_t nb,
                 const uint8_t* w, int64_t panel_bytes, const float* bias, Out* y, int64_t N, int64_t n0,
                 const uint8_t* next) {
  const int64_t side = rows <= 2 ? 4 : rows <= 4 ? 2 : 1;
  for (int64_t s = 0; s < count; s += side)
    some_panels<Out>(std::min(side, count - s), rows, x, xs, pairs, nb, w + s * panel_bytes, panel_bytes, bias,
                     y, N, n0 + 16 * s, next != nullptr ? next + s * panel_bytes : nullptr);
}

template <typename Out>
void all_panels(const uint32_t* x, const float* xs, int64_t M, int64_t K, const uint8_t* w, int64_t num_panels,
                const float* bias, Out* y, int64_t N) {
  const int64_t nb = K / 32, pairs = K / 2, panel_bytes = nb * kPanelBlockBytes;
  const int64_t tasks = (num_panels + kPanels - 1) / kPanels;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t p0 = t * kPanels, count = std::min(kPanels, num_panels - p0);
      // the next task's panels (whole ones: the last task, maybe fewer, fetches none)
      const uint8_t* next = t + 2 < tasks ? w + (p0 + kPanels) * panel_bytes : nullptr;
      task_panels<Out>(count, M, x, xs, pairs, nb, w + p0 * panel_bytes, panel_bytes, bias, y, N, p0 * 16, next);
    }
  });
}

}  // namespace

at::Tensor nibble_panels_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t N,
                                const std::optional<at::Tensor>& bias, bool fp32_out) {
  const int64_t K = x.size(-1), M = x.numel() / std::max<int64_t>(K, 1), num_panels = (N + 15) / 16;
  TORCH_CHECK(M >= 1 && M <= kMaxRows, "nibble_panels_linear: 1 to ", kMaxRows, " rows, got ", M);
  TORCH_CHECK(K % 32 == 0 && blocks.scalar_type() == at::kByte && blocks.is_contiguous() &&
                  blocks.numel() == num_panels * (K / 32) * kPanelBlockBytes,
              "nibble_panels_linear: blocks must be contiguous uint8 [", num_panels, ", ", K / 32, ", ",
              kPanelBlockBytes, "]");
  at::Tensor b;
  if (bias.has_value()) b = bias->to(at::kFloat).contiguous();
  const at::Tensor xc = x.reshape({M, K}).contiguous();
  const auto* xp = static_cast<const uint16_t*>(xc.data_ptr());
  const int64_t nb = K / 32;
  std::vector<float> xs(M * nb);  // each row's inputs summed per block, in k order
  for (int64_t r = 0; r < M; ++r)
    for (int64_t blk = 0; blk < nb; ++blk) {
      float sum = 0.f;
      for (int64_t k = 0; k < 32; ++k) {
        uint32_t bits = static_cast<uint32_t>(xp[r * K + blk * 32 + k]) << 16;
        float v;
        std::memcpy(&v, &bits, sizeof(v));
        sum += v;
      }
      xs[r * nb + blk] = sum;
    }
  auto y = at::empty({M, N}, x.options().dtype(fp32_out ? at::kFloat : at::kBFloat16));
  const auto* x32 = reinterpret_cast<const uint32_t*>(xp);
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  if (fp32_out) all_panels(x32, xs.data(), M, K, blocks.data_ptr<uint8_t>(), num_panels, bp, y.data_ptr<float>(), N);
  else all_panels(x32, xs.data(), M, K, blocks.data_ptr<uint8_t>(), num_panels, bp,
                  static_cast<uint16_t*>(y.data_ptr()), N);
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes);
}

}  // namespace tt_nibbles
#endif
