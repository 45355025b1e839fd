// Attention straight over the paged KV cache, for the torch CPU device: decode (one query token per row)
// and prefill (T query tokens per row, each causal over its row's context).
//
// Each (query token, kv head) task walks its row's block table, scores every visible key once, takes the
// softmax, and sums the values once. The portable path in `models/llama.py` instead gathers every row's
// blocks into a contiguous copy and runs SDPA on it with a mask, which reads and writes the context twice
// more and, in prefill, scores every masked key as well.
//
// Two implementations of one task:
// - `fast_task`: bf16 with AVX-512 (dot products of bf16 pairs: vdpbf16ps with AVX512-BF16, widened to
//   fp32 FMAs without; 16-lane exp), specialised for head sizes 64 and 128 and up to 8 query heads per kv
//   head;
// - `portable_task`: any other case (fp32, fp16, other shapes, other CPUs), written for the compiler's
//   vectoriser.
// Both accumulate in fp32 and write the output in the input dtype. A prefill query token is the decode
// task at its position: the same code and the same sums, so a token's result does not depend on the
// other tokens of its step.
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include "ops_library.h"

#include "numerics.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

using tt_kernels::dot;
using tt_kernels::exp_approx;
using tt_kernels::fold_lanes;
using tt_kernels::from_float;
using tt_kernels::kLanes;
using tt_kernels::to_float;

// Where one (row, kv head) task reads and writes. Key p of the row lies in block table[p / block_size],
// at offset p % block_size; k and v already point at the task's kv head.
template <typename T>
struct Task {
  const T* q;  // [G, D]: the query heads that share this kv head
  const T* k;
  const T* v;
  const int64_t* table;
  int64_t first, end;  // keys [first, end) are visible
  int64_t block_size, block_stride, token_stride;
  float scale;
  int64_t row_bytes;  // of one head's K (or V) row
  float* scores;  // scratch, G * (end - first)
  T* out;         // [G, D]
};

// Asks for one block's rows of `base` (row_bytes of each of its tokens) into the L2 cache. Always inlined: a
// call inside the AVX-512 task spills its query registers (1.9x the time). Into L2, not L1
// (prefetcht0): a block is 32 lines or more and L1's few fill buffers stalled the loads of the block being
// scored; with the hint a layer's decode attention over a cold cache (B=32, 164 keys) took 0.55x the time.
template <typename T>
__attribute__((always_inline)) inline void prefetch_block(const T* base, const Task<T>& t, int64_t block) {
  const T* start = base + std::max<int64_t>(0, t.table[block]) * t.block_stride;
  for (int64_t j = 0; j < t.block_size; ++j) {
    const char* row = reinterpret_cast<const char*>(start + j * t.token_stride);
    for (int64_t b = 0; b < t.row_bytes; b += 64) __builtin_prefetch(row + b, 0, 1);
  }
}

// Calls fn(i, row, n) for each run of n consecutive visible keys within one block, in order: keys i to
// i + n - 1 (counting from 0), the first at `row`, the next ones token_stride apart. Keeps the blocks of
// `base` two ahead of fn asked for (0.95x the time of one ahead), and asks for the current block of `also`.
template <typename T, typename Fn>
inline void for_each_run(const T* base, const Task<T>& t, Fn&& fn, const T* also = nullptr) {
  constexpr int64_t kAhead = 2;
  int64_t i = 0;
  const int64_t first = t.first / t.block_size, last = (t.end - 1) / t.block_size;
  for (int64_t block = first + 1; block <= std::min(last, first + kAhead - 1); ++block) prefetch_block(base, t, block);
  for (int64_t block = first; i < t.end - t.first; ++block) {
    const int64_t offset = block == first ? t.first % t.block_size : 0;
    const int64_t n = std::min(t.block_size - offset, t.end - t.first - i);
    if (block + kAhead <= last) prefetch_block(base, t, block + kAhead);
    if (also != nullptr) prefetch_block(also, t, block);  // its V, fetched while its keys are scored
    fn(i, base + std::max<int64_t>(0, t.table[block]) * t.block_stride + offset * t.token_stride, n);
    i += n;
  }
}

