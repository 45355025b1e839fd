// Fused elementwise kernels of the Llama layer for the torch CPU device: each replaces several torch
// ops (and their passes over memory and dispatch) with one, rounding where torch rounds, so results
// match the torch path's to fp32 rounding:
// - rms_norm / add_rms_norm: RMSNorm (normalise in fp32, round, times the weight), optionally after the
//   residual add;
// - silu_and_mul: SiLU(gate) * up over the fused gate/up projection;
// - rope_and_cache: rotary embedding (rotate-half) of q and k from the fused qkv projection, with k and
//   v stored at their KV-cache slots.
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include "ops_library.h"

#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "numerics.h"

namespace {

using tt_kernels::dot;
using tt_kernels::exp_approx;
using tt_kernels::from_float;
using tt_kernels::round_to;
using tt_kernels::to_float;

// Runs fn with a null pointer of the storage type of `dtype` (bf16 as uint16_t).
template <typename Fn>
void dispatch(at::ScalarType dtype, const char* name, Fn&& fn) {
  switch (dtype) {
    case at::kBFloat16: fn(static_cast<uint16_t*>(nullptr)); break;
    case at::kHalf: fn(static_cast<c10::Half*>(nullptr)); break;
    case at::kFloat: fn(static_cast<float*>(nullptr)); break;
    default: TORCH_CHECK(false, name, ": unsupported dtype ", dtype);
  }
}

// Rows of `width` elements per task: enough work per thread that small batches stay on one thread.
inline int64_t grain(int64_t width) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(width, 1)); }

#ifdef TT_FAST_BF16
using tt_kernels::exp16;
using tt_kernels::load_bf16x16;
using tt_kernels::round_bf16;
using tt_kernels::store_bf16x16;

// One row of n bf16 (n a multiple of 16) through norm_rows' steps with the same roundings and the same
// order of sums (16 lanes, then the lanes in turn: `dot`), 16 lanes at a time: the compiler's version of
// the scalar loops took 0.16 ms for 784 x 576 (add_rms_norm), this one about half.
inline void norm_row_bf16(const uint16_t* a, const uint16_t* b, const uint16_t* w, uint16_t* out, uint16_t* sum,
                          float* row, int64_t n, float eps) {
  __m512 lanes = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    __m512 v = load_bf16x16(a + i);
    if (b != nullptr) {
      v = round_bf16(_mm512_add_ps(v, load_bf16x16(b + i)));
      store_bf16x16(sum + i, v);
    }
    _mm512_storeu_ps(row + i, v);
    lanes = _mm512_add_ps(lanes, _mm512_mul_ps(v, v));
  }
  alignas(64) float folded[16];
  _mm512_store_ps(folded, lanes);
  const float mean = tt_kernels::fold_lanes(folded) / static_cast<float>(n);
  const __m512 inv = _mm512_set1_ps(1.f / std::sqrt(mean + eps));
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 normed = round_bf16(_mm512_mul_ps(_mm512_loadu_ps(row + i), inv));
    store_bf16x16(out + i, _mm512_mul_ps(load_bf16x16(w + i), normed));
  }
}
#endif

// out = weight * round(x * rsqrt(mean(x^2) + eps)), one row of n.
template <typename T>
inline void rms_norm_row(const float* x, const T* weight, T* out, int64_t n, float eps) {
  const float inv = 1.f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = from_float<T>(to_float(weight[i]) * round_to<T>(x[i] * inv));
}

