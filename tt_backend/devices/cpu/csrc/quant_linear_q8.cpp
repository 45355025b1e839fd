// quant_linear_q8: a linear layer over GGUF blocks with int8 activations, llama.cpp's scheme
// (ggml-cpu's vec_dot_q*_q8_*: the activations quantized per 32, integer dot products per block, one
// float multiply-add per block), against quant_linear's exact fp32 sums of the dequantized weights.
//
// Activations: each row's 32 consecutive inputs x get dx = max|x| / 127 and qx = round(x * (1 / dx))
// (to nearest, ties to even; all zero when max|x| is 0), so |qx| <= 127; sx_lo, sx_hi: the sums of qx
// over inputs 0-15 and 16-31. Unlike ggml, dx stays fp32 (ggml's q8_0 rounds it to fp16).
// Weights: each chunk of 32 weights (a block, or a K super-block's sub-block) is w = a * (u - o) + b,
// u its unsigned integer quants (ggml's layouts, csrc/quant_k.h), o a fixed offset (Q4_0 8, Q5_0 16,
// Q6_K 32, else 0), a its scale (Q6_K: a_lo for weights 0-15, a_hi for 16-31), b its min (Q4_1, Q5_1:
// m; Q4_K, Q5_K: -dmin * m_j; else 0). Q8_0's signed quants take u = q, o = 0.
//
// Per chunk, in integers (exact): i_h = sum_h u * qx - o * sx_h (h = lo, hi); then in fp32, rounding
// after each operation:
//   Q6_K:   t = dx * (a_lo * i_lo + a_hi * i_hi)
//   b != 0: t = dx * (a * (i_lo + i_hi) + b * (sx_lo + sx_hi))
//   else:   t = dx * (a * (i_lo + i_hi))
// and y = (((t_0 + t_1) + t_2) + ...) + bias, the chunks in order. Every level computes those same
// operations (the AVX2 path four columns at a time in SSE lanes), so its results equal the portable
// path's and torch's (tests/unit/q8_reference.py) bit for bit, and a row's result does not depend on
// the batch it is in.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/Functions.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <vector>

#include "numerics.h"
#include "ops_library.h"
#include "quant_k.h"

