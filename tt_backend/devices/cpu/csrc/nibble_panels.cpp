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
//
// Q8_0 (w = q d, q an int8) takes the same path: its byte 128 + q = 16 h + l is split into its nibbles
// like a 4-bit byte, the low nibble's bf16 128 + l multiplying x and the high one's 128 + h multiplying
// 16 x (exact in bf16), so a block's dot products sum x (128 + l) + 16 x (128 + h) = x q + 2304 x, and
//     sum_k x_k q_k d = d * (that sum) - 2304 d * sum_k x_k      (2304 d exact in fp32).
// 64 bytes give 2 pairs of inputs by 16 columns, in 4 dot products; 544 bytes a panel-block (the file's 34
// bytes per 32 weights): 512 bytes of 128 + q, then the 16 columns' d (fp16).
#include "nibble_panels.h"

#if defined(__AVX512BF16__)
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "numerics.h"
#include "panel_store.h"

namespace tt_nibbles {
namespace {

constexpr int64_t kPanels = 4;  // panels a task sums side by side, at most

// A panel-block's layout: its bytes, the 64-byte loads that hold its 16 pairs of inputs, and where its
// scales start.
template <bool Q8>
struct Layout {
  static constexpr int64_t kBytes = Q8 ? kBytePanelBlockBytes : kPanelBlockBytes;
  static constexpr int64_t kLoads = Q8 ? 8 : 4;
  static constexpr int64_t kScales = Q8 ? 512 : 256;
};

// y[r, n0 + 16 g + l] for r < R, g < G: x holds R rows of `pairs` input pairs (x16 the same times 16, for
// Q8), xs their sums per block (R x nb), w the first panel's blocks (`panel_bytes` apart); `next`, when
// given, the next task's panels, block by block fetched into L2 as this task's are summed.
template <int64_t R, int64_t G, bool Q8, typename Out>
void panels(const uint32_t* x, const uint32_t* x16, const float* xs, int64_t pairs, int64_t nb, const uint8_t* w,
            int64_t panel_bytes, const float* bias, Out* y, int64_t N, int64_t n0, const uint8_t* next) {
  using L = Layout<Q8>;
  const __m512i low = _mm512_set1_epi8(0x0f), tag = _mm512_set1_epi8(0x43);
  const __m512 offset = _mm512_set1_ps(Q8 ? -2304.f : -128.f);
  __m512 total[R][G];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < G; ++g) total[r][g] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (next != nullptr)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t line = 0; line < L::kBytes; line += 64)
          __builtin_prefetch(next + g * panel_bytes + b * L::kBytes + line, 0, 2);
    if (b + 3 < nb)  // and this task's own, 3 blocks ahead (a thread's first task has nothing fetched):
      // the default model's 30 layers at 1 row, cold, 4 runs alternating, 2.78-2.99 against 2.88-3.03 ms
      for (int64_t g = 0; g < G; ++g)
        for (int64_t line = 0; line < L::kBytes; line += 64)
          __builtin_prefetch(w + g * panel_bytes + (b + 3) * L::kBytes + line, 0, 2);
    __m512 acc[R][G];
    for (int64_t r = 0; r < R; ++r)
      for (int64_t g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < L::kLoads; ++j) {
      for (int64_t g = 0; g < G; ++g) {
        const __m512i v = _mm512_loadu_si512(w + g * panel_bytes + b * L::kBytes + 64 * j);
        const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        const __m512bh s[4] = {(__m512bh)_mm512_unpacklo_epi8(lo, tag), (__m512bh)_mm512_unpackhi_epi8(lo, tag),
                               (__m512bh)_mm512_unpacklo_epi8(hi, tag), (__m512bh)_mm512_unpackhi_epi8(hi, tag)};
        for (int64_t t = 0; t < 4; ++t) {
          // 4-bit: four pairs; Q8: two, each by its low nibbles (x) and its high ones (16 x)
          const int64_t p = Q8 ? b * 16 + 2 * j + t % 2 : b * 16 + 4 * j + t;
          const uint32_t* xt = Q8 && t >= 2 ? x16 : x;
          for (int64_t r = 0; r < R; ++r)
            acc[r][g] = _mm512_dpbf16_ps(acc[r][g], (__m512bh)_mm512_set1_epi32(static_cast<int>(xt[r * pairs + p])),
                                         s[t]);
        }
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* scales = w + g * panel_bytes + b * L::kBytes + L::kScales;
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
      __m512 c = _mm512_mul_ps(offset, d);  // Q8: -2304 d
      if constexpr (!Q8)  // m - 128 d
        c = _mm512_fmadd_ps(offset, d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32))));
      for (int64_t r = 0; r < R; ++r) {
        total[r][g] = _mm512_fmadd_ps(acc[r][g], d, total[r][g]);
        total[r][g] = _mm512_fmadd_ps(_mm512_set1_ps(xs[r * nb + b]), c, total[r][g]);
      }
    }
  }
  tt_panels::store_tile(total, bias, y, N, n0);
}