// out = rms_norm(x) row by row over the last dimension; with a residual, the norm reads
// round(x + residual) instead, which is also stored in `sum` (the stream after the add).
void norm_rows(const char* name, const at::Tensor& x, const at::Tensor* residual, const at::Tensor& weight,
               double eps, at::Tensor& out, at::Tensor* sum) {
  TORCH_CHECK(x.scalar_type() == weight.scalar_type(), name, ": x and weight dtypes differ");
  const int64_t n = x.size(-1);
  TORCH_CHECK(weight.numel() == n, name, ": weight has ", weight.numel(), " elements, rows have ", n);
  const auto xc = x.contiguous();
  const auto wc = weight.contiguous();
  at::Tensor rc;
  if (residual != nullptr) {
    TORCH_CHECK(residual->scalar_type() == x.scalar_type(), name, ": x and residual dtypes differ");
    TORCH_CHECK(residual->sizes() == x.sizes(), name, ": x and residual shapes differ");
    rc = residual->contiguous();
  }
  const int64_t rows = xc.numel() / std::max<int64_t>(n, 1);
  dispatch(xc.scalar_type(), name, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* a = static_cast<const T*>(xc.data_ptr());
    const T* b = residual != nullptr ? static_cast<const T*>(rc.data_ptr()) : nullptr;
    const T* w = static_cast<const T*>(wc.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    T* s = sum != nullptr ? static_cast<T*>(sum->data_ptr()) : nullptr;
    at::parallel_for(0, rows, grain(n), [&](int64_t begin, int64_t end) {
      std::vector<float> row(n);
      for (int64_t r = begin; r < end; ++r) {
#ifdef TT_FAST_BF16
        if constexpr (std::is_same_v<T, uint16_t>) {
          if (n % 16 == 0) {
            norm_row_bf16(a + r * n, b != nullptr ? b + r * n : nullptr, w, dst + r * n,
                          s != nullptr ? s + r * n : nullptr, row.data(), n, static_cast<float>(eps));
            continue;
          }
        }
#endif
        if (b == nullptr) {
          for (int64_t i = 0; i < n; ++i) row[i] = to_float(a[r * n + i]);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            const T v = from_float<T>(to_float(a[r * n + i]) + to_float(b[r * n + i]));
            s[r * n + i] = v;
            row[i] = to_float(v);
          }
        }
        rms_norm_row(row.data(), w, dst + r * n, n, static_cast<float>(eps));
      }
    });
  });
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
  norm_rows("rms_norm", x, nullptr, weight, eps, out, nullptr);
  return out;
}

// Returns (rms_norm(x + residual), x + residual), the sum rounded once as torch's add rounds it.
std::tuple<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps) {
  auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
  auto sum = at::empty_like(x, at::MemoryFormat::Contiguous);
  norm_rows("add_rms_norm", x, &residual, weight, eps, out, &sum);
  return {out, sum};
}

#ifdef TT_FAST_BF16

// silu_and_mul over n bf16 elements (n a multiple of 16), 16 lanes at a time, with torch's
// roundings: 0.37 ms for 1024 x 1536 here, where the compiler's vectorisation of the portable loop
// took 0.80 ms (torch: 0.70 ms); the results are the same.
inline void silu_and_mul_bf16(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 g = load_bf16x16(gate + i);
    const __m512 d = _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), g)));  // 1 + e^-g
    const __m512 silu = round_bf16(_mm512_div_ps(g, d));
    store_bf16x16(out + i, _mm512_mul_ps(silu, load_bf16x16(up + i)));
  }
}
#endif

#ifdef TT_AVX2
// silu_and_mul over n fp32 or bf16 elements (n a multiple of 8), 8 lanes at a time with the scalar loop's
// roundings (exp8 rounds its polynomial with FMAs, so a value may differ from it by an ulp): the
// compiler's version of the scalar loop took 1.8 ms for 784 x 1536 fp32 here (torch: 0.23 ms).
template <typename T>
inline void silu_and_mul8(const T* gate, const T* up, T* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 g = tt_kernels::load8(gate + i);
    const __m256 d = _mm256_add_ps(one, tt_kernels::exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
    const __m256 silu = tt_kernels::round8<T>(_mm256_div_ps(g, d));
    tt_kernels::store8(out + i, _mm256_mul_ps(silu, tt_kernels::load8(up + i)));
  }
}
#endif

