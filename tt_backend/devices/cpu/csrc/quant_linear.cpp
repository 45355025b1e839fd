// Linear layers over GGUF quantized blocks, read as the file holds them (ggml's layouts; each row of
// the weight a whole number of blocks):
//
//   Q8_0  [fp16 d][32 x int8 q]                 w = q * d             34 bytes
//   Q4_0  [fp16 d][16 bytes of nibbles]         w = (q - 8) * d       18 bytes
//   Q4_1  [fp16 d][fp16 m][16 bytes of nibbles] w = q * d + m         20 bytes
//   Q5_0  [fp16 d][4 bytes qh][16 bytes]        w = (q - 16) * d      22 bytes
//   Q5_1  [fp16 d][fp16 m][4 bytes qh][16 bytes] w = q * d + m        24 bytes
//   Q4_K, Q5_K, Q6_K: super-blocks of 256 weights (144, 176, 210 bytes), read in chunks of 32 (quant_k.h)
//
// Nibble byte j holds weight j in its low half and weight j + 16 in its high half; in Q5_0 / Q5_1 bit i of
// the little-endian 32-bit qh is weight i's fifth bit (ggml's dequantize_row_q5_0/1). Each weight is
// dequantized as ggml's dequantize_row_* does (one fp32 multiply, one add for Q4_1, never fused; the
// K-quants' exact products then the subtraction of a min: quant_k.h), so it equals the fp32 weight a
// dequantizing loader produces, bit for bit.
//
// - Up to `small_rows` rows (decode): each weight row's blocks are read once per group of input rows,
//   dequantized in registers and multiplied into fp32 sums. Sum (r, n) runs in kLanes lanes over k
//   (lane l takes k = l, l + kLanes, ... in order), then the lanes in a fixed tree, so a row's result
//   does not depend on the batch it is in or on the thread that computes it.
// - Beyond (prefill): bands of output rows are dequantized into an fp32 buffer (about 1 MB) and each
//   band goes through torch's fp32 GEMM: the whole matrix is never widened.
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "blocks_bf16_linear.h"
#include "numerics.h"
#include "onednn_linear.h"
#include "ops_library.h"
#include "quant_k.h"
#include "quant_pairs.h"

