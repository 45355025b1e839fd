// GGUF's K-quant super-blocks, read in chunks of 32 weights by quant_linear.cpp's kernels. Layouts
// from llama.cpp's ggml/src/ggml-common.h (block_q4_K, block_q5_K, block_q6_K; QK_K = 256) and
// values as its ggml/src/ggml-quants.c dequantize_row_q{4,5,6}_K compute them (gguf-py's
// gguf/quants.py Q4_K / Q5_K / Q6_K mirror them in numpy):
//
//   Q4_K  144 B: [fp16 d][fp16 dmin][12 B: 8 x (6-bit scale, 6-bit min)][128 B qs]
//   Q5_K  176 B: [fp16 d][fp16 dmin][12 B scales][32 B qh][128 B qs]
//   Q6_K  210 B: [128 B ql][64 B qh][16 x int8 scale][fp16 d]
//
// Q4_K / Q5_K: chunk j (weights 32j .. 32j + 31) has scale sc_j and min m_j (get_scale_min_k4);
// w = (d * sc_j) * q - dmin * m_j, q the low (j even) or high (j odd) nibbles of qs[32 (j / 2) + l],
// Q5_K adding bit j of qh[l] as q's fifth bit.
// Q6_K: chunk j = 4h + s (half h of 128 weights, s in 0..3): q = (the low (s < 2) or high nibbles of
// ql[64h + 32 (s & 1) + l]) | (((qh[32h + l] >> 2s) & 3) << 4), minus 32; w = (d * sc[2j + l / 16]) * q.
//
// Every product above is exact in fp32 (d has 11 significant bits, a scale 6 or 7, q 4 to 6: at most
// 24 bits together), so the order of the multiplies, and whether the last one is fused with the
// subtraction of the min, changes no bit: only that subtraction rounds, as in ggml.
#pragma once

#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "numerics.h"

namespace tt_quant {

constexpr int64_t kQk = 32;  // weights per chunk: a block of the 32-weight formats, 1/8 of a K super-block
enum Format : int64_t { kQ8_0 = 0, kQ4_0 = 1, kQ4_1 = 2, kQ4_K = 3, kQ5_K = 4, kQ6_K = 5, kQ5_0 = 6, kQ5_1 = 7,
                        kF32 = 15 };
constexpr int64_t kLastFormat = kQ5_1;  // kF32 (a dequantized tile) is internal

constexpr bool is_k(int64_t f) { return f == kQ4_K || f == kQ5_K || f == kQ6_K; }
constexpr bool is_q5(int64_t f) { return f == kQ5_0 || f == kQ5_1; }
constexpr int64_t block_weights(int64_t f) { return is_k(f) ? 256 : kQk; }
constexpr int64_t block_bytes(int64_t f) {
  return f == kQ8_0 ? 34 : f == kQ4_0 ? 18 : f == kQ4_1 ? 20 : f == kQ4_K ? 144 : f == kQ5_K ? 176
         : f == kQ6_K ? 210 : f == kQ5_0 ? 22 : f == kQ5_1 ? 24 : kQk * 4;
}
constexpr int64_t chunks(int64_t f) { return block_weights(f) / kQk; }

// fn(std::integral_constant<int64_t, F>{}) for the format id `format` (checked by the caller): each kernel is
// compiled once per format.
template <typename Fn>
inline void by_format(int64_t format, Fn&& fn) {
  if (format == kQ8_0) fn(std::integral_constant<int64_t, kQ8_0>{});
  else if (format == kQ4_0) fn(std::integral_constant<int64_t, kQ4_0>{});
  else if (format == kQ4_1) fn(std::integral_constant<int64_t, kQ4_1>{});
  else if (format == kQ4_K) fn(std::integral_constant<int64_t, kQ4_K>{});
  else if (format == kQ5_K) fn(std::integral_constant<int64_t, kQ5_K>{});
  else if (format == kQ5_0) fn(std::integral_constant<int64_t, kQ5_0>{});
  else if (format == kQ5_1) fn(std::integral_constant<int64_t, kQ5_1>{});
  else fn(std::integral_constant<int64_t, kQ6_K>{});
}

template <typename Fn, int64_t... J>
inline void each_chunk_of(Fn&& fn, std::integer_sequence<int64_t, J...>) {
  (fn(std::integral_constant<int64_t, J>{}), ...);
}

// fn(j) for each chunk j of a block of format F in order, j a compile-time constant: the loop unrolled,
// so that chunk offsets and shifts are immediates and chunks reading the same bytes share the loads.
template <int64_t F, typename Fn>
inline void each_chunk(Fn&& fn) {
  each_chunk_of(fn, std::make_integer_sequence<int64_t, chunks(F)>{});
}

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
#ifdef TT_AVX2
  return _cvtsh_ss(h);  // F16C: exact, as the software conversion
#else
  return tt_kernels::to_float(c10::Half(h, c10::Half::from_bits()));
#endif
}