namespace {

using namespace tt_quant;
constexpr int64_t kCols = 4;  // output columns computed together
constexpr int64_t kRows = 4;  // input rows per pass over a column group's weights

// A row's int8 activations: q [K], d [K / 32], s [K / 16] (the sums of each 16).
struct Q8Rows {
  const int8_t* q;
  const float* d;
  const int32_t* s;
};

void quantize_row(const float* x, int64_t K, int8_t* q, float* d, int32_t* s) {
  for (int64_t b = 0; b < K / kQk; ++b) {
    const float* xb = x + b * kQk;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
    d[b] = db;
    for (int64_t h = 0; h < 2; ++h) {
      int32_t sum = 0;
      for (int64_t j = 16 * h; j < 16 * h + 16; ++j) {
        const int v = static_cast<int>(std::nearbyint(xb[j] * id));
        q[b * kQk + j] = static_cast<int8_t>(v);
        sum += v;
      }
      s[2 * b + h] = sum;
    }
  }
}

constexpr int offset(int64_t f) { return f == kQ4_0 ? 8 : f == kQ5_0 ? 16 : f == kQ6_K ? 32 : 0; }
constexpr bool has_min(int64_t f) { return f == kQ4_1 || f == kQ5_1 || f == kQ4_K || f == kQ5_K; }

// Chunk j's multipliers: a_lo, a_hi, b (a_lo == a_hi but in Q6_K).
template <int64_t F>
inline Scale chunk_scale(const uint8_t* blk, const KScales& ks, int64_t j) {
  if constexpr (is_k(F)) {
    const Scale s = k_scale<F>(ks, j);
    return {s.lo, s.hi, -s.min};
  } else {
    const float a = half_at(blk);
    return {a, a, has_min(F) ? half_at(blk + 2) : 0.0f};
  }
}

// The fp32 term of one chunk from its integer sums (the formula above).
template <int64_t F>
inline float chunk_term(float dx, const Scale& s, int32_t i_lo, int32_t i_hi, int32_t sx) {
  if constexpr (F == kQ6_K) return dx * (s.lo * static_cast<float>(i_lo) + s.hi * static_cast<float>(i_hi));
  else if constexpr (has_min(F)) return dx * (s.lo * static_cast<float>(i_lo + i_hi) + s.min * static_cast<float>(sx));
  else return dx * (s.lo * static_cast<float>(i_lo + i_hi));
}

// u (Q8_0: the signed q) of the 32 weights of chunk j, in order.
template <int64_t F>
inline void chunk_quants(const uint8_t* blk, int64_t j, int32_t* u) {
  if constexpr (is_k(F)) {
    const Bits t = k_bits<F>(j);
    for (int64_t l = 0; l < kQk; ++l) u[l] = k_quant<F>(blk, t, l) + offset(F);
  } else if constexpr (F == kQ8_0) {
    for (int64_t l = 0; l < kQk; ++l) u[l] = static_cast<int8_t>(blk[2 + l]);
  } else {
    const uint8_t* qs = blk + (F == kQ4_0 ? 2 : F == kQ4_1 ? 4 : F == kQ5_0 ? 6 : 8);
    uint32_t qh = 0;
    if constexpr (is_q5(F)) std::memcpy(&qh, qs - 4, sizeof(qh));
    for (int64_t l = 0; l < kQk; ++l)
      u[l] = (l < 16 ? qs[l] & 15 : qs[l - 16] >> 4) | static_cast<int32_t>(((qh >> l) & 1) << 4);
  }
}

#ifdef TT_AVX2
// The 32 unsigned quants of chunk j as bytes (Q8_0: its signed bytes).
template <int64_t F>
inline __m256i chunk_bytes(const uint8_t* blk, int64_t j) {
  const __m256i low4 = _mm256_set1_epi8(15);
  if constexpr (is_k(F)) {
    const Bits t = k_bits<F>(j);
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + t.low));
    __m256i u = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(t.nibble)), low4);
    if constexpr (F != kQ4_K) {
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + t.high));
      const __m256i bits = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(t.shift)),
                                            _mm256_set1_epi8(F == kQ5_K ? 1 : 3));
      u = _mm256_or_si256(u, _mm256_slli_epi16(bits, 4));  // bits < 4: the shift stays in its byte
    }
    return u;
  } else if constexpr (F == kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {
    const uint8_t* qs = blk + (F == kQ4_0 ? 2 : F == kQ4_1 ? 4 : F == kQ5_0 ? 6 : 8);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
    if constexpr (is_q5(F)) {  // byte l gets 16 where bit l of qh is set
      uint32_t qh;
      std::memcpy(&qh, qs - 4, sizeof(qh));
      const __m256i spread = _mm256_shuffle_epi8(  // byte l: byte l / 8 of qh
          _mm256_set1_epi32(static_cast<int>(qh)),
          _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
      const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));  // 1 << (l % 8)
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
      u = _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
    return u;
  }
}

// 8 int32 partial sums of u . qx: lanes 0-3 over weights 0-15, lanes 4-7 over 16-31.
template <int64_t F>
inline __m256i dot_lanes(__m256i u, __m256i qx) {
  if constexpr (F == kQ8_0) {  // |q| as the unsigned operand, q's sign moved onto qx
    qx = _mm256_sign_epi8(qx, u);
    u = _mm256_abs_epi8(u);
  }
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, qx);
#else  // pairs of products stay below 2 * 128 * 127 < 2^15: maddubs never saturates
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, qx), _mm256_set1_epi16(1));
#endif
}