// The arguments every task shares.
struct Call {
  const uint32_t* x;
  const uint32_t* x16;
  const float* xs;
  int64_t rows, pairs, nb;
  const float* bias;
  int64_t N;
};

template <int64_t G, bool Q8, typename Out, int64_t R = kMaxRows>
void rows_panels(const Call& c, const uint8_t* w, int64_t panel_bytes, Out* y, int64_t n0, const uint8_t* next) {
  if constexpr (R > 0) {
    if (c.rows == R) panels<R, G, Q8>(c.x, c.x16, c.xs, c.pairs, c.nb, w, panel_bytes, c.bias, y, c.N, n0, next);
    else rows_panels<G, Q8, Out, R - 1>(c, w, panel_bytes, y, n0, next);
  }
}

template <bool Q8, typename Out, int64_t G = kPanels>
void some_panels(int64_t count, const Call& c, const uint8_t* w, int64_t panel_bytes, Out* y, int64_t n0,
                 const uint8_t* next) {
  if constexpr (G > 0) {
    if (count == G) rows_panels<G, Q8, Out>(c, w, panel_bytes, y, n0, next);
    else some_panels<Q8, Out, G - 1>(count, c, w, panel_bytes, y, n0, next);
  }
}

// A task's `count` panels, `side` at a time (the registers hold rows x side sums twice: 4 panels side by
// side up to 2 rows, 2 up to 4, 1 beyond), `next` the next task's panels.
template <bool Q8, typename Out>
void task_panels(int64_t count, const Call& c, const uint8_t* w, int64_t panel_bytes, Out* y, int64_t n0,
                 const uint8_t* next) {
  const int64_t side = c.rows <= 2 ? 4 : c.rows <= 4 ? 2 : 1;
  for (int64_t s = 0; s < count; s += side)
    some_panels<Q8, Out>(std::min(side, count - s), c, w + s * panel_bytes, panel_bytes, y, n0 + 16 * s,
                         next != nullptr ? next + s * panel_bytes : nullptr);
}

// Panels per task, 4, 3 or 2: the fewest panels on the busiest of `threads` threads, each taking a
// contiguous share of the tasks (at::parallel_for), then the most per task. The default model's 36 and 60
// panel layers (576 and 960 columns) took 5 and 8 tasks of 4 against 4 and 7 on 2 threads.
int64_t panels_per_task(int64_t num_panels, int64_t threads) {
  int64_t best = kPanels, least = -1;
  for (int64_t size = kPanels; size >= 2; --size) {
    const int64_t tasks = (num_panels + size - 1) / size;
    const int64_t busiest = std::min(num_panels, (tasks + threads - 1) / threads * size);
    if (least < 0 || busiest < least) best = size, least = busiest;
  }
  return best;
}

