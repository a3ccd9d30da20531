// nbits.h -- the loops of weight-only int4/int8 matmuls (onnxruntime's MatMulNBits) on the packed weight:
// y[m, n] = sum_k x[m, k] * (code[n, k] - zero[n, k / block]) * scale[n, k / block] (+ bias[n]).
//
// B stays packed as the model has it: row n of B^T is `blocks` blocks of `block` codes, `bits` bits each, low
// bits first (4 bits: two codes a byte). Two loops:
// - Dot (one row of x: a decoder's token, memory-bound): each block's codes are widened to floats in
//   registers and multiplied into x, sum_j code_j * x_j per block, then scaled; the zero point's share,
//   zero * scale * sum_j x_j, is taken off once per output with the block sums of x (BlockSums), so the
//   inner loop is a load, a widening and an FMA per 8 codes, four rows of B^T at a time. AVX2 + FMA, or plain
//   C++, chosen by what the CPU has (an AVX-512 form is left for a machine to measure it on).
// - GEMM (many rows): B^T's rows dequantized, (code - zero) * scale, 16 columns and a chunk of K at a time into
//   a panel in L1, for a 6x16 FMA microkernel over x packed in 6-row strips (AVX2); or, in plain C++, into
//   panels for oneDNN's sgemm.
// Both read codes past K in the last block (padding): Dot multiplies them by zeros (x padded); the GEMM
// dequantizes them where its products do not reach (each chunk's depth stops at K).
#ifndef BYOC_DNNL_NBITS_H_
#define BYOC_DNNL_NBITS_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace byoc {
namespace dnnl_runtime {
namespace nbits {

struct Geometry {
  int64_t k, n, bits, block, blocks;
  int64_t bytes_per_block() const { return block * bits / 8; }
  int64_t padded_k() const { return blocks * block; }
};

// The zero point of block b of row n: one value, a byte per block, or a float per block.
struct Zeros {
  float uniform = 0.0f;
  const uint8_t* bytes = nullptr;
  const float* floats = nullptr;
  float at(int64_t i) const { return bytes ? static_cast<float>(bytes[i]) : floats ? floats[i] : uniform; }
};

// The sum of each block of the (padded) row x.
inline void BlockSums(const Geometry& g, const float* x, float* sums) {
  for (int64_t b = 0; b < g.blocks; ++b) {
    float s = 0.0f;
    for (int64_t j = 0; j < g.block; ++j) s += x[b * g.block + j];
    sums[b] = s;
  }
}

// -- plain C++ --------------------------------------------------------------------------------
inline float BlockDotScalar(const uint8_t* codes, const float* x, int64_t block, int64_t bits) {
  float s = 0.0f;
  if (bits == 4) {
    for (int64_t j = 0; j < block / 2; ++j)
      s += static_cast<float>(codes[j] & 15) * x[2 * j] + static_cast<float>(codes[j] >> 4) * x[2 * j + 1];
  } else {
    for (int64_t j = 0; j < block; ++j) s += static_cast<float>(codes[j]) * x[j];
  }
  return s;
}

// -- AVX2 + FMA ---------------------------------------------------------------------------------
// 16 codes (8 bytes of 4-bit codes, or 16 bytes of 8-bit ones) as 16 bytes in order.
__attribute__((target("avx2,fma"))) inline __m128i Codes16(const uint8_t* p, int64_t bits) {
  if (bits == 8) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  __m128i low = _mm_and_si128(packed, _mm_set1_epi8(15));
  __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(15));
  return _mm_unpacklo_epi8(low, high);
}

__attribute__((target("avx2,fma"))) inline float BlockDotAvx2(const uint8_t* codes, const float* x, int64_t block,
                                                              int64_t bits) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t step_bytes = 16 * bits / 8;
  for (int64_t j = 0; j < block; j += 16, codes += step_bytes) {
    __m128i c = Codes16(codes, bits);
    __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
    __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(c, 8)));
    acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), acc0);
    acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 8), acc1);
  }
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// sum_b scale[b] * zero[b] * sums[b] over the blocks of row n: the zero points' share of y[n].
__attribute__((target("avx2,fma"))) inline float ShiftAvx2(const Geometry& g, const float* scales, const Zeros& zeros,
                                                          const float* sums, int64_t n) {
  const float* s = scales + n * g.blocks;
  const int64_t base = n * g.blocks;
  __m256 acc = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= g.blocks; b += 8) {
    __m256 z = zeros.bytes    ? _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                    _mm_loadl_epi64(reinterpret_cast<const __m128i*>(zeros.bytes + base + b))))
               : zeros.floats ? _mm256_loadu_ps(zeros.floats + base + b)
                              : _mm256_set1_ps(zeros.uniform);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s + b), z), _mm256_loadu_ps(sums + b), acc);
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float total = _mm_cvtss_f32(h);
  for (; b < g.blocks; ++b) total += s[b] * zeros.at(base + b) * sums[b];
  return total;
}