// Calls fn(i, row) for every visible key in order, i counting from 0 and row pointing at its K (or V)
// in `base`; block by block, so no division per key.
template <typename T, typename Fn>
inline void for_each_key(const T* base, const Task<T>& t, Fn&& fn) {
  for_each_run(base, t, [&](int64_t i, const T* row, int64_t n) {
    for (int64_t j = 0; j < n; ++j, row += t.token_stride) fn(i + j, row);
  });
}

// Softmax of each query head's scores, in place.
inline void softmax_rows(float* scores, int64_t G, int64_t count) {
  for (int64_t g = 0; g < G; ++g) {
    float* s = scores + g * count;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < count; ++i) m = s[i] > m ? s[i] : m;
    float lanes[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= count; i += kLanes)
      for (int64_t l = 0; l < kLanes; ++l) {
        s[i + l] = exp_approx(s[i + l] - m);
        lanes[l] += s[i + l];
      }
    float total = fold_lanes(lanes);
    for (; i < count; ++i) {
      s[i] = exp_approx(s[i] - m);
      total += s[i];
    }
    const float inv = 1.f / total;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) s[i] *= inv;
  }
}

#ifdef TT_AVX2
// softmax_rows with 8-lane vectors: the same order of sums (keys i and i + 8 of each 16 in two vectors,
// which are lanes 0-7 and 8-15 of softmax_rows' 16), the same scalar tail; exp8 rounds its polynomial
// with FMAs, so a score may differ from softmax_rows' by an ulp.
inline void softmax_rows8(float* scores, int64_t G, int64_t count) {
  for (int64_t g = 0; g < G; ++g) {
    float* s = scores + g * count;
    __m256 mv = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t i = 0;
    for (; i + 8 <= count; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + i));
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, mv);
    float m = lanes[0];
    for (int l = 1; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
    for (; i < count; ++i) m = s[i] > m ? s[i] : m;
    const __m256 mb = _mm256_set1_ps(m);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (i = 0; i + kLanes <= count; i += kLanes) {
      const __m256 e0 = tt_kernels::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), mb));
      const __m256 e1 = tt_kernels::exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i + 8), mb));
      _mm256_storeu_ps(s + i, e0);
      _mm256_storeu_ps(s + i + 8, e1);
      lo = _mm256_add_ps(lo, e0);
      hi = _mm256_add_ps(hi, e1);
    }
    _mm256_storeu_ps(lanes, lo);
    _mm256_storeu_ps(lanes + 8, hi);
    float total = fold_lanes(lanes);
    for (; i < count; ++i) {
      s[i] = exp_approx(s[i] - m);
      total += s[i];
    }
    const __m256 inv = _mm256_set1_ps(1.f / total);
    for (i = 0; i + 8 <= count; i += 8) _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), inv));
    for (; i < count; ++i) s[i] *= 1.f / total;
  }
}
#endif

template <typename T>
void portable_task(const Task<T>& t, int64_t G, int64_t D, float* qf, float* acc, float* row) {
  const int64_t count = t.end - t.first;
  for (int64_t i = 0; i < G * D; ++i) qf[i] = to_float(t.q[i]) * t.scale;
  for_each_key(t.k, t, [&](int64_t i, const T* k) {
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) row[d] = to_float(k[d]);
    for (int64_t g = 0; g < G; ++g) t.scores[g * count + i] = dot(qf + g * D, row, D);
  });
#ifdef TT_AVX2
  softmax_rows8(t.scores, G, count);
#else
  softmax_rows(t.scores, G, count);
#endif
  std::fill(acc, acc + G * D, 0.f);
  for_each_key(t.v, t, [&](int64_t i, const T* v) {
#pragma omp simd
    for (int64_t d = 0; d < D; ++d) row[d] = to_float(v[d]);
    for (int64_t g = 0; g < G; ++g) {
      const float w = t.scores[g * count + i];
      float* ag = acc + g * D;
#pragma omp simd
      for (int64_t d = 0; d < D; ++d) ag[d] += w * row[d];
    }
  });
  for (int64_t i = 0; i < G * D; ++i) t.out[i] = from_float<T>(acc[i]);
}

#ifdef TT_FAST_BF16
using tt_kernels::load_bf16x16;

