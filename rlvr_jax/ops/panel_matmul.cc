// y[M, N] = x[M, K] @ w, with w packed in panels of 16 columns: w_P_K_16[p, k, j] = w[k, 16p + j],
// and y as [M, N/16, 16] (the same memory as [M, N]).
//
// An XLA FFI custom call for the sampler's decode products on x86-64 CPUs with AVX2 and FMA
// (see panel_matmul.py for why and when). Each panel (K x 16 floats, contiguous) is read once
// from memory and then stays in L1 while every 6-row block of x runs over it: 6 x 16
// accumulators in 12 ymm registers, two FMAs per x value broadcast. Panels are shared out
// among XLA's intra-op thread pool and the calling thread.
//
// Summation order: for each output, k = 0, 1, ..., K-1 in float32, one fused multiply-add each.

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kPanel = 16;  // columns per panel: two 8-float ymm registers
constexpr int64_t kRows = 6;    // rows per register tile: 12 accumulators + 2 panel + 1 x

// One tile: rows [0, R) of x against one panel, written to y (leading dimension ldy). With
// `prefetch` (the next panel), one of its lines per k is fetched into L2 meanwhile: a panel
// spans several 4 KB pages, across which the hardware prefetcher does not follow (5-7% faster
// at M = 64, measured with the weights streamed from memory).
template <int R>
inline void Tile(int64_t k_size, const float* x, int64_t ldx, const float* w, float* y,
                 int64_t ldy, const float* prefetch) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k_size; ++k) {
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * kPanel), _MM_HINT_T1);
    const __m256 w_lo = _mm256_loadu_ps(w + k * kPanel);
    const __m256 w_hi = _mm256_loadu_ps(w + k * kPanel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(x + r * ldx + k);
      lo[r] = _mm256_fmadd_ps(a, w_lo, lo[r]);
      hi[r] = _mm256_fmadd_ps(a, w_hi, hi[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(y + r * ldy, lo[r]);
    _mm256_storeu_ps(y + r * ldy + 8, hi[r]);
  }
}

// All rows of x against panels [p_begin, p_end).
void Panels(int64_t p_begin, int64_t p_end, int64_t m_size, int64_t k_size, const float* x,
            const float* w, float* y, int64_t n_size) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    const float* wp = w + p * k_size * kPanel;
    float* yp = y + p * kPanel;
    // The first tile over this panel fetches the next one.
    const float* next = p + 1 < p_end ? wp + k_size * kPanel : nullptr;
    int64_t m = 0;
    for (; m + kRows <= m_size; m += kRows, next = nullptr)
      Tile<kRows>(k_size, x + m * k_size, k_size, wp, yp + m * n_size, n_size, next);
    const float* xm = x + m * k_size;
    float* ym = yp + m * n_size;
    switch (m_size - m) {
      case 5: Tile<5>(k_size, xm, k_size, wp, ym, n_size, next); break;
      case 4: Tile<4>(k_size, xm, k_size, wp, ym, n_size, next); break;
      case 3: Tile<3>(k_size, xm, k_size, wp, ym, n_size, next); break;
      case 2: Tile<2>(k_size, xm, k_size, wp, ym, n_size, next); break;
      case 1: Tile<1>(k_size, xm, k_size, wp, ym, n_size, next); break;
      default: break;
    }
  }
}

// Items [0, n) shared out among the pool and the calling thread, in chunks handed out by an
// atomic counter (about four chunks per thread: even shares when a thread starts late). The
// state is held by shared_ptr: a task the pool starts after the caller has returned must still
// find it alive (it then finds no chunk left and does nothing).
struct Work {
  int64_t chunks, chunk_items, items;
  std::function<void(int64_t, int64_t)> fn;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  void Run() {
    for (int64_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t begin = c * chunk_items;
      fn(begin, std::min(begin + chunk_items, items));
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

void ParallelFor(ffi::ThreadPool& pool, int64_t items, std::function<void(int64_t, int64_t)> fn) {
  const int64_t threads = std::max<int64_t>(1, pool.num_threads());
  auto work = std::make_shared<Work>();
  work->items = items;
  work->chunk_items = std::max<int64_t>(1, items / (4 * threads));
  work->chunks = (items + work->chunk_items - 1) / work->chunk_items;
  work->fn = std::move(fn);
  const int64_t helpers = std::min<int64_t>(threads, work->chunks) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([work] { work->Run(); });
  work->Run();
  // Every chunk is taken; wait for those other threads are still running.
  while (work->done.load(std::memory_order_acquire) < work->chunks) _mm_pause();
}

ffi::Error PanelMatmul(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                       ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> y) {
  const auto x_dims = x.dimensions();
  const auto w_dims = w.dimensions();
  const auto y_dims = y->dimensions();
  if (x_dims.size() != 2 || w_dims.size() != 3 || y_dims.size() != 3 || w_dims[2] != kPanel)
    return ffi::Error::InvalidArgument("panel_matmul: expects x [M, K], w [P, K, 16], y [M, P, 16]");
  const int64_t m_size = x_dims[0], k_size = x_dims[1], panels = w_dims[0];
  if (w_dims[1] != k_size || y_dims[0] != m_size || y_dims[1] != panels || y_dims[2] != kPanel)
    return ffi::Error::InvalidArgument("panel_matmul: shapes of x, w and y do not match");
  if (m_size == 0 || panels == 0) return ffi::Error::Success();
  const float* xp = x.typed_data();
  const float* wp = w.typed_data();
  float* yp = y->typed_data();
  ParallelFor(pool, panels, [=](int64_t begin, int64_t end) {
    Panels(begin, end, m_size, k_size, xp, wp, yp, panels * kPanel);
  });
  return ffi::Error::Success();
}

// w [K, N] -> panels [N/16, K, 16]: each panel's K rows of 64 bytes, read from K rows of w.
ffi::Error PackPanels(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> w,
                      ffi::ResultBuffer<ffi::F32> out) {
  const auto w_dims = w.dimensions();
  const auto o_dims = out->dimensions();
  if (w_dims.size() != 2 || o_dims.size() != 3 || w_dims[1] % kPanel != 0 ||
      o_dims[0] != w_dims[1] / kPanel || o_dims[1] != w_dims[0] || o_dims[2] != kPanel)
    return ffi::Error::InvalidArgument("pack_panels: expects w [K, 16P] and out [P, K, 16]");
  const int64_t k_size = w_dims[0], n_size = w_dims[1];
  const float* src = w.typed_data();
  float* dst = out->typed_data();
  ParallelFor(pool, n_size / kPanel, [=](int64_t begin, int64_t end) {
    for (int64_t k = 0; k < k_size; ++k)
      for (int64_t p = begin; p < end; ++p) {
        const float* from = src + k * n_size + p * kPanel;
        float* to = dst + (p * k_size + k) * kPanel;
        _mm256_storeu_ps(to, _mm256_loadu_ps(from));
        _mm256_storeu_ps(to + 8, _mm256_loadu_ps(from + 8));
      }
  });
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RlvrPanelMatmul, PanelMatmul,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(RlvrPackPanels, PackPanels,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