// A super-block's multipliers, decoded once for its 8 chunks: Q4_K / Q5_K: scale[j] = d * sc_j and
// min[j] = dmin * m_j of chunk j; Q6_K: scale[i] = d * sc[i] of its 16 sub-blocks of 16 weights.
struct KScales {
  float scale[16];
  float min[8];
};

template <int64_t F>
inline void k_scales(const uint8_t* b, KScales& s) {
  if constexpr (F == kQ6_K) {
    const float d = half_at(b + 208);
#if defined(TT_FAST_BF16) && defined(TT_AVX2)
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    _mm512_storeu_ps(s.scale, _mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(sc)));
#else
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int i = 0; i < 16; ++i) s.scale[i] = d * static_cast<float>(sc[i]);
#endif
  } else {
    // The 8 6-bit scales and mins, unpacked a word at a time as llama.cpp's ggml_vec_dot_q4_K_q8_K does
    // (ggml/src/ggml-cpu/arch/x86/quants.c; little-endian words): the values of get_scale_min_k4(j).
    constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[4];
    std::memcpy(u, b + 4, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);  // mins 4-7
    const uint32_t mins_low = u[1] & kmask1;                          // mins 0-3
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);          // scales 4-7
    u[2] = mins_low;
    u[0] &= kmask1;                                                   // scales 0-3
    const float d = half_at(b), dmin = half_at(b + 2);
#ifdef TT_AVX2
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
    _mm256_storeu_ps(s.scale, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))));
    _mm256_storeu_ps(s.min, _mm256_mul_ps(_mm256_set1_ps(dmin),
                                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)))));
#else
    uint8_t v[16];
    std::memcpy(v, u, 16);
    for (int j = 0; j < 8; ++j) s.scale[j] = d * static_cast<float>(v[j]);
    for (int j = 0; j < 8; ++j) s.min[j] = dmin * static_cast<float>(v[8 + j]);
#endif
  }
}

// A chunk's multipliers: lo for its weights 0-15, hi for 16-31 (equal but in Q6_K), and the min.
struct Scale {
  float lo, hi, min;
};

template <int64_t F>
inline Scale k_scale(const KScales& s, int64_t j) {
  if constexpr (F == kQ6_K) return {s.scale[2 * j], s.scale[2 * j + 1], 0.f};
  else return {s.scale[j], s.scale[j], s.min[j]};
}

// Byte offsets of chunk j's quants, and the shifts that take its bits out of them.
struct Bits {
  int64_t low, high;  // low: the 4 low bits' bytes; high: Q5_K's / Q6_K's high bits' bytes
  int nibble, shift;  // low >> nibble & 15; (high >> shift) & 1 (Q5_K) or & 3 (Q6_K)
};

template <int64_t F>
constexpr Bits k_bits(int64_t j) {
  if constexpr (F == kQ6_K) {
    return {64 * (j / 4) + 32 * (j & 1), 128 + 32 * (j / 4), static_cast<int>(4 * ((j % 4) >> 1)),
            static_cast<int>(2 * (j % 4))};
  } else {
    return {(F == kQ4_K ? 16 : 48) + 32 * (j / 2), 16, static_cast<int>(4 * (j & 1)), static_cast<int>(j)};
  }
}