namespace {

using namespace tt_quant;  // formats, block sizes, half_at and the K-quant chunks
constexpr int64_t kCols = 4;  // output columns per register block

// The block_weights(F) weights of one block, in order.
template <int64_t F>
inline void dequant_block(const uint8_t* b, float* w) {
  if constexpr (is_k(F)) {
    KScales ks;
    k_scales<F>(b, ks);
    each_chunk<F>([&](auto j) { k_chunk<F>(b, ks, decltype(j)::value, w + decltype(j)::value * kQk); });
  } else if constexpr (F == kF32) {
    std::memcpy(w, b, kQk * sizeof(float));
  } else if constexpr (F == kQ8_0) {
    const float d = half_at(b);
    for (int64_t j = 0; j < kQk; ++j) w[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  } else if constexpr (F == kQ4_0) {
    const float d = half_at(b);
    for (int64_t j = 0; j < kQk / 2; ++j) w[j] = static_cast<float>((b[2 + j] & 15) - 8) * d;
    for (int64_t j = 0; j < kQk / 2; ++j) w[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  } else if constexpr (is_q5(F)) {
    const float d = half_at(b), m = F == kQ5_1 ? half_at(b + 2) : 0.0f;
    const uint8_t* hb = b + (F == kQ5_1 ? 4 : 2);
    const uint8_t* qs = hb + 4;
    uint32_t qh;
    std::memcpy(&qh, hb, sizeof(qh));
    for (int64_t j = 0; j < kQk; ++j) {
      const int q = ((j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (((qh >> j) & 1) << 4)) - (F == kQ5_0 ? 16 : 0);
      w[j] = F == kQ5_1 ? static_cast<float>(q) * d + m : static_cast<float>(q) * d;
    }
  } else {
    const float d = half_at(b), m = half_at(b + 2);
    for (int64_t j = 0; j < kQk / 2; ++j) w[j] = static_cast<float>(b[4 + j] & 15) * d + m;
    for (int64_t j = 0; j < kQk / 2; ++j) w[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}

#if defined(TT_FAST_BF16) && defined(TT_AVX2)
constexpr int64_t kLanes = 16;
constexpr int64_t kMaxRows = 4;  // 16 sums + 8 weights + 2 inputs in 32 registers

template <int64_t F>
inline void dequant_store(const uint8_t* b, float* w) {
  KScales ks;
  if constexpr (is_k(F)) k_scales<F>(b, ks);
  each_chunk<F>([&](auto j) __attribute__((always_inline)) {
    __m512 lo, hi;
    chunk_pair<F>(b, ks, decltype(j)::value, lo, hi);
    _mm512_storeu_ps(w + decltype(j)::value * kQk, lo);
    _mm512_storeu_ps(w + decltype(j)::value * kQk + 16, hi);
  });
}

inline float sum16(__m512 v) {  // the fixed tree: halves added, then sum8's tree
  return tt_kernels::sum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// out[r][c] = x[r] . w[c] over `nb` blocks; asks for the weight `ahead` bytes further on.
template <int64_t F, int64_t R, int64_t C>
inline void block_sums(const float* const* x, const uint8_t* const* w, int64_t nb, float (*out)[kCols],
                       int64_t ahead) {
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
      __m512 lo[C], hi[C];
      for (int64_t c = 0; c < C; ++c) chunk_pair<F>(w[c] + b * B, ks[is_k(F) ? c : 0], j, lo[c], hi[c]);
      const int64_t k = b * BW + j * kQk;
      for (int64_t r = 0; r < R; ++r) {
        const __m512 xl = _mm512_loadu_ps(x[r] + k), xh = _mm512_loadu_ps(x[r] + k + 16);
        for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(xh, hi[c], _mm512_fmadd_ps(xl, lo[c], acc[r][c]));
      }
    });
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[r][c] = sum16(acc[r][c]);
}
#elif defined(TT_AVX2)
constexpr int64_t kLanes = 8;
constexpr int64_t kMaxRows = 2;  // 8 sums + 4 weights + 1 input in 16 registers

// Weights 8h .. 8h + 7 of one block.
template <int64_t F>
inline __m256 dequant_eighth(const uint8_t* b, int64_t h) {
  if constexpr (F == kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(b) + 8 * h);
  const __m256 d = _mm256_set1_ps(half_at(b));
  if constexpr (F == kQ8_0) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * h));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
  } else if constexpr (is_q5(F)) {  // fifth bits 8h .. 8h + 7 of qh shifted into place
    const uint8_t* hb = b + (F == kQ5_1 ? 4 : 2);
    uint32_t qh;
    std::memcpy(&qh, hb, sizeof(qh));
    const __m256i wide = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hb + 4 + 8 * (h & 1))));
    const __m256i low = h < 2 ? _mm256_and_si256(wide, _mm256_set1_epi32(15)) : _mm256_srli_epi32(wide, 4);
    const __m256i fifth = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(qh >> (8 * h))), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
        _mm256_set1_epi32(1));
    __m256i q = _mm256_or_si256(low, _mm256_slli_epi32(fifth, 4));
    if constexpr (F == kQ5_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(16));
    const __m256 w = _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
    if constexpr (F == kQ5_1) return _mm256_add_ps(w, _mm256_set1_ps(half_at(b + 2)));
    return w;
  } else {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + (F == kQ4_0 ? 2 : 4) + 8 * (h & 1)));
    const __m256i wide = _mm256_cvtepu8_epi32(bytes);
    __m256i q = h < 2 ? _mm256_and_si256(wide, _mm256_set1_epi32(15)) : _mm256_srli_epi32(wide, 4);
    if constexpr (F == kQ4_0) q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
    const __m256 w = _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
    if constexpr (F == kQ4_1) return _mm256_add_ps(w, _mm256_set1_ps(half_at(b + 2)));
    return w;
  }
}

// Weights 8h .. 8h + 7 of chunk j of one block; s and t: the chunk's (k_scale, k_bits), K formats only.
template <int64_t F>
inline __m256 chunk_eighth(const uint8_t* b, const Scale& s, const Bits& t, int64_t h) {
  if constexpr (is_k(F)) return k_eighth<F>(b, t, s, h);
  else return dequant_eighth<F>(b, h);
}