// The 16 horizontal sums of a[0..15], in order, as one vector.
inline __m512 sum_each(__m512* a) {
  __m512 b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j)  // per 128-bit lane: a(2j) and a(2j+1) in pairs
    b[j] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * j], a[2 * j + 1]), _mm512_unpackhi_ps(a[2 * j], a[2 * j + 1]));
  for (int j = 0; j < 4; ++j) {  // per 128-bit lane: one partial sum of each of a(4j..4j+3)
    const __m512d lo = _mm512_castps_pd(b[2 * j]), hi = _mm512_castps_pd(b[2 * j + 1]);
    c[j] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi)), _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi)));
  }
  for (int j = 0; j < 2; ++j)
    d[j] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88), _mm512_shuffle_f32x4(d[0], d[1], 0xDD));
}

// softmax_rows with 16-lane vectors (2.5x faster; it took 40% of the kernel): the same fixed order of
// sums (lane l adds keys l, l + 16, ...; then the lanes in turn), the tail in masked lanes; exp16 rounds
// its polynomial with FMAs, so a score may differ from softmax_rows' by an ulp.
inline void softmax_rows16(float* scores, int64_t G, int64_t count) {
  for (int64_t g = 0; g < G; ++g) {
    float* s = scores + g * count;
    __m512 mv = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t i = 0;
    for (; i + 16 <= count; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(s + i));
    const __mmask16 tail = static_cast<__mmask16>((1u << (count - i)) - 1);
    mv = _mm512_mask_max_ps(mv, tail, mv, _mm512_maskz_loadu_ps(tail, s + i));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
    __m512 sum = _mm512_setzero_ps();
    for (i = 0; i + 16 <= count; i += 16) {
      const __m512 e = tt_kernels::exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), m));
      _mm512_storeu_ps(s + i, e);
      sum = _mm512_add_ps(sum, e);
    }
    const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + i), m);
    const __m512 e = _mm512_maskz_mov_ps(tail, tt_kernels::exp16(x));
    _mm512_mask_storeu_ps(s + i, tail, e);
    sum = _mm512_add_ps(sum, e);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    const __m512 inv = _mm512_set1_ps(1.f / tt_kernels::fold_lanes(lanes));
    for (i = 0; i + 16 <= count; i += 16) _mm512_storeu_ps(s + i, _mm512_mul_ps(_mm512_loadu_ps(s + i), inv));
    _mm512_mask_storeu_ps(s + i, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + i), inv));
  }
}

// G query heads of D = 32 * DP dims; the G x D/16 output accumulators stay in registers.
template <int G, int DP>
void fast_task(const Task<uint16_t>& t) {
  constexpr int D = 32 * DP, DC = 2 * DP;
  const int64_t count = t.end - t.first;
  tt_kernels::bf16x32 q[G][DP];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < DP; ++c) q[g][c] = tt_kernels::load_bf16x32(t.q + g * D + 32 * c);
  // Scores 16 keys at a time: one dot-product vector per key, then their 16 sums at once.
  const __m512 scale = _mm512_set1_ps(t.scale);
  for_each_run(t.k, t, [&](int64_t i, const uint16_t* row, int64_t n) {
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      const int64_t m = std::min<int64_t>(16, n - j0);
      if (m == 16) {  // a whole run of 16 keys: no masks, the 16 dot products stay in registers
        for (int g = 0; g < G; ++g) {
          __m512 dots[16];
          const uint16_t* k = row + j0 * t.token_stride;
#pragma GCC unroll 16
          for (int j = 0; j < 16; ++j) {
            const uint16_t* kj = k + j * t.token_stride;
            dots[j] = _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int c = 0; c < DP; ++c)
              dots[j] = tt_kernels::dot_pairs(dots[j], q[g][c], tt_kernels::load_bf16x32(kj + 32 * c));
          }
          _mm512_storeu_ps(t.scores + g * count + i + j0, _mm512_mul_ps(sum_each(dots), scale));
        }
        continue;
      }
      for (int g = 0; g < G; ++g) {
        __m512 dots[16];
        for (int64_t j = 0; j < 16; ++j) {
          dots[j] = _mm512_setzero_ps();
          if (j < m) {
            const uint16_t* k = row + (j0 + j) * t.token_stride;
            for (int c = 0; c < DP; ++c)
              dots[j] = tt_kernels::dot_pairs(dots[j], q[g][c], tt_kernels::load_bf16x32(k + 32 * c));
          }
        }
        const __mmask16 keep = static_cast<__mmask16>((1u << m) - 1);
        _mm512_mask_storeu_ps(t.scores + g * count + i + j0, keep, _mm512_mul_ps(sum_each(dots), scale));
      }
    }
  }, t.v);
  softmax_rows16(t.scores, G, count);
  __m512 acc[G][DC];
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < DC; ++c) acc[g][c] = _mm512_setzero_ps();
  for_each_key(t.v, t, [&](int64_t i, const uint16_t* v) {
    __m512 vc[DC];
    for (int c = 0; c < DC; ++c) vc[c] = load_bf16x16(v + 16 * c);
    for (int g = 0; g < G; ++g) {
      const __m512 w = _mm512_set1_ps(t.scores[g * count + i]);
      for (int c = 0; c < DC; ++c) acc[g][c] = _mm512_fmadd_ps(w, vc[c], acc[g][c]);
    }
  });
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < DC; ++c) tt_kernels::store_bf16x16(t.out + g * D + 16 * c, acc[g][c]);
}

