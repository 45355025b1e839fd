// A bf16 linear layer on AMX tiles for few rows (decode steps), for the torch CPU device.
//
// At decode sizes a linear layer is bound by streaming its weight from memory. oneDNN's kernel reached
// 15-19 GB/s on this path (14.7 ms for the default model's 266 MB at 1 row, 17-18 ms at 32 rows); this one
// streams the weight in the order the tile unit consumes it, with a software prefetch ahead, and reaches
// 22-26 GB/s (10.2 ms at 1 row, 12.6 ms at 32). From about 100 rows on it is compute-bound and oneDNN's
// blocking wins: the caller (`devices/torch_linear.py`) sends only small batches here.
//
// Weight layout (`torch_linear.tile_layout`): for each block of 32 output columns, for each 32-wide chunk of
// the input dimension, two 1 KB tiles (columns 0-15, then 16-31), whose row r holds the pairs of inputs
// (2r, 2r + 1) of each of its 16 columns: the VNNI layout TDPBF16PS reads. The sums are fp32 in tile order;
// the output is rounded to bf16 once, after the bias.
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include "onednn_linear.h"
#include "ops_library.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "numerics.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(TT_FAST_BF16)
#include <sys/syscall.h>
#include <unistd.h>
#define TT_AMX 1
#endif

