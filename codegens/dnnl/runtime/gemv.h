// gemv.h -- y = x W (+ bias) for a few rows of x (a decoder's token, a short prompt) by a constant float32 weight, read
// in the layout oneDNN's matmul chose for it, so the weight is held once whichever kernel reads it (Builder::Gemv,
// matmul.cc).
//
// At one row a matmul reads each weight once for two flops: it runs at the speed the weight streams from the cache
// or memory. oneDNN 3.2's brgemm matmul at M = 1 streamed at 19-31 GB/s on 2 threads of an AVX-512 EPYC where a
// plain loop over the same blocked weight streams at 45-85 GB/s. Here each thread takes whole column blocks of W
// (a block's K x nb panel is contiguous in oneDNN's blocked layouts) and sums x[m, k] * W[k, block] in registers,
// up to kGroupRows rows of x per pass over the panel. AVX-512 only: on AVX2 oneDNN keeps the matmul.
#ifndef BYOC_DNNL_GEMV_H_
#define BYOC_DNNL_GEMV_H_

#include <immintrin.h>

#include <cstdint>

namespace byoc {
namespace dnnl_runtime {
namespace gemv {

// Up to this many rows of x a matmul is a token's GEMV (Builder::StreamsWeights: the weight streams, the team takes its
// columns as they come free).
constexpr int64_t kMaxRows = 4;
// Rows of x one pass over a panel sums (their accumulators stay in registers); up to kMaxGemmRows rows a matmul by a
// constant weight is this kernel all the same, a pass per group of kGroupRows over each panel, which stays in the
// core's L2 between them: a short prompt's rows still read the weight from memory once. A prompt of 6 to 8 tokens
// ran in 0.82-0.96x the time of oneDNN's brgemm matmuls (HF and genai Llama, Qwen2, GPT-2 fp32, two threads, AMD
// EPYC AVX-512); at 12 and 16 rows, where the sums outweigh the weight's reading, in 1.05x: those stay oneDNN's.
constexpr int64_t kGroupRows = 4;
constexpr int64_t kMaxGemmRows = 8;

// Where element (k, n) of the weight [K, N] is: (k / kb) * k_stride + (n / nb) * n_stride + (k % kb) * row + n % nb
// floats from its start. oneDNN's blocked BA16a64b is kb 16, nb 64, row 64; a plain [K, N] with rows `ld` floats
// apart is kb K, nb 64 (a column chunk), n_stride 64, row ld.
struct Layout {
  int64_t k, n, kb, nb, k_stride, n_stride, row;
  int64_t blocks() const { return (n + nb - 1) / nb; }
};

// Columns [n0, n0 + 16 * V) of rows [0, M) of y, from the block's panel at `w` (the weight's (0, n0)).
template <int M, int V>
__attribute__((target("avx512f"))) inline void Panel(const Layout& l, const float* x, const float* w,
                                                     const float* bias, float* y, int64_t n0) {
  // Two sums per output, of even and odd k: eight independent FMA chains at one row, enough to keep the loads busy.
  // Every loop over rows and vectors is unrolled, so the sums stay in registers.
  __m512 even[M][V], odd[M][V];
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) even[m][v] = odd[m][v] = _mm512_setzero_ps();
  const float* block = w;
  for (int64_t k0 = 0; k0 < l.k; k0 += l.kb, block += l.k_stride) {
    const float* p = block;
    const int64_t k1 = k0 + l.kb < l.k ? k0 + l.kb : l.k;
    int64_t k = k0;
    for (; k + 2 <= k1; k += 2, p += 2 * l.row) {
      __m512 a[V], b[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[v] = _mm512_loadu_ps(p + 16 * v), b[v] = _mm512_loadu_ps(p + l.row + 16 * v);
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
        const __m512 xa = _mm512_set1_ps(x[m * l.k + k]), xb = _mm512_set1_ps(x[m * l.k + k + 1]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          even[m][v] = _mm512_fmadd_ps(xa, a[v], even[m][v]);
          odd[m][v] = _mm512_fmadd_ps(xb, b[v], odd[m][v]);
        }
      }
    }
    if (k < k1) {
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
        const __m512 xa = _mm512_set1_ps(x[m * l.k + k]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) even[m][v] = _mm512_fmadd_ps(xa, _mm512_loadu_ps(p + 16 * v), even[m][v]);
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      __m512 s = _mm512_add_ps(even[m][v], odd[m][v]);
      if (bias) s = _mm512_add_ps(s, _mm512_loadu_ps(bias + n0 + 16 * v));
      _mm512_storeu_ps(y + m * l.n + n0 + 16 * v, s);
    }
}

template <int M>
__attribute__((target("avx512f"))) inline void BlocksOf(const Layout& l, const float* x, const float* w,
                                                        const float* bias, float* y, int64_t b0, int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t n0 = b * l.nb, width = l.n - n0 < l.nb ? l.n - n0 : l.nb;
    const float* panel = w + b * l.n_stride;
    switch (width / 16) {
      case 1: Panel<M, 1>(l, x, panel, bias, y, n0); break;
      case 2: Panel<M, 2>(l, x, panel, bias, y, n0); break;
      case 3: Panel<M, 3>(l, x, panel, bias, y, n0); break;
      default: Panel<M, 4>(l, x, panel, bias, y, n0); break;
    }
  }
}

// Column blocks [b0, b1) of y [rows, N] = x [rows, K] W (+ bias): rows <= kMaxGemmRows, N a multiple of 16 and
// l.nb a multiple of 16 up to 64 (Builder::Gemv checks both). Panel by panel, each group of rows in turn.
inline void Blocks(const Layout& l, const float* x, int64_t rows, const float* w, const float* bias, float* y,
                   int64_t b0, int64_t b1) {
  auto group = [&](int64_t m0, int64_t c0, int64_t c1) {
    const float* xs = x + m0 * l.k;
    float* ys = y + m0 * l.n;
    switch (rows - m0 < kGroupRows ? rows - m0 : kGroupRows) {
      case 1: return BlocksOf<1>(l, xs, w, bias, ys, c0, c1);
      case 2: return BlocksOf<2>(l, xs, w, bias, ys, c0, c1);
      case 3: return BlocksOf<3>(l, xs, w, bias, ys, c0, c1);
      default: return BlocksOf<4>(l, xs, w, bias, ys, c0, c1);
    }
  };
  if (rows <= kGroupRows) return group(0, b0, b1);
  for (int64_t b = b0; b < b1; ++b)
    for (int64_t m0 = 0; m0 < rows; m0 += kGroupRows) group(m0, b, b + 1);
}

}  // namespace gemv
}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_GEMV_H_