// y[n] for n in [n0, n1) of one (padded) row x whose block sums are `sums`, four rows of B^T at a time: each
// x vector loaded once for four, each block's sum of code * x scaled into a vector total (one horizontal sum
// per output), the zero points' share taken off once per output (ShiftAvx2). `Steps` is the block's count of
// 16-code steps when known at compile time (0: read from g), so the common blocks' loops unroll whole (block
// 32 took 1.7x block 128's time per code with a loop of two steps).
template <int Steps>
__attribute__((target("avx2,fma"))) inline void DotAvx2Of(const Geometry& g, const uint8_t* packed,
                                                         const float* scales, const Zeros& zeros, const float* bias,
                                                         const float* x, const float* sums, float* y, int64_t n0,
                                                         int64_t n1) {
  const int64_t row_bytes = g.blocks * g.bytes_per_block(), step_bytes = 16 * g.bits / 8;
  const int64_t steps = Steps ? Steps : g.block / 16;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    __m256 total0 = _mm256_setzero_ps(), total1 = _mm256_setzero_ps(), total2 = _mm256_setzero_ps(),
           total3 = _mm256_setzero_ps();
    const uint8_t* codes = packed + n * row_bytes;
    const float* scale = scales + n * g.blocks;
    for (int64_t b = 0; b < g.blocks; ++b) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
             acc3 = _mm256_setzero_ps();
      const float* xb = x + b * g.block;
      for (int64_t j = 0; j < steps; ++j) {
        __m256 x0 = _mm256_loadu_ps(xb + 16 * j), x1 = _mm256_loadu_ps(xb + 16 * j + 8);
        const uint8_t* p = codes + j * step_bytes;
#define BYOC_NBITS_STEP(c, acc)                                                                          \
  {                                                                                                      \
    __m128i q = Codes16(p + (c) * row_bytes, g.bits);                                                    \
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), x0, acc);                        \
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8))), x1, acc);     \
  }
        BYOC_NBITS_STEP(0, acc0)
        BYOC_NBITS_STEP(1, acc1)
        BYOC_NBITS_STEP(2, acc2)
        BYOC_NBITS_STEP(3, acc3)
#undef BYOC_NBITS_STEP
      }
      codes += g.bytes_per_block();
      total0 = _mm256_fmadd_ps(acc0, _mm256_broadcast_ss(scale + b), total0);
      total1 = _mm256_fmadd_ps(acc1, _mm256_broadcast_ss(scale + g.blocks + b), total1);
      total2 = _mm256_fmadd_ps(acc2, _mm256_broadcast_ss(scale + 2 * g.blocks + b), total2);
      total3 = _mm256_fmadd_ps(acc3, _mm256_broadcast_ss(scale + 3 * g.blocks + b), total3);
    }
    __m256 totals[4] = {total0, total1, total2, total3};
    for (int c = 0; c < 4; ++c) {
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(totals[c]), _mm256_extractf128_ps(totals[c], 1));
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      s = _mm_add_ss(s, _mm_movehdup_ps(s));
      float v = _mm_cvtss_f32(s) - ShiftAvx2(g, scales, zeros, sums, n + c);
      y[n + c] = bias ? v + bias[n + c] : v;
    }
  }
  for (; n < n1; ++n) {
    float total = 0.0f;
    for (int64_t b = 0; b < g.blocks; ++b) {
      int64_t i = n * g.blocks + b;
      float d = BlockDotAvx2(packed + n * row_bytes + b * g.bytes_per_block(), x + b * g.block, g.block, g.bits);
      total += scales[i] * (d - zeros.at(i) * sums[b]);
    }
    y[n] = bias ? total + bias[n] : total;
  }
}

inline void DotAvx2(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                    const float* bias, const float* x, const float* sums, float* y, int64_t n0, int64_t n1) {
  switch (g.block) {
    case 16: return DotAvx2Of<1>(g, packed, scales, zeros, bias, x, sums, y, n0, n1);
    case 32: return DotAvx2Of<2>(g, packed, scales, zeros, bias, x, sums, y, n0, n1);
    case 64: return DotAvx2Of<4>(g, packed, scales, zeros, bias, x, sums, y, n0, n1);
    case 128: return DotAvx2Of<8>(g, packed, scales, zeros, bias, x, sums, y, n0, n1);
    default: return DotAvx2Of<0>(g, packed, scales, zeros, bias, x, sums, y, n0, n1);
  }
}