template <bool Q8, typename Out>
void all_panels(const Call& c, const uint8_t* w, int64_t num_panels, Out* y) {
  const int64_t panel_bytes = c.nb * Layout<Q8>::kBytes;
  const int64_t size = panels_per_task(num_panels, at::get_num_threads());
  const int64_t tasks = (num_panels + size - 1) / size;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t p0 = t * size, count = std::min(size, num_panels - p0);
      // the next task's panels (whole ones: the last task, maybe fewer, fetches none)
      const uint8_t* next = t + 2 < tasks ? w + (p0 + size) * panel_bytes : nullptr;
      task_panels<Q8, Out>(count, c, w + p0 * panel_bytes, panel_bytes, y, p0 * 16, next);
    }
  });
}

}  // namespace

at::Tensor nibble_panels_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t format, int64_t N,
                                const std::optional<at::Tensor>& bias, bool fp32_out) {
  const bool q8 = format == kBytePanels;
  TORCH_CHECK(q8 || format == kNibblePanels, "nibble_panels_linear: format ", format, " is neither ",
              kNibblePanels, " nor ", kBytePanels);
  const int64_t K = x.size(-1), M = x.numel() / std::max<int64_t>(K, 1), num_panels = (N + 15) / 16;
  const int64_t block_bytes = q8 ? kBytePanelBlockBytes : kPanelBlockBytes;
  TORCH_CHECK(M >= 1 && M <= kMaxRows, "nibble_panels_linear: 1 to ", kMaxRows, " rows, got ", M);
  TORCH_CHECK(K % 32 == 0 && blocks.scalar_type() == at::kByte && blocks.is_contiguous() &&
                  blocks.numel() == num_panels * (K / 32) * block_bytes,
              "nibble_panels_linear: blocks must be contiguous uint8 [", num_panels, ", ", K / 32, ", ",
              block_bytes, "]");
  at::Tensor b;
  if (bias.has_value()) b = bias->to(at::kFloat).contiguous();
  // a decode call's fixed cost is a part of its time (a 576 x 576 layer reads 207 KB in ~7 us): no
  // reshape, copy or view where the input is contiguous already, and the output made in its shape
  const at::Tensor xc = x.is_contiguous() ? x : x.contiguous();
  const auto* xp = static_cast<const uint16_t*>(xc.data_ptr());
  const int64_t nb = K / 32;
  // each row's inputs summed per block (16 lanes of 2, then the lanes in a fixed order); with Q8, the
  // inputs times 16 (exact: an exponent 4 higher)
  std::vector<float> xs(M * nb);
  std::vector<uint16_t> x16(q8 ? M * K : 0);
  const __m512 sixteen = _mm512_set1_ps(16.f);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t blk = 0; blk < nb; ++blk) {
      const uint16_t* in = xp + r * K + blk * 32;
      const __m512 a = tt_kernels::load_bf16x16(in), c = tt_kernels::load_bf16x16(in + 16);
      xs[r * nb + blk] = _mm512_reduce_add_ps(_mm512_add_ps(a, c));
      if (q8) {
        uint16_t* out = x16.data() + r * K + blk * 32;
        tt_kernels::store_bf16x16(out, _mm512_mul_ps(a, sixteen));
        tt_kernels::store_bf16x16(out + 16, _mm512_mul_ps(c, sixteen));
      }
    }
  c10::SmallVector<int64_t, 4> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = N;
  auto y = at::empty(sizes, x.options().dtype(fp32_out ? at::kFloat : at::kBFloat16));
  const Call c{reinterpret_cast<const uint32_t*>(xp), reinterpret_cast<const uint32_t*>(x16.data()), xs.data(), M,
               K / 2, nb, b.defined() ? b.data_ptr<float>() : nullptr, N};
  const uint8_t* w = blocks.data_ptr<uint8_t>();
  if (fp32_out) {
    if (q8) all_panels<true>(c, w, num_panels, y.data_ptr<float>());
    else all_panels<false>(c, w, num_panels, y.data_ptr<float>());
  } else {
    auto* out = static_cast<uint16_t*>(y.data_ptr());
    if (q8) all_panels<true>(c, w, num_panels, out);
    else all_panels<false>(c, w, num_panels, out);
  }
  return y;
}

}  // namespace tt_nibbles
#endif