template <int64_t F>
inline void chunk_meta(const KScales& ks, int64_t j, Scale& s, Bits& t) {
  if constexpr (is_k(F)) {
    s = k_scale<F>(ks, j);
    t = k_bits<F>(j);
  }
}

template <int64_t F>
inline void dequant_store(const uint8_t* b, float* w) {
  KScales ks;
  if constexpr (is_k(F)) k_scales<F>(b, ks);
  each_chunk<F>([&](auto j) __attribute__((always_inline)) {
    Scale s{};
    Bits t{};
    chunk_meta<F>(ks, decltype(j)::value, s, t);
    for (int64_t h = 0; h < 4; ++h)
      _mm256_storeu_ps(w + decltype(j)::value * kQk + 8 * h, chunk_eighth<F>(b, s, t, h));
  });
}

template <int64_t F, int64_t R, int64_t C>
inline void block_sums(const float* const* x, const uint8_t* const* w, int64_t nb, float (*out)[kCols],
                       int64_t ahead) {
  constexpr int64_t B = block_bytes(F), BW = block_weights(F);
  __m256 acc[R][C];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  KScales ks[is_k(F) ? C : 1];
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (is_k(F))
      for (int64_t c = 0; c < C; ++c) k_scales<F>(w[c] + b * B, ks[c]);
    each_chunk<F>([&](auto chunk) __attribute__((always_inline)) {
      constexpr int64_t j = decltype(chunk)::value;
      if (ahead > 0 && ((b * chunks(F) + j) & 1) == 0)  // a prefetch per 64 weights
        for (int64_t c = 0; c < C; ++c) __builtin_prefetch(w[c] + b * B + j * B / chunks(F) + ahead);
      Scale s[C] = {};
      Bits t[C] = {};
      for (int64_t c = 0; c < C; ++c) chunk_meta<F>(ks[is_k(F) ? c : 0], j, s[c], t[c]);
      for (int64_t h = 0; h < 4; ++h) {
        __m256 wv[C];
        for (int64_t c = 0; c < C; ++c) wv[c] = chunk_eighth<F>(w[c] + b * B, s[c], t[c], h);
        for (int64_t r = 0; r < R; ++r) {
          const __m256 xv = _mm256_loadu_ps(x[r] + b * BW + j * kQk + 8 * h);
          for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
        }
      }
    });
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[r][c] = tt_kernels::sum8(acc[r][c]);
}
#else
constexpr int64_t kLanes = 8;
constexpr int64_t kMaxRows = 2;

template <int64_t F>
inline void dequant_store(const uint8_t* b, float* w) { dequant_block<F>(b, w); }

// The same sums, 8 lanes in arrays that the compiler vectorises at the build's baseline.
template <int64_t F, int64_t R, int64_t C>
inline void block_sums(const float* const* x, const uint8_t* const* w, int64_t nb, float (*out)[kCols],
                       int64_t /*ahead*/) {
  constexpr int64_t B = block_bytes(F), BW = block_weights(F);
  float acc[R][C][kLanes] = {};
  for (int64_t b = 0; b < nb; ++b) {
    float wv[C][BW];
    for (int64_t c = 0; c < C; ++c) dequant_block<F>(w[c] + b * B, wv[c]);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t k = 0; k < BW; k += kLanes)
          for (int64_t l = 0; l < kLanes; ++l) acc[r][c][l] += x[r][b * BW + k + l] * wv[c][k + l];
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {  // sum8's tree: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two
      const float* a = acc[r][c];
      const float q0 = a[0] + a[4], q1 = a[1] + a[5], q2 = a[2] + a[6], q3 = a[3] + a[7];
      out[r][c] = (q0 + q2) + (q1 + q3);
    }
}
#endif

// Rows [r0, r0 + R) by columns [n0, n0 + C) of y = x w^T + bias; w: column n0's row, then `row_bytes`
// to each next column's.
template <int64_t F, int64_t R, int64_t C>
inline void block(const float* x, const uint8_t* w, const float* bias, float* y, int64_t r0, int64_t n0, int64_t N,
                  int64_t K) {
  const int64_t row_bytes = K / block_weights(F) * block_bytes(F);
  const float* xr[R];
  const uint8_t* wc[C];
  for (int64_t r = 0; r < R; ++r) xr[r] = x + (r0 + r) * K;
  for (int64_t c = 0; c < C; ++c) wc[c] = w + c * row_bytes;
  float sums[kMaxRows][kCols];
  block_sums<F, R, C>(xr, wc, K / block_weights(F), sums, r0 == 0 && F != kF32 ? C * row_bytes : 0);  // the first rows fetch the next
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) y[(r0 + r) * N + n0 + c] = bias != nullptr ? sums[r][c] + bias[n0 + c] : sums[r][c];
}