// As DotAvx2, in plain C++.
inline void DotScalar(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                const float* bias, const float* x, const float* sums, float* y, int64_t n0, int64_t n1) {
  const int64_t row_bytes = g.blocks * g.bytes_per_block();
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* codes = packed + n * row_bytes;
    const float* scale = scales + n * g.blocks;
    float total = 0.0f;
    for (int64_t b = 0; b < g.blocks; ++b) {
      float d = BlockDotScalar(codes + b * g.bytes_per_block(), x + b * g.block, g.block, g.bits);
      total += scale[b] * (d - zeros.at(n * g.blocks + b) * sums[b]);
    }
    y[n] = bias ? total + bias[n] : total;
  }
}

using DotRows = void (*)(const Geometry&, const uint8_t*, const float*, const Zeros&, const float*, const float*,
                        const float*, float*, int64_t, int64_t);

inline DotRows ChooseDot() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return DotAvx2;
  return DotScalar;
}

// -- GEMM on AVX2: B^T dequantized into 16-column panels, a 6x16 FMA microkernel ----------------------------
constexpr int64_t kNr = 16;  // columns of a packed panel (two ymm)
constexpr int64_t kMr = 6;   // rows of x per microkernel call: 12 accumulators, 2 panel loads, 1 broadcast

__attribute__((target("avx2,fma"))) inline void Transpose8x8(__m256* r) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Blocks [b0, b1) of rows [n0, n0 + rows) of B^T (rows <= kNr) dequantized, (code - zero) * scale, into the panel
// bp[k][kNr] (k from b0's first code; columns past `rows` zero): eight rows' 8 codes at a time, transposed.
__attribute__((target("avx2,fma"))) inline void PackPanelAvx2(const Geometry& g, const uint8_t* packed,
                                                             const float* scales, const Zeros& zeros, int64_t n0,
                                                             int64_t rows, int64_t b0, int64_t b1, float* bp) {
  const int64_t row_bytes = g.blocks * g.bytes_per_block(), step_bytes = 16 * g.bits / 8;
  for (int64_t half = 0; half < 2; ++half) {
    for (int64_t b = b0; b < b1; ++b) {
      __m256 scale[8], zero[8];
      const uint8_t* codes[8];
      for (int c = 0; c < 8; ++c) {
        int64_t r = half * 8 + c, i = (n0 + r) * g.blocks + b;
        bool valid = r < rows;
        scale[c] = _mm256_set1_ps(valid ? scales[i] : 0.0f);
        zero[c] = _mm256_set1_ps(valid ? zeros.at(i) : 0.0f);
        codes[c] = packed + (valid ? n0 + r : n0) * row_bytes + b * g.bytes_per_block();
      }
      float* out = bp + (b - b0) * g.block * kNr + half * 8;
      for (int64_t j = 0; j < g.block; j += 16) {
        __m256 low[8], high[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          __m128i q = Codes16(codes[c] + (j / 16) * step_bytes, g.bits);
          low[c] = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), zero[c]), scale[c]);
          high[c] = _mm256_mul_ps(
              _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8))), zero[c]), scale[c]);
        }
        Transpose8x8(low);
        Transpose8x8(high);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          _mm256_storeu_ps(out + (j + i) * kNr, low[i]);
          _mm256_storeu_ps(out + (j + 8 + i) * kNr, high[i]);
        }
      }
    }
  }
}

// c[MR][16] (row stride ldc) = (accumulate ? c : 0) + a x bp[depth][16], a packed as [depth][kMr] (rows past MR
// unread).
template <int MR>
__attribute__((target("avx2,fma"))) inline void MicroAvx2(int64_t depth, const float* a, const float* bp, float* c,
                                                         int64_t ldc, bool accumulate) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc[i][1] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < depth; ++k) {
    __m256 w0 = _mm256_loadu_ps(bp + k * kNr), w1 = _mm256_loadu_ps(bp + k * kNr + 8);
  #pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
      __m256 v = _mm256_broadcast_ss(a + k * kMr + i);
      acc[i][0] = _mm256_fmadd_ps(v, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(v, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc[i][0]);
    _mm256_storeu_ps(c + i * ldc + 8, acc[i][1]);
  }
}