// Asks for the weight `ahead` bytes further on (the next group's rows, as quant_linear does): without it
// the blocks stream from memory at about half the rate.
template <int64_t F, int64_t R, int64_t C>
inline void group(const Q8Rows* x, const uint8_t* const* w, int64_t nb, float (*out)[kCols], int64_t ahead) {
  constexpr int64_t B = block_bytes(F);
  __m128 acc[R];
  for (int64_t r = 0; r < R; ++r) acc[r] = _mm_setzero_ps();
  KScales ks[is_k(F) ? C : 1];
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (is_k(F))
      for (int64_t c = 0; c < C; ++c) k_scales<F>(w[c] + b * B, ks[c]);
    each_chunk<F>([&](auto chunk) __attribute__((always_inline)) {
      constexpr int64_t j = decltype(chunk)::value;
      const int64_t k = b * chunks(F) + j;  // the activation block
      if (ahead > 0 && (k & 1) == 0)  // a prefetch per 64 weights
        for (int64_t c = 0; c < C; ++c) __builtin_prefetch(w[c] + b * B + j * B / chunks(F) + ahead);
      __m256i u[kCols];
      float alo[kCols] = {}, ahi[kCols] = {}, bm[kCols] = {};
      for (int64_t c = 0; c < C; ++c) {
        u[c] = chunk_bytes<F>(w[c] + b * B, j);
        const Scale s = chunk_scale<F>(w[c] + b * B, ks[is_k(F) ? c : 0], j);
        alo[c] = s.lo, ahi[c] = s.hi, bm[c] = s.min;
      }
      for (int64_t c = C; c < kCols; ++c) u[c] = _mm256_setzero_si256();
      const __m128 a_lo = _mm_loadu_ps(alo), a_hi = _mm_loadu_ps(ahi), b_m = _mm_loadu_ps(bm);
      for (int64_t r = 0; r < R; ++r) {
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r].q + k * kQk));
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(dot_lanes<F>(u[0], qx), dot_lanes<F>(u[1], qx)),
                                            _mm256_hadd_epi32(dot_lanes<F>(u[2], qx), dot_lanes<F>(u[3], qx)));
        __m128i lo = _mm256_castsi256_si128(h), hi = _mm256_extracti128_si256(h, 1);  // column c in lane c
        const int32_t s_lo = x[r].s[2 * k], s_hi = x[r].s[2 * k + 1];
        if constexpr (offset(F) != 0) {
          lo = _mm_sub_epi32(lo, _mm_set1_epi32(offset(F) * s_lo));
          hi = _mm_sub_epi32(hi, _mm_set1_epi32(offset(F) * s_hi));
        }
        const __m128 dx = _mm_set1_ps(x[r].d[k]);
        __m128 t;
        if constexpr (F == kQ6_K) {
          t = _mm_add_ps(_mm_mul_ps(a_lo, _mm_cvtepi32_ps(lo)), _mm_mul_ps(a_hi, _mm_cvtepi32_ps(hi)));
        } else {
          t = _mm_mul_ps(a_lo, _mm_cvtepi32_ps(_mm_add_epi32(lo, hi)));
          if constexpr (has_min(F)) t = _mm_add_ps(t, _mm_mul_ps(b_m, _mm_set1_ps(static_cast<float>(s_lo + s_hi))));
        }
        acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(dx, t));
      }
    });
  }
  for (int64_t r = 0; r < R; ++r) _mm_storeu_ps(out[r], acc[r]);
}
#else
template <int64_t F, int64_t R, int64_t C>
inline void group(const Q8Rows* x, const uint8_t* const* w, int64_t nb, float (*out)[kCols], int64_t /*ahead*/) {
  constexpr int64_t B = block_bytes(F);
  float acc[R][kCols] = {};
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      KScales ks{};
      if constexpr (is_k(F)) k_scales<F>(w[c] + b * B, ks);
      for (int64_t j = 0; j < chunks(F); ++j) {
        int32_t u[kQk];
        chunk_quants<F>(w[c] + b * B, j, u);
        const Scale s = chunk_scale<F>(w[c] + b * B, ks, j);
        const int64_t k = b * chunks(F) + j;
        for (int64_t r = 0; r < R; ++r) {
          const int8_t* q = x[r].q + k * kQk;
          int32_t i_lo = 0, i_hi = 0;
          for (int64_t l = 0; l < 16; ++l) i_lo += u[l] * q[l];
          for (int64_t l = 16; l < kQk; ++l) i_hi += u[l] * q[l];
          const int32_t s_lo = x[r].s[2 * k], s_hi = x[r].s[2 * k + 1];
          i_lo -= offset(F) * s_lo;
          i_hi -= offset(F) * s_hi;
          acc[r][c] = acc[r][c] + chunk_term<F>(x[r].d[k], s, i_lo, i_hi, s_lo + s_hi);
        }
      }
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < kCols; ++c) out[r][c] = acc[r][c];
}
#endif

template <int64_t F, int64_t C, int64_t R = kRows>
inline void row_groups(const Q8Rows* rows, const uint8_t* const* w, int64_t M, int64_t nb, const float* bias,
                       float* y, int64_t n0, int64_t N) {
  if constexpr (R > 0) {
    int64_t r0 = 0;
    for (; r0 + R <= M; r0 += R) {
      float sums[kRows][kCols];
      group<F, R, C>(rows + r0, w, nb, sums, r0 == 0 ? C * nb * block_bytes(F) : 0);  // the first rows fetch the next
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c)
          y[(r0 + r) * N + n0 + c] = bias != nullptr ? sums[r][c] + bias[n0 + c] : sums[r][c];
    }
    if (r0 < M) row_groups<F, C, R - 1>(rows + r0, w, M - r0, nb, bias, y + r0 * N, n0, N);
  }
}

