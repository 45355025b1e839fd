// A GGUF block's (or K super-block chunk's) 32 weights as two AVX-512 registers, weights 0-15 and 16-31,
// dequantized as csrc/quant_linear.cpp's header comment says (ggml's values, bit for bit). Shared by the
// fp32 kernels of quant_linear.cpp and the bf16 ones of blocks_bf16_linear.cpp.
#pragma once

#include <cstdint>
#include <cstring>

#include "numerics.h"
#include "quant_k.h"

#if defined(TT_FAST_BF16) && defined(TT_AVX2)
namespace tt_quant {

// The 16 (Q4_0, Q4_1) or 32 (Q5_0, Q5_1: lo for quants 0-15, hi for 16-31) weights a block's quants can
// stand for, lane q holding quant q's: (q - o) * d, or q * d + m. q * d is exact in fp32 (4 or 5 bits by
// d's 11), so the fused multiply-add rounds once, where the plain multiply and add do: the same bits.
template <int64_t F>
inline void block_table(const uint8_t* b, __m512& lo, __m512& hi) {
  constexpr bool has_m = F == kQ4_1 || F == kQ5_1;
  uint32_t bits = 0;  // d, then m in the high half
  std::memcpy(&bits, b, has_m ? 4 : 2);
  const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
  const __m512 d = _mm512_broadcastss_ps(dm);
  const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  if constexpr (has_m) {
    const __m512 m = _mm512_broadcastss_ps(_mm_movehdup_ps(dm));
    lo = _mm512_fmadd_ps(q, d, m);
    if constexpr (is_q5(F)) hi = _mm512_fmadd_ps(_mm512_add_ps(q, _mm512_set1_ps(16)), d, m);
  } else {
    constexpr float o = F == kQ4_0 ? 8 : 16;
    lo = _mm512_mul_ps(_mm512_sub_ps(q, _mm512_set1_ps(o)), d);
    if constexpr (is_q5(F)) hi = _mm512_mul_ps(_mm512_add_ps(q, _mm512_set1_ps(16 - o)), d);
  }
}

// Weights 0-15 and 16-31 of one block. The 4- and 5-bit formats look each weight up in block_table by
// its quant (vpermps reads an index lane's low 4 bits, vpermt2ps its low 5): no integer-to-float
// conversion, multiply or add per weight.
template <int64_t F>
inline void dequant_pair(const uint8_t* b, __m512& lo, __m512& hi) {
  if constexpr (F == kF32) {
    lo = _mm512_loadu_ps(reinterpret_cast<const float*>(b));
    hi = _mm512_loadu_ps(reinterpret_cast<const float*>(b) + 16);
  } else if constexpr (F == kQ8_0) {
    const __m512 d = _mm512_set1_ps(half_at(b));
    const __m128i* q = reinterpret_cast<const __m128i*>(b + 2);
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d);
  } else {
    constexpr int64_t at = F == kQ4_0 ? 2 : F == kQ4_1 ? 4 : F == kQ5_0 ? 6 : 8;  // the nibbles
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + at)));
    __m512 t0, t1;
    block_table<F>(b, t0, t1);
    if constexpr (is_q5(F)) {  // bit j of qh: weight j's fifth bit, index bit 4
      uint32_t qh;
      std::memcpy(&qh, b + at - 4, sizeof(qh));
      const __m512i sixteen = _mm512_set1_epi32(16);
      const __m512i ql = _mm512_and_si512(q, _mm512_set1_epi32(15)), qh4 = _mm512_srli_epi32(q, 4);
      const __m512i il = _mm512_mask_or_epi32(ql, static_cast<__mmask16>(qh), ql, sixteen);
      const __m512i ih = _mm512_mask_or_epi32(qh4, static_cast<__mmask16>(qh >> 16), qh4, sixteen);
      lo = _mm512_permutex2var_ps(t0, il, t1);
      hi = _mm512_permutex2var_ps(t0, ih, t1);
    } else {
      lo = _mm512_permutexvar_ps(q, t0);
      hi = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t0);
    }
  }
}

// Weights 0-15 and 16-31 of chunk j of one block (ks: a K super-block's k_scales).
template <int64_t F>
inline void chunk_pair(const uint8_t* b, const KScales& ks, int64_t j, __m512& lo, __m512& hi) {
  if constexpr (is_k(F)) k_pair<F>(b, ks, j, lo, hi);
  else dequant_pair<F>(b, lo, hi);
}

}  // namespace tt_quant
#endif