// x: [..., 2I] = (gate, up); returns [..., I] = round(round(silu(gate)) * up).
at::Tensor silu_and_mul(const at::Tensor& x) {
  const int64_t n2 = x.size(-1), n = n2 / 2;
  TORCH_CHECK(n2 % 2 == 0, "silu_and_mul: the last dimension (", n2, ") must be even");
  const auto xc = x.contiguous();
  auto sizes = xc.sizes().vec();
  sizes.back() = n;
  auto out = at::empty(sizes, xc.options());
  const int64_t rows = xc.numel() / std::max<int64_t>(n2, 1);
  dispatch(xc.scalar_type(), "silu_and_mul", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* src = static_cast<const T*>(xc.data_ptr());
    T* dst = static_cast<T*>(out.data_ptr());
    at::parallel_for(0, rows, grain(n2), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* gate = src + r * n2;
        const T* up = gate + n;
        T* o = dst + r * n;
#ifdef TT_FAST_BF16
        if constexpr (std::is_same_v<T, uint16_t>) {
          if (n % 16 == 0) {
            silu_and_mul_bf16(gate, up, o, n);
            continue;
          }
        }
#endif
#ifdef TT_AVX2
        // bf16 too below AVX-512 (with it, bf16 takes the 16-lane path above).
#ifdef __AVX512F__
        constexpr bool lanes8 = std::is_same_v<T, float>;
#else
        constexpr bool lanes8 = std::is_same_v<T, float> || std::is_same_v<T, uint16_t>;
#endif
        if constexpr (lanes8) {
          if (n % 8 == 0) {
            silu_and_mul8(gate, up, o, n);
            continue;
          }
        }
#endif
        for (int64_t i = 0; i < n; ++i) {
          const float g = to_float(gate[i]);
          const float silu = round_to<T>(g / (1.f + exp_approx(-g)));
          o[i] = from_float<T>(silu * to_float(up[i]));
        }
      }
    });
  });
  return out;
}

// One head of d elements, rotate-half: out = round(round(x * cos) + round(rot(x) * sin)), where
// rot(x) = (-x2, x1) for the halves x1, x2 and cos/sin already hold the activations' rounding.
template <typename T>
inline void rotate_head(const T* x, const T* cos, const T* sin, T* out, int64_t d) {
  const int64_t h = d / 2;
#ifdef TT_FAST_BF16
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (h % 16 == 0) {  // the same roundings, 16 lanes at a time
      for (int64_t i = 0; i < h; i += 16) {
        const __m512 x1 = load_bf16x16(x + i), x2 = load_bf16x16(x + h + i);
        const __m512 c1 = load_bf16x16(cos + i), c2 = load_bf16x16(cos + h + i);
        const __m512 s1 = load_bf16x16(sin + i), s2 = load_bf16x16(sin + h + i);
        const __m512 neg_x2 = _mm512_xor_ps(x2, _mm512_set1_ps(-0.f));  // -x2, zeros included
        const __m512 lo = _mm512_add_ps(round_bf16(_mm512_mul_ps(x1, c1)), round_bf16(_mm512_mul_ps(neg_x2, s1)));
        const __m512 hi = _mm512_add_ps(round_bf16(_mm512_mul_ps(x2, c2)), round_bf16(_mm512_mul_ps(x1, s2)));
        store_bf16x16(out + i, lo);
        store_bf16x16(out + h + i, hi);
      }
      return;
    }
  }
#endif
#ifdef TT_AVX2
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, uint16_t>) {
    if (h % 8 == 0) {  // the same roundings, 8 lanes at a time
      using tt_kernels::load8;
      using tt_kernels::round8;
      for (int64_t i = 0; i < h; i += 8) {
        const __m256 x1 = load8(x + i), x2 = load8(x + h + i);
        const __m256 c1 = load8(cos + i), c2 = load8(cos + h + i);
        const __m256 s1 = load8(sin + i), s2 = load8(sin + h + i);
        const __m256 neg_x2 = _mm256_xor_ps(x2, _mm256_set1_ps(-0.f));
        const __m256 lo = _mm256_add_ps(round8<T>(_mm256_mul_ps(x1, c1)), round8<T>(_mm256_mul_ps(neg_x2, s1)));
        const __m256 hi = _mm256_add_ps(round8<T>(_mm256_mul_ps(x2, c2)), round8<T>(_mm256_mul_ps(x1, s2)));
        tt_kernels::store8(out + i, lo);
        tt_kernels::store8(out + h + i, hi);
      }
      return;
    }
  }
#endif
  for (int64_t i = 0; i < d; ++i) {
    const float rot = i < h ? -to_float(x[i + h]) : to_float(x[i - h]);
    const float a = round_to<T>(to_float(x[i]) * to_float(cos[i]));
    const float b = round_to<T>(rot * to_float(sin[i]));
    out[i] = from_float<T>(a + b);
  }
}