using FastTask = void (*)(const Task<uint16_t>&);

template <int DP>
FastTask fast_task_for_groups(int64_t G) {
  switch (G) {
    case 1: return fast_task<1, DP>;
    case 2: return fast_task<2, DP>;
    case 3: return fast_task<3, DP>;
    case 4: return fast_task<4, DP>;
    case 5: return fast_task<5, DP>;
    case 6: return fast_task<6, DP>;
    case 7: return fast_task<7, DP>;
    case 8: return fast_task<8, DP>;
    default: return nullptr;
  }
}

FastTask select_fast_task(int64_t G, int64_t D) {
  switch (D) {
    case 64: return fast_task_for_groups<2>(G);
    case 128: return fast_task_for_groups<4>(G);
    default: return nullptr;
  }
}
#endif

// Task k of n in an order that gives each thread's contiguous share as much work as the others': the
// tasks of a prefill row grow with their position (a query sees the keys up to it), so consecutive
// shares would leave the first thread the short ones. Alternates from both ends: 0, n-1, 1, n-2, ...
inline int64_t balanced(int64_t k, int64_t n) { return k % 2 == 0 ? k / 2 : n - 1 - k / 2; }

// q, out: [B, T, H, D]; positions: [B, T]; tables: [B, width]; lens: [B].
template <typename T>
void paged_attention_impl(const T* q, const T* kcache, const T* vcache, const int64_t* tables, const int64_t* lens,
                          const int64_t* positions, T* out, int64_t B, int64_t QT, int64_t H, int64_t KVH,
                          int64_t D, int64_t block_size, int64_t width, int64_t window, float scale) {
  const int64_t G = H / KVH, n = B * QT * KVH;
#ifdef TT_FAST_BF16
  FastTask fast = nullptr;
  if constexpr (std::is_same_v<T, uint16_t>) fast = select_fast_task(G, D);
#endif
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(G * D), acc(G * D), row(D), scores;
    for (int64_t k = begin; k < end; ++k) {
      const int64_t task = QT > 1 ? balanced(k, n) : k;
      const int64_t token = task / KVH, h = task % KVH, b = token / QT;
      // The query at position p sees keys [max(0, p - window + 1), min(context, p + 1)).
      const int64_t pos = positions[token];
      const int64_t stop = std::min({lens[b], pos + 1, width * block_size});
      const int64_t first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      T* o = out + (token * H + h * G) * D;
      if (stop <= first) {  // a padding row: no keys
        std::fill(o, o + G * D, from_float<T>(0.f));
        continue;
      }
      scores.resize(G * (stop - first));
      const Task<T> t{q + (token * H + h * G) * D, kcache + h * D, vcache + h * D, tables + b * width, first,
                      stop, block_size, block_size * KVH * D, KVH * D, scale, D * static_cast<int64_t>(sizeof(T)),
                      scores.data(), o};
#ifdef TT_FAST_BF16
      if constexpr (std::is_same_v<T, uint16_t>) {
        if (fast != nullptr) {
          fast(t);
          continue;
        }
      }
#endif
      portable_task(t, G, D, qf.data(), acc.data(), row.data());
    }
  });
}

