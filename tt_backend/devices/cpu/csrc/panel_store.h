// The end of a panels kernel's tile (panels_linear.cpp, nibble_panels.cpp): R rows by G panels of 16
// column sums, the bias added, stored as fp32 or rounded once to bf16 (nearest even); columns past N are
// not stored.
#pragma once

#if defined(__AVX512BF16__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace tt_panels {

inline void store(float* y, __mmask16 mask, __m512 v) { _mm512_mask_storeu_ps(y, mask, v); }
inline void store(uint16_t* y, __mmask16 mask, __m512 v) {
  _mm256_mask_storeu_epi16(y, mask, (__m256i)_mm512_cvtneps_pbh(v));
}

// y[r * N + n0 + 16 g + l] = sums[r][g] lane l + bias[n0 + 16 g + l] (bias may be null).
template <int64_t R, int64_t G, typename Out>
inline void store_tile(const __m512 (&sums)[R][G], const float* bias, Out* y, int64_t N, int64_t n0) {
  for (int64_t g = 0; g < G; ++g) {
    const int64_t n = n0 + 16 * g;
    const int64_t valid = std::min<int64_t>(16, N - n);
    const __mmask16 mask = valid == 16 ? __mmask16(0xffff) : __mmask16((1u << valid) - 1);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + n) : _mm512_setzero_ps();
    for (int64_t r = 0; r < R; ++r) store(y + r * N + n, mask, _mm512_add_ps(sums[r][g], b));
  }
}

}  // namespace tt_panels
#endif