template <int64_t F, int64_t C, int64_t R = kMaxRows>
inline void row_groups(const float* x, const uint8_t* w, const float* bias, float* y, int64_t r0, int64_t M,
                       int64_t n0, int64_t N, int64_t K) {
  if constexpr (R > 0) {
    for (; r0 + R <= M; r0 += R) block<F, R, C>(x, w, bias, y, r0, n0, N, K);
    row_groups<F, C, R - 1>(x, w, bias, y, r0, M, n0, N, K);
  }
}

// Columns [n0, n0 + C) of every row: straight from the blocks when the rows fit one register block;
// else the C weight rows are dequantized once into `tile` (fp32, in L1) and every row group reads them
// there. Either way each sum multiplies the same fp32 weights in the same order.
template <int64_t F, int64_t C>
inline void columns(const float* x, const uint8_t* w, const float* bias, float* y, int64_t M, int64_t n0,
                    int64_t N, int64_t K, float* tile) {
  const int64_t row_bytes = K / block_weights(F) * block_bytes(F);
  const uint8_t* wn = w + n0 * row_bytes;
  if (M <= kMaxRows) {
    row_groups<F, C>(x, wn, bias, y, 0, M, n0, N, K);
    return;
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t b = 0; b < K / block_weights(F); ++b)
      dequant_store<F>(wn + c * row_bytes + b * block_bytes(F), tile + c * K + b * block_weights(F));
  row_groups<kF32, C>(x, reinterpret_cast<const uint8_t*>(tile), bias, y, 0, M, n0, N, K);
}

template <int64_t F>
void stream_rows(const float* x, const uint8_t* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  const int64_t blocks = (N + kCols - 1) / kCols;
  const int64_t grain = std::max<int64_t>(1, 65536 / (kCols * K / block_weights(F) * block_bytes(F)));  // ~64 KB a task
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> tile(M > kMaxRows ? kCols * K : 0);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kCols;
      if (n0 + kCols <= N) {
        columns<F, kCols>(x, w, bias, y, M, n0, N, K, tile.data());
      } else {
        for (int64_t n = n0; n < N; ++n) columns<F, 1>(x, w, bias, y, M, n, N, K, tile.data());
      }
    }
  });
}

// w[rows, K] fp32 = the weight's rows [n0, n0 + rows).
template <int64_t F>
void dequant_rows(const uint8_t* blocks, float* w, int64_t n0, int64_t rows, int64_t K) {
  const int64_t nb = K / block_weights(F), row_bytes = nb * block_bytes(F);
  at::parallel_for(0, rows, std::max<int64_t>(1, 8192 / K), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n)
      for (int64_t b = 0; b < nb; ++b)
        dequant_store<F>(blocks + (n0 + n) * row_bytes + b * block_bytes(F), w + n * K + b * block_weights(F));
  });
}

void check_blocks(const at::Tensor& blocks, int64_t format, int64_t K, const char* op) {
  TORCH_CHECK(format >= kQ8_0 && format <= kLastFormat, op, ": unknown block format ", format);
  TORCH_CHECK(K > 0 && K % block_weights(format) == 0, op, ": in_features must be a positive multiple of ",
              block_weights(format), " for format ", format, ", got ", K);
  TORCH_CHECK(blocks.dim() == 2 && blocks.scalar_type() == at::kByte && blocks.is_contiguous(), op,
              ": the blocks must be a contiguous 2-d uint8 tensor");
  TORCH_CHECK(blocks.size(1) == K / block_weights(format) * block_bytes(format), op, ": rows of ", blocks.size(1),
              " bytes do not hold ", K, " weights of format ", format);
}

at::Tensor dequantize_blocks(const at::Tensor& blocks, int64_t format, int64_t K) {
  check_blocks(blocks, format, K, "dequantize_blocks");
  auto w = at::empty({blocks.size(0), K}, blocks.options().dtype(at::kFloat));
  by_format(format, [&](auto f) { dequant_rows<decltype(f)::value>(blocks.data_ptr<uint8_t>(), w.data_ptr<float>(), 0, w.size(0), K); });
  return w;
}

