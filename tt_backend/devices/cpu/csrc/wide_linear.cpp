// fp32 activations times bf16 weights: the linear layer of CPUs whose bf16 matmuls are slow (those
// below AVX-512, where torch's bf16 GEMMs ran at 17-19 GFLOP/s against fp32's 53-101). A bf16 weight
// widens to fp32 exactly, so the product is the fp32 product of the bf16-rounded weight; streaming the
// weight as bf16 halves the bytes a decode step reads against fp32 weights.
//
// - Up to `small_rows` rows (decode): `stream_rows`, each weight row read once from memory while all
//   the input rows (in L1/L2) go through it. Blocks of kCols output columns x kRows input rows keep
//   their sums in registers; each sum runs in 8 lanes over k (lane l takes k = l, l + 8, ...), then the
//   lanes in a fixed tree, so a row's result does not depend on its batch; the next block's weight rows
//   are fetched while a block is summed.
// - Beyond (prefill): the weight widened to fp32 once per call, then torch's fp32 GEMM (the widening
//   is 2% of a prefill step's matmul at 784 rows).
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>

#include "numerics.h"
#include "ops_library.h"

namespace {

constexpr int64_t kCols = 4;  // output columns per block
constexpr int64_t kRows = 2;  // input rows per block: 8 accumulators + 4 weights + 1 input in 16 registers
constexpr int64_t kWidth = 8;  // lanes of one sum

#ifdef TT_AVX2
using tt_kernels::load8;

// out[r][c] = x[r] . w[c] over the first k8 (a multiple of 8) inputs, for R rows and C columns; asks
// for the weight `ahead` elements further on (the next block's rows) one cache line at a time.
template <int64_t R, int64_t C>
inline void block_sums(const float* const* x, const uint16_t* const* w, int64_t k8, float (*out)[kCols],
                       int64_t ahead) {
  __m256 acc[R][C];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k8; k += kWidth) {
    if (ahead > 0 && (k & 31) == 0)
      for (int64_t c = 0; c < C; ++c) __builtin_prefetch(w[c] + k + ahead);
    __m256 wv[C];
    for (int64_t c = 0; c < C; ++c) wv[c] = load8(w[c] + k);
    for (int64_t r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x[r] + k);
      for (int64_t c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[r][c] = tt_kernels::sum8(acc[r][c]);  // a fixed tree of adds
}
#else
// The same sums, 8 lanes in arrays that the compiler vectorises at the build's baseline.
template <int64_t R, int64_t C>
inline void block_sums(const float* const* x, const uint16_t* const* w, int64_t k8, float (*out)[kCols],
                       int64_t /*ahead*/) {
  float acc[R][C][kWidth] = {};
  for (int64_t k = 0; k < k8; k += kWidth) {
    float wv[C][kWidth];
    for (int64_t c = 0; c < C; ++c)
      for (int64_t l = 0; l < kWidth; ++l) wv[c][l] = tt_kernels::to_float(w[c][k + l]);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t l = 0; l < kWidth; ++l) acc[r][c][l] += x[r][k + l] * wv[c][l];
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float s = 0.f;
      for (int64_t l = 0; l < kWidth; ++l) s += acc[r][c][l];
      out[r][c] = s;
    }
}
#endif

// One block: rows [r0, r0 + R) by columns [n0, n0 + C) of y = x w^T + bias.
template <int64_t R, int64_t C>
inline void block(const float* x, const uint16_t* w, const float* bias, float* y, int64_t r0, int64_t n0,
                  int64_t N, int64_t K) {
  const float* xr[R];
  const uint16_t* wc[C];
  for (int64_t r = 0; r < R; ++r) xr[r] = x + (r0 + r) * K;
  for (int64_t c = 0; c < C; ++c) wc[c] = w + (n0 + c) * K;
  const int64_t k8 = K / kWidth * kWidth;
  float sums[kRows][kCols];
  block_sums<R, C>(xr, wc, k8, sums, r0 == 0 ? C * K : 0);  // the first rows of a block fetch the next
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float s = sums[r][c];
      for (int64_t k = k8; k < K; ++k) s += xr[r][k] * tt_kernels::to_float(wc[c][k]);
      y[(r0 + r) * N + n0 + c] = bias != nullptr ? s + bias[n0 + c] : s;
    }
}

template <int64_t C>
inline void column_block(const float* x, const uint16_t* w, const float* bias, float* y, int64_t M, int64_t n0,
                         int64_t N, int64_t K) {
  int64_t r = 0;
  for (; r + kRows <= M; r += kRows) block<kRows, C>(x, w, bias, y, r, n0, N, K);
  for (; r < M; ++r) block<1, C>(x, w, bias, y, r, n0, N, K);
}

// y [M, N] = x [M, K] w[N, K]^T (+ bias), threads over blocks of columns.
void stream_rows(const float* x, const uint16_t* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K) {
  const int64_t blocks = (N + kCols - 1) / kCols;
  // About 64 KB of weight per task: small layers stay on one thread.
  const int64_t grain = std::max<int64_t>(1, 65536 / (kCols * K * 2));
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t n0 = b * kCols;
      if (n0 + kCols <= N) {
        column_block<kCols>(x, w, bias, y, M, n0, N, K);
      } else {
        for (int64_t n = n0; n < N; ++n) column_block<1>(x, w, bias, y, M, n, N, K);
      }
    }
  });
}

at::Tensor wide_linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       int64_t small_rows) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "wide_linear: x must be float32, got ", x.scalar_type());
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kBFloat16,
              "wide_linear: the weight must be a 2-d bfloat16 tensor");
  const int64_t N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(x.size(-1) == K, "wide_linear: x has ", x.size(-1), " inputs, the weight ", K);
  at::Tensor b;
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N,
                "wide_linear: the bias must be float32 with ", N, " elements");
    b = bias->contiguous();
  }
  const int64_t M = x.numel() / std::max<int64_t>(K, 1);
  if (M > small_rows) return at::linear(x, weight.to(at::kFloat), bias);
  const auto xc = x.contiguous();
  const auto wc = weight.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  auto y = at::empty(sizes, x.options());
  stream_rows(xc.data_ptr<float>(), static_cast<const uint16_t*>(wc.data_ptr()),
              b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(), M, N, K);
  return y;
}

}  // namespace

TT_LIBRARY_FRAGMENT(m) { m.def("wide_linear(Tensor x, Tensor weight, Tensor? bias, int small_rows) -> Tensor"); }

TT_LIBRARY_IMPL(CPU, m) { m.impl("wide_linear", &wide_linear); }