namespace {

#ifdef TT_AMX
constexpr int64_t kPrefetchTiles = 4;  // how far ahead of the tile in use the weight is fetched (2 KB each)

// Linux hands out the tile registers' state only to a process that asks for it.
bool amx_permitted() {
  static const bool ok = [] {
    constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: the fp32 sums of rows 0-15 and 16-31 (columns 0-15, 16-31); 4, 5: the inputs of rows 0-15 and
// 16-31; 6, 7: the weight of columns 0-15 and 16-31.
void run_tiles(const uint16_t* x, const uint16_t* w, const uint16_t* bias, uint16_t* y, int64_t M, int64_t N,
               int64_t K) {
  const int64_t chunks = K / 32;
  const int arows = static_cast<int>(std::min<int64_t>(M, 16));  // (more than 16 rows: padded to 16s)
  at::parallel_for(0, N / 32, 1, [&](int64_t begin, int64_t end) {
    alignas(64) float sums[32 * 32];
    // The thread's tile state is put back at the end. oneDNN's AMX kernels run on the same threads;
    // its lazy configure compares with the loaded state and would reconfigure anyway, but nothing
    // else that runs here has to.
    TileConfig saved;
    _tile_storeconfig(&saved);
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
      cfg.rows[t] = t < 6 ? arows : 16;
      cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    for (int64_t block = begin; block < end; ++block) {
      const uint16_t* wb = w + block * 32 * K;
      for (int64_t m0 = 0; m0 < M; m0 += 32) {  // every row chunk reuses the block's tiles from L1
        const bool two = m0 + 16 < M;
        const uint16_t* xa = x + m0 * K;
        _tile_zero(0);
        _tile_zero(1);
        if (two) {
          _tile_zero(2);
          _tile_zero(3);
        }
        for (int64_t c = 0; c < chunks; ++c) {
          const uint16_t* tile = wb + c * 1024;
          if (m0 == 0) {
            const char* ahead = reinterpret_cast<const char*>(tile + kPrefetchTiles * 1024);
            for (int off = 0; off < 2048; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
          }
          _tile_loadd(6, tile, 64);
          _tile_loadd(7, tile + 512, 64);
          _tile_loadd(4, xa + c * 32, K * 2);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          if (two) {
            _tile_loadd(5, xa + 16 * K + c * 32, K * 2);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
        }
        _tile_stored(0, sums, 128);
        _tile_stored(1, sums + 16, 128);
        if (two) {
          _tile_stored(2, sums + 16 * 32, 128);
          _tile_stored(3, sums + 16 * 32 + 16, 128);
        }
        const __m512 b0 = bias != nullptr ? tt_kernels::load_bf16x16(bias + block * 32) : _mm512_setzero_ps();
        const __m512 b1 = bias != nullptr ? tt_kernels::load_bf16x16(bias + block * 32 + 16) : _mm512_setzero_ps();
        for (int64_t m = 0; m < std::min<int64_t>(32, M - m0); ++m) {
          const __m512 lo = _mm512_add_ps(_mm512_load_ps(sums + m * 32), b0);
          const __m512 hi = _mm512_add_ps(_mm512_load_ps(sums + m * 32 + 16), b1);
          _mm512_storeu_si512(y + (m0 + m) * N + block * 32, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
      }
    }
    if (saved.palette != 0) {
      _tile_loadconfig(&saved);
    } else {
      _tile_release();
    }
  });
}
#endif

bool tile_linear_supported() {
#ifdef TT_AMX
  return amx_permitted();
#else
  return false;
#endif
}

// x: [..., K] bf16; tiles: [N, K] bf16 in the tile layout; bias: [N] or none. Returns [..., N].
at::Tensor tile_linear(const at::Tensor& x, const at::Tensor& tiles, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(tile_linear_supported(), "tile_linear: this CPU (or build) has no AMX bf16 tiles");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && tiles.scalar_type() == at::kBFloat16,
              "tile_linear: x and the weight must be bfloat16");
  TORCH_CHECK(tiles.dim() == 2 && tiles.is_contiguous(), "tile_linear: the weight must be a contiguous [N, K]");
  const int64_t N = tiles.size(0), K = tiles.size(1);
  TORCH_CHECK(N % 32 == 0 && K % 32 == 0, "tile_linear: N and K must be multiples of 32, got ", N, " and ", K);
  TORCH_CHECK(x.size(-1) == K, "tile_linear: x has ", x.size(-1), " features, the weight ", K);
  if (bias.has_value()) {
    TORCH_CHECK(bias->scalar_type() == at::kBFloat16 && bias->numel() == N,
                "tile_linear: the bias must be bfloat16 with ", N, " elements");
  }
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  auto y = at::empty(sizes, x.options());
  const int64_t M = x.numel() / K;
  if (M == 0) return y;
  // Past 16 rows the A tiles hold 16 rows each: pad the input to whole tiles with zero rows.
  at::Tensor xs = x.contiguous().view({M, K});
  const int64_t padded = (M + 15) / 16 * 16;
  if (M > 16 && padded != M) xs = at::constant_pad_nd(xs, {0, 0, 0, padded - M});
  at::Tensor bc = bias.has_value() ? bias->contiguous() : at::Tensor();
#ifdef TT_AMX
  run_tiles(static_cast<const uint16_t*>(xs.data_ptr()), static_cast<const uint16_t*>(tiles.data_ptr()),
            bias.has_value() ? static_cast<const uint16_t*>(bc.data_ptr()) : nullptr,
            static_cast<uint16_t*>(y.data_ptr()), M, N, K);
#endif
  return y;
}

// The tile kernel for at most `small_rows` rows, oneDNN's kernel on its prepacked weight beyond.
at::Tensor linear(const at::Tensor& x, const at::Tensor& tiles, const at::Tensor& packed,
                  const std::optional<at::Tensor>& bias, int64_t small_rows) {
  if (x.numel() <= small_rows * x.size(-1)) return tile_linear(x, tiles, bias);
  return tt_kernels::onednn_packed_linear(x, packed, bias);
}

}  // namespace

TT_LIBRARY_FRAGMENT(m) {
  m.def("tile_linear_supported() -> bool", &tile_linear_supported);  // no tensors: a catch-all kernel
  m.def("tile_linear(Tensor x, Tensor tiles, Tensor? bias) -> Tensor");
  m.def("linear(Tensor x, Tensor tiles, Tensor packed, Tensor? bias, int small_rows) -> Tensor");
}

TT_LIBRARY_IMPL(CPU, m) {
  m.impl("tile_linear", &tile_linear);
  m.impl("linear", &linear);
}

// oneDNN's prepacked weight is an opaque MkldnnCPU tensor, which makes the call dispatch there.
TT_LIBRARY_IMPL(MkldnnCPU, m) { m.impl("linear", &linear); }