__attribute__((target("avx2,fma"))) inline void MicroRowsAvx2(int64_t rows, int64_t depth, const float* a,
                                                             const float* bp, float* c, int64_t ldc, bool accumulate) {
  switch (rows) {
    case 1: return MicroAvx2<1>(depth, a, bp, c, ldc, accumulate);
    case 2: return MicroAvx2<2>(depth, a, bp, c, ldc, accumulate);
    case 3: return MicroAvx2<3>(depth, a, bp, c, ldc, accumulate);
    case 4: return MicroAvx2<4>(depth, a, bp, c, ldc, accumulate);
    case 5: return MicroAvx2<5>(depth, a, bp, c, ldc, accumulate);
    default: return MicroAvx2<6>(depth, a, bp, c, ldc, accumulate);
  }
}

// Rows [r0, r1) of x [m, K] (r0 a multiple of kMr) packed in 6-row strips, ap[strip][k][kMr] (rows past m zero):
// what the microkernel broadcasts from.
inline void PackRows(const Geometry& g, const float* x, int64_t m, int64_t r0, int64_t r1, float* ap) {
  for (int64_t r = r0; r < r1; r += kMr) {
    float* strip = ap + (r / kMr) * g.k * kMr;
    for (int64_t i = 0; i < kMr; ++i) {
      if (r + i >= m) {
        for (int64_t k = 0; k < g.k; ++k) strip[k * kMr + i] = 0.0f;
        continue;
      }
      const float* row = x + (r + i) * g.k;
      for (int64_t k = 0; k < g.k; ++k) strip[k * kMr + i] = row[k];
    }
  }
}

// y[:, n0:n1] (row stride g.n) = x [m, K] times rows [n0, n1) of B^T, K in chunks of `chunk_blocks` blocks: per
// chunk, each 16 columns are dequantized once (bp: chunk codes x 16 floats, in L1) and the 6x16 microkernel runs
// down every strip of x (ap: PackRows). `tile`: m x 16 floats for the last columns when fewer than 16.
__attribute__((target("avx2,fma"))) inline void GemmAvx2(const Geometry& g, const uint8_t* packed, const float* scales,
                                                        const Zeros& zeros, const float* ap, int64_t m, float* y,
                                                        int64_t n0, int64_t n1, int64_t chunk_blocks, float* bp,
                                                        float* tile) {
  for (int64_t b0 = 0; b0 < g.blocks; b0 += chunk_blocks) {
    const int64_t b1 = std::min(g.blocks, b0 + chunk_blocks), k0 = b0 * g.block;
    const int64_t depth = std::min(g.k, b1 * g.block) - k0;
    for (int64_t n = n0; n < n1; n += kNr) {
      const int64_t cols = std::min(kNr, n1 - n);
      PackPanelAvx2(g, packed, scales, zeros, n, cols, b0, b1, bp);
      float* c = cols == kNr ? y + n : tile;
      const int64_t ldc = cols == kNr ? g.n : kNr;
      for (int64_t r = 0; r < m; r += kMr)
        MicroRowsAvx2(std::min(kMr, m - r), depth, ap + (r / kMr) * g.k * kMr + k0 * kMr, bp, c + r * ldc, ldc,
                      b0 > 0);
      if (cols < kNr && b1 == g.blocks) {
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = 0; j < cols; ++j) y[r * g.n + n + j] = tile[r * kNr + j];
      }
    }
  }
}

// Blocks [b0, b1) of rows [n0, n1) of B^T dequantized into w (row r at w + (r - n0) * ld, ld >= the blocks'
// codes), for oneDNN's sgemm where the CPU has no AVX2.
inline void DequantizeScalar(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                             float* w, int64_t ld, int64_t n0, int64_t n1, int64_t b0, int64_t b1) {
  const int64_t row_bytes = g.blocks * g.bytes_per_block();
  for (int64_t n = n0; n < n1; ++n) {
    float* out = w + (n - n0) * ld - b0 * g.block;
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* codes = packed + n * row_bytes + b * g.bytes_per_block();
      float s = scales[n * g.blocks + b], z = zeros.at(n * g.blocks + b);
      for (int64_t j = 0; j < g.block; ++j) {
        int code = g.bits == 4 ? (codes[j / 2] >> (4 * (j % 2))) & 15 : codes[j];
        out[b * g.block + j] = (static_cast<float>(code) - z) * s;
      }
    }
  }
}


inline bool HasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

}  // namespace nbits
}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_NBITS_H_