// q: [B, T, H, D] at positions [B, T]; kv: [2, num_blocks, block_size, KVH, D] (one layer); block_tables:
// [B, W]; context_lens: [B]; window: sliding window, 0 for none. Returns [B, T, H, D].
at::Tensor paged_attention(const char* name, const at::Tensor& q, const at::Tensor& kv,
                           const at::Tensor& block_tables, const at::Tensor& context_lens,
                           const at::Tensor& positions, int64_t window, double scale) {
  TORCH_CHECK(q.dim() == 4 && kv.dim() == 5 && block_tables.dim() == 2 && kv.size(0) == 2, name,
              ": expected kv [2, blocks, block_size, kv_heads, D] and block_tables [B, W]");
  TORCH_CHECK(q.scalar_type() == kv.scalar_type(), name, ": q and kv dtypes differ");
  TORCH_CHECK(kv.is_contiguous(), name, ": the KV cache must be contiguous");
  // A decode call's fixed cost counts (30 a step, ~15 us each at 1 row): no conversion where the
  // tensors are int64 and contiguous already; a table's -1 entries (past a row's blocks) read as block 0.
  const auto longs = [](const at::Tensor& t) {
    return t.scalar_type() == at::kLong && t.is_contiguous() ? t : t.to(at::kLong).contiguous();
  };
  const auto qc = q.is_contiguous() ? q : q.contiguous();
  const auto tables = longs(block_tables), lens = longs(context_lens), pos = longs(positions);
  auto out = at::empty_like(qc);
  const int64_t B = qc.size(0), QT = qc.size(1), H = qc.size(2), D = qc.size(3);
  const int64_t NB = kv.size(1), BS = kv.size(2), KVH = kv.size(3), W = tables.size(1);
  TORCH_CHECK(H % KVH == 0 && kv.size(4) == D, name, ": head shapes do not match");
  TORCH_CHECK(lens.size(0) == B && pos.numel() == B * QT && tables.size(0) == B, name,
              ": batch sizes do not match");
  auto run = [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* k = static_cast<const T*>(kv.data_ptr());
    paged_attention_impl<T>(static_cast<const T*>(qc.data_ptr()), k, k + NB * BS * KVH * D,
                            tables.data_ptr<int64_t>(), lens.data_ptr<int64_t>(), pos.data_ptr<int64_t>(),
                            static_cast<T*>(out.data_ptr()), B, QT, H, KVH, D, BS, W, window,
                            static_cast<float>(scale));
  };
  switch (qc.scalar_type()) {
    case at::kBFloat16: run(static_cast<uint16_t*>(nullptr)); break;
    case at::kHalf: run(static_cast<c10::Half*>(nullptr)); break;
    case at::kFloat: run(static_cast<float*>(nullptr)); break;
    default: TORCH_CHECK(false, name, ": unsupported dtype ", qc.scalar_type());
  }
  return out;
}

// q: [B, H, D] at positions [B] (one query token per row); returns [B, H, D].
at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& block_tables,
                                  const at::Tensor& context_lens, const at::Tensor& positions, int64_t window,
                                  double scale) {
  TORCH_CHECK(q.dim() == 3, "paged_decode_attention: expected q [B, H, D]");
  return paged_attention("paged_decode_attention", q.unsqueeze(1), kv, block_tables, context_lens,
                         positions.reshape({-1, 1}), window, scale)
      .squeeze(1);
}

// q: [B, T, H, D] at positions [B, T] (a prefill wave); returns [B, T, H, D].
at::Tensor paged_prefill_attention(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& block_tables,
                                   const at::Tensor& context_lens, const at::Tensor& positions, int64_t window,
                                   double scale) {
  TORCH_CHECK(q.dim() == 4 && positions.dim() == 2, "paged_prefill_attention: expected q [B, T, H, D] and "
              "positions [B, T]");
  return paged_attention("paged_prefill_attention", q, kv, block_tables, context_lens, positions, window, scale);
}

}  // namespace

TT_LIBRARY(m) {
  m.def("paged_decode_attention(Tensor q, Tensor kv, Tensor block_tables, Tensor context_lens, Tensor positions, "
        "int window, float scale) -> Tensor");
  m.def("paged_prefill_attention(Tensor q, Tensor kv, Tensor block_tables, Tensor context_lens, "
        "Tensor positions, int window, float scale) -> Tensor");
}

TT_LIBRARY_IMPL(CPU, m) {
  m.impl("paged_decode_attention", &paged_decode_attention);
  m.impl("paged_prefill_attention", &paged_prefill_attention);
}