template <int64_t F>
void q8_rows(const std::vector<Q8Rows>& rows, const uint8_t* w, const float* bias, float* y, int64_t N, int64_t K) {
  const int64_t nb = K / block_weights(F), row_bytes = nb * block_bytes(F), M = static_cast<int64_t>(rows.size());
  const int64_t groups = (N + kCols - 1) / kCols;
  const int64_t grain = std::max<int64_t>(1, 65536 / (kCols * row_bytes));  // ~64 KB of weights a task
  at::parallel_for(0, groups, grain, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t n0 = g * kCols;
      const uint8_t* wc[kCols];
      for (int64_t c = 0; c < kCols; ++c) wc[c] = w + std::min(n0 + c, N - 1) * row_bytes;
      if (n0 + kCols <= N) row_groups<F, kCols>(rows.data(), wc, M, nb, bias, y, n0, N);
      else if (N - n0 == 3) row_groups<F, 3>(rows.data(), wc, M, nb, bias, y, n0, N);
      else if (N - n0 == 2) row_groups<F, 2>(rows.data(), wc, M, nb, bias, y, n0, N);
      else row_groups<F, 1>(rows.data(), wc, M, nb, bias, y, n0, N);
    }
  });
}

// x [M, K] fp32 -> (q [M, K] int8, d [M, K / 32] fp32, s [M, K / 16] int32).
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_q8(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat, "quantize_q8: x must be a 2-d float32 tensor");
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(K % kQk == 0, "quantize_q8: the rows must be whole blocks of 32, got ", K);
  const auto xc = x.contiguous();
  auto q = at::empty({M, K}, x.options().dtype(at::kChar));
  auto d = at::empty({M, K / kQk}, x.options());
  auto s = at::empty({M, K / 16}, x.options().dtype(at::kInt));
  for (int64_t r = 0; r < M; ++r)
    quantize_row(xc.data_ptr<float>() + r * K, K, q.data_ptr<int8_t>() + r * K, d.data_ptr<float>() + r * (K / kQk),
                 s.data_ptr<int32_t>() + r * (K / 16));
  return {q, d, s};
}

at::Tensor quant_linear_q8(const at::Tensor& x, const at::Tensor& blocks, int64_t format, int64_t K,
                           const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(format >= kQ8_0 && format <= kLastFormat, "quant_linear_q8: unknown block format ", format);
  TORCH_CHECK(K > 0 && K % block_weights(format) == 0, "quant_linear_q8: in_features must be a positive multiple of ",
              block_weights(format), " for format ", format, ", got ", K);
  TORCH_CHECK(blocks.dim() == 2 && blocks.scalar_type() == at::kByte && blocks.is_contiguous() &&
                  blocks.size(1) == K / block_weights(format) * block_bytes(format),
              "quant_linear_q8: the blocks must be contiguous uint8 rows of ", K, " weights of format ", format);
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "quant_linear_q8: x must be float32 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.size(-1) == K, "quant_linear_q8: x has ", x.size(-1), " inputs, the weight ", K);
  const int64_t N = blocks.size(0), M = x.numel() / K;
  at::Tensor b;
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == N, "quant_linear_q8: the bias must have ", N, " elements");
    b = bias->to(at::kFloat).contiguous();
  }
  auto [q, d, s] = quantize_q8(x.to(at::kFloat).reshape({M, K}));
  std::vector<Q8Rows> rows(M);
  for (int64_t r = 0; r < M; ++r)
    rows[r] = {q.data_ptr<int8_t>() + r * K, d.data_ptr<float>() + r * (K / kQk), s.data_ptr<int32_t>() + r * (K / 16)};
  auto y = at::empty({M, N}, x.options().dtype(at::kFloat));
  by_format(format, [&](auto f) {
    q8_rows<decltype(f)::value>(rows, blocks.data_ptr<uint8_t>(), b.defined() ? b.data_ptr<float>() : nullptr,
                                y.data_ptr<float>(), N, K);
  });
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes).to(x.scalar_type());
}

}  // namespace

TT_LIBRARY_FRAGMENT(m) {
  m.def("quant_linear_q8(Tensor x, Tensor blocks, int format, int in_features, Tensor? bias) -> Tensor");
  m.def("quantize_q8(Tensor x) -> (Tensor, Tensor, Tensor)");
}

TT_LIBRARY_IMPL(CPU, m) {
  m.impl("quant_linear_q8", &quant_linear_q8);
  m.impl("quantize_q8", &quantize_q8);
}