// The integer quant of weight l of a chunk (Q6_K: less 32).
template <int64_t F>
inline int k_quant(const uint8_t* b, const Bits& t, int64_t l) {
  const int q = (b[t.low + l] >> t.nibble) & 15;
  if constexpr (F == kQ4_K) return q;
  if constexpr (F == kQ5_K) return q | (((b[t.high + l] >> t.shift) & 1) << 4);
  return (q | (((b[t.high + l] >> t.shift) & 3) << 4)) - 32;
}

// The 32 weights of chunk j, in order (the portable path).
template <int64_t F>
inline void k_chunk(const uint8_t* b, const KScales& ks, int64_t j, float* w) {
  const Scale s = k_scale<F>(ks, j);
  const Bits t = k_bits<F>(j);
  for (int64_t l = 0; l < kQk / 2; ++l) w[l] = s.lo * static_cast<float>(k_quant<F>(b, t, l));
  for (int64_t l = kQk / 2; l < kQk; ++l) w[l] = s.hi * static_cast<float>(k_quant<F>(b, t, l));
  if constexpr (F != kQ6_K)
    for (int64_t l = 0; l < kQk; ++l) w[l] -= s.min;
}

#if defined(TT_FAST_BF16) && defined(TT_AVX2)
// Weights 16i .. 16i + 15 of chunk j (i = 0, 1) of one super-block.
template <int64_t F>
inline __m512 k_sixteen(const uint8_t* b, const Bits& t, const Scale& s, int64_t i) {
  const __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + t.low + 16 * i)));
  __m512i q = _mm512_and_si512(_mm512_srli_epi32(raw, t.nibble), _mm512_set1_epi32(15));
  if constexpr (F != kQ4_K) {
    const __m512i h = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + t.high + 16 * i)));
    const __m512i bits = _mm512_and_si512(_mm512_srli_epi32(h, t.shift),
                                          _mm512_set1_epi32(F == kQ5_K ? 1 : 3));
    q = _mm512_or_si512(q, _mm512_slli_epi32(bits, 4));
  }
  if constexpr (F == kQ6_K) {
    q = _mm512_sub_epi32(q, _mm512_set1_epi32(32));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(i == 0 ? s.lo : s.hi));
  }
  return _mm512_fmsub_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(s.lo), _mm512_set1_ps(s.min));  // exact product
}

template <int64_t F>
inline void k_pair(const uint8_t* b, const KScales& ks, int64_t j, __m512& lo, __m512& hi) {
  const Scale s = k_scale<F>(ks, j);
  const Bits t = k_bits<F>(j);
  lo = k_sixteen<F>(b, t, s, 0);
  hi = k_sixteen<F>(b, t, s, 1);
}
#endif

#ifdef TT_AVX2
// Weights 8h .. 8h + 7 of chunk j, its Scale s and Bits t given.
template <int64_t F>
inline __m256 k_eighth(const uint8_t* b, const Bits& t, const Scale& s, int64_t h) {
  const __m256i raw = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + t.low + 8 * h)));
  __m256i q = _mm256_and_si256(_mm256_srli_epi32(raw, t.nibble), _mm256_set1_epi32(15));
  if constexpr (F != kQ4_K) {
    const __m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + t.high + 8 * h)));
    const __m256i bits = _mm256_and_si256(_mm256_srli_epi32(hb, t.shift),
                                          _mm256_set1_epi32(F == kQ5_K ? 1 : 3));
    q = _mm256_or_si256(q, _mm256_slli_epi32(bits, 4));
  }
  if constexpr (F == kQ6_K) {
    q = _mm256_sub_epi32(q, _mm256_set1_epi32(32));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(h < 2 ? s.lo : s.hi));
  }
  return _mm256_fmsub_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(s.lo), _mm256_set1_ps(s.min));  // exact product
}
#endif

}  // namespace tt_quant