at::Tensor quant_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t format, int64_t K,
                        const std::optional<at::Tensor>& bias, int64_t small_rows) {
  check_blocks(blocks, format, K, "quant_linear");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16,
              "quant_linear: x must be float32 or bfloat16, got ", x.scalar_type());
  TORCH_CHECK(x.size(-1) == K, "quant_linear: x has ", x.size(-1), " inputs, the weight ", K);
  const int64_t N = blocks.size(0), M = x.numel() / K;
  at::Tensor b;
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == N, "quant_linear: the bias must have ", N, " elements");
    b = bias->to(at::kFloat).contiguous();
  }
  const auto xf = x.to(at::kFloat).contiguous().view({M, K});  // a bf16 input widens exactly
  auto y = at::empty({M, N}, xf.options());
  const uint8_t* w = blocks.data_ptr<uint8_t>();
  if (M <= small_rows) {
    by_format(format, [&](auto f) {
      stream_rows<decltype(f)::value>(xf.data_ptr<float>(), w, b.defined() ? b.data_ptr<float>() : nullptr,
                                      y.data_ptr<float>(), M, N, K);
    });
  } else {
    const int64_t band = std::min<int64_t>(N, std::max<int64_t>(16, (262144 / K) / 16 * 16));  // ~1 MB of fp32
    auto buffer = at::empty({band, K}, xf.options());
    for (int64_t n0 = 0; n0 < N; n0 += band) {
      const int64_t rows = std::min(band, N - n0);
      by_format(format, [&](auto f) { dequant_rows<decltype(f)::value>(w, buffer.data_ptr<float>(), n0, rows, K); });
      auto out = y.narrow(1, n0, rows);
      at::mm_out(out, xf, buffer.narrow(0, 0, rows).t());
    }
    if (b.defined()) y.add_(b);
  }
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes).to(x.scalar_type());
}

// A bf16 plan's layer that keeps both forms of its weight: the blocks for calls of at most `small_rows`
// rows (decode steps read 96 MB a token for the default model, not the 269 MB of bf16), oneDNN's bf16
// kernel on the prepacked dense weight beyond (prefill and large decode batches). With AVX512-BF16 and
// bf16 inputs the blocks are read as bf16 weights (blocks_bf16_linear.cpp: the prepacked weight's values,
// so every call computes the same bf16 model); without, as quant_linear's exact fp32 weights. `bias`: in
// x's dtype, as oneDNN takes it.
at::Tensor blocks_or_packed_linear(const at::Tensor& x, const at::Tensor& blocks, int64_t format, int64_t K,
                                   const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                                   int64_t small_rows) {
  if (x.numel() <= small_rows * K) {
#if defined(__AVX512BF16__)
    if (x.scalar_type() == at::kBFloat16 && small_rows <= kBf16MaxRows)  // the prepacked weight's bf16 values
      return bf16_blocks_linear(x, blocks, format, K, bias);
#endif
    return quant_linear(x, blocks, format, K, bias, small_rows);  // exact fp32 weights
  }
  return tt_kernels::onednn_packed_linear(x, packed, bias);
}

}  // namespace

TT_LIBRARY_FRAGMENT(m) {
  m.def("blocks_or_packed_linear(Tensor x, Tensor blocks, int format, int in_features, Tensor packed, "
        "Tensor? bias, int small_rows) -> Tensor");
  m.def("quant_linear(Tensor x, Tensor blocks, int format, int in_features, Tensor? bias, int small_rows) -> Tensor");
  m.def("dequantize_blocks(Tensor blocks, int format, int in_features) -> Tensor");
}

TT_LIBRARY_IMPL(CPU, m) {
  m.impl("quant_linear", &quant_linear);
  m.impl("dequantize_blocks", &dequantize_blocks);
  m.impl("blocks_or_packed_linear", &blocks_or_packed_linear);
}

// oneDNN's prepacked weight is an opaque MkldnnCPU tensor, which makes the call dispatch there.
TT_LIBRARY_IMPL(MkldnnCPU, m) { m.impl("blocks_or_packed_linear", &blocks_or_packed_linear); }