// qkv: [N, (H + 2 KVH) D] (rows may be strided); cos, sin: [N, D]; kv: [2, blocks, block_size, KVH, D];
// slots: [N] flat slots (block * block_size + offset), negative = padding, not stored. Returns the
// rotated q [N, H, D]; rotated k and v are written to the cache.
at::Tensor rope_and_cache(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& kv,
                          const at::Tensor& slots, int64_t num_heads, int64_t num_kv_heads) {
  TORCH_CHECK(qkv.dim() == 2 && cos.dim() == 2 && sin.dim() == 2 && kv.dim() == 5 && kv.size(0) == 2,
              "rope_and_cache: expected qkv [N, width], cos/sin [N, D] and kv [2, blocks, block_size, "
              "kv_heads, D]");
  const int64_t N = qkv.size(0), D = cos.size(1);
  TORCH_CHECK(D % 2 == 0 && kv.size(4) == D && kv.size(3) == num_kv_heads,
              "rope_and_cache: head sizes do not match");
  TORCH_CHECK(qkv.size(1) == (num_heads + 2 * num_kv_heads) * D, "rope_and_cache: qkv width ", qkv.size(1),
              " is not (", num_heads, " + 2 x ", num_kv_heads, ") x ", D);
  TORCH_CHECK(cos.size(0) == N && sin.size(0) == N && slots.numel() == N, "rope_and_cache: row counts differ");
  TORCH_CHECK(qkv.scalar_type() == kv.scalar_type() && cos.scalar_type() == kv.scalar_type() &&
                  sin.scalar_type() == kv.scalar_type(),
              "rope_and_cache: dtypes differ");
  TORCH_CHECK(kv.is_contiguous(), "rope_and_cache: the KV cache must be contiguous");
  TORCH_CHECK(qkv.stride(1) == 1, "rope_and_cache: qkv rows must be contiguous");
  const auto cc = cos.contiguous();
  const auto sc = sin.contiguous();
  const auto sl = slots.to(at::kLong).contiguous();
  const int64_t row_stride = qkv.stride(0), num_slots = kv.size(1) * kv.size(2);
  for (int64_t r = 0; r < N; ++r)
    TORCH_CHECK(sl.data_ptr<int64_t>()[r] < num_slots, "rope_and_cache: slot ", sl.data_ptr<int64_t>()[r],
                " is outside the cache (", num_slots, " slots)");
  auto q = at::empty({N, num_heads, D}, qkv.options());
  const int64_t token = num_kv_heads * D;  // one slot of K (or V)
  dispatch(qkv.scalar_type(), "rope_and_cache", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* src = static_cast<const T*>(qkv.data_ptr());
    const T* c = static_cast<const T*>(cc.data_ptr());
    const T* s = static_cast<const T*>(sc.data_ptr());
    T* qo = static_cast<T*>(q.data_ptr());
    T* kcache = static_cast<T*>(kv.data_ptr());
    T* vcache = kcache + num_slots * token;
    const int64_t* slot = sl.data_ptr<int64_t>();
    at::parallel_for(0, N, grain((num_heads + 2 * num_kv_heads) * D), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* row = src + r * row_stride;
        const T* cr = c + r * D;
        const T* sr = s + r * D;
        for (int64_t h = 0; h < num_heads; ++h) rotate_head(row + h * D, cr, sr, qo + (r * num_heads + h) * D, D);
        const int64_t at = slot[r];
        if (at < 0) continue;  // padding
        const T* k = row + num_heads * D;
        const T* v = k + token;
        for (int64_t h = 0; h < num_kv_heads; ++h) rotate_head(k + h * D, cr, sr, kcache + at * token + h * D, D);
        for (int64_t i = 0; i < token; ++i) vcache[at * token + i] = v[i];
      }
    });
  });
  return q;
}

}  // namespace

TT_LIBRARY_FRAGMENT(m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("rope_and_cache(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) kv, Tensor slots, int num_heads, "
        "int num_kv_heads) -> Tensor");
}

TT_LIBRARY_IMPL(CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("rope_and_cache", &rope_and_cache);
}
