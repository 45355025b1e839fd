// Element conversions and exp shared by the native CPU kernels. Floating types are handled through
// their storage: float, c10::Half, and bf16 as its raw uint16_t bits, so that loops vectorise.
#pragma once

#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>

namespace tt_kernels {

inline float to_float(float x) { return x; }
inline float to_float(c10::Half x) { return static_cast<float>(x); }
inline float to_float(uint16_t bf16) {
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to the storage type: nearest, ties to even (what torch does for bf16 and fp16).
template <typename T>
inline T from_float(float x) { return static_cast<T>(x); }
template <>
inline uint16_t from_float<uint16_t>(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);  // a select, no branch
}

// The value after a round trip through T: what torch computes when an op's result is stored as T.
template <typename T>
inline float round_to(float x) { return to_float(from_float<T>(x)); }

// exp(x) to a few ulp: 2^(x log2 e) = 2^k * 2^f with f in [-0.5, 0.5], 2^f by polynomial; exact 0 below
// -87 and clamped at 88 (inf beyond).
inline float exp_approx(float x) {
  x = x < -87.f ? -87.f : (x > 88.f ? 88.f : x);
  const float t = x * 1.44269504088896341f;
  const float k = (t + 12582912.f) - 12582912.f;  // nearest integer (1.5 * 2^23 trick): no call, vectorises
  const float f = t - k;
  float p = 1.5403530393381606e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.f;
  // 2^k * p, in two halves so that k up to 128 does not overflow the exponent field.
  const int32_t ki = static_cast<int32_t>(k);
  const int32_t k1 = ki / 2, k2 = ki - ki / 2;
  int32_t b1 = (127 + k1) << 23, b2 = (127 + k2) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof(s1));
  std::memcpy(&s2, &b2, sizeof(s2));
  return p * s1 * s2;
}

// Sums in a fixed order: 16 lanes, then the lanes in turn, then the tail. (A vectorised reduction's
// order would follow the data's alignment, and a row's result would depend on where it lies.)
constexpr int64_t kLanes = 16;

inline float fold_lanes(const float* lanes) {
  float s = 0.f;
  for (int64_t l = 0; l < kLanes; ++l) s += lanes[l];
  return s;
}

inline float dot(const float* a, const float* b, int64_t n) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += a[i + l] * b[i + l];
  float s = fold_lanes(lanes);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace tt_kernels

// The AVX-512 fast paths: bf16 kernels whose portable loops the compiler vectorises poorly. With
// AVX512-BF16 the bf16 conversions and dot products are single instructions; without it (Skylake-SP to
// Ice Lake) the same functions round in integer lanes (as from_float<uint16_t> does) and widen the pairs
// of a bf16 dot product to fp32.
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define TT_FAST_BF16 1

namespace tt_kernels {

// 16 bf16 -> 16 fp32.
inline __m512 load_bf16x16(const uint16_t* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

#ifdef __AVX512BF16__
// 16 fp32 -> 16 bf16 (nearest, ties to even), stored.
inline void store_bf16x16(uint16_t* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(x));
}

// fp32 -> bf16 (nearest, ties to even) -> fp32.
inline __m512 round_bf16(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x)), 16));
}

// 32 bf16 as one operand of a dot product of pairs.
using bf16x32 = __m512bh;
inline bf16x32 load_bf16x32(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
// acc[l] + a[2l] b[2l] + a[2l+1] b[2l+1].
inline __m512 dot_pairs(__m512 acc, bf16x32 a, bf16x32 b) { return _mm512_dpbf16_ps(acc, a, b); }
#else
// 16 fp32 -> 16 bf16 bits in 32-bit lanes (nearest, ties to even; NaN kept quiet).
inline __m512i bf16_bits16(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40)));
}

inline void store_bf16x16(uint16_t* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bf16_bits16(x)));
}

inline __m512 round_bf16(__m512 x) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits16(x), 16)); }

using bf16x32 = __m512i;
inline bf16x32 load_bf16x32(const uint16_t* p) { return _mm512_loadu_si512(p); }
inline __m512 dot_pairs(__m512 acc, bf16x32 a, bf16x32 b) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512 a_even = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
  const __m512 b_even = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
  const __m512 a_odd = _mm512_castsi512_ps(_mm512_and_si512(a, high));
  const __m512 b_odd = _mm512_castsi512_ps(_mm512_and_si512(b, high));
  return _mm512_fmadd_ps(a_odd, b_odd, _mm512_fmadd_ps(a_even, b_even, acc));
}
#endif

// exp_approx on 16 lanes (the same clamps and polynomial; 2^k by scalef).
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)), _mm512_set1_ps(88.f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 k = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, k);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, k);
}

}  // namespace tt_kernels
#endif

// The AVX2 paths (8 fp32 lanes): fp32 kernels, and bf16 ones on CPUs without AVX512-BF16 (the bf16
// rounding done in integer lanes, as from_float<uint16_t> does it).
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TT_AVX2 1

namespace tt_kernels {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {  // 8 bf16 -> 8 fp32
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

// 8 fp32 -> 8 bf16 bits in 32-bit lanes (nearest, ties to even; NaN kept quiet).
inline __m256i bf16_bits8(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

inline void store8(float* p, __m256 x) { _mm256_storeu_ps(p, x); }
inline void store8(uint16_t* p, __m256 x) {
  const __m256i bits = bf16_bits8(x);
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// The value after a round trip through T (round_to<T>, 8 lanes).
template <typename T>
inline __m256 round8(__m256 x) { return x; }
template <>
inline __m256 round8<uint16_t>(__m256 x) { return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits8(x), 16)); }

// exp_approx on 8 lanes (the same clamps and polynomial, rounded with FMAs; 2^k built in the exponent).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 k = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(t, k);
  __m256 p = _mm256_set1_ps(1.5403530393381606e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
  // k in [-126, 127] after the clamps: 2^k is a normal float.
  const __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_k));
}

// The sum of 8 lanes in a fixed tree: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two.
inline float sum8(__m256 v) {
  const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

}  // namespace tt_kernels
#endif
