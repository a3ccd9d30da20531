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
// - int8 activations (MatMulNBits' accuracy_level 4, onnxruntime's CompInt8): x quantized per block to int8 as
//   MLAS does (QuantizeRow), the GEMV's block sums of code * q in integers (maddubs for 4-bit codes, widened
//   for 8-bit ones: DotInt8Avx2), scaled once per block; the GEMM takes q * scale as its float x. On AVX-512 VNNI
//   both are integer dots (DotInt8Vnni, GemmInt8Vnni: vpdpbusd; 4-bit codes 128 a load, in groups).
// Both read codes past K in the last block (padding): Dot multiplies them by zeros (x padded); the GEMM
// dequantizes them where its products do not reach (each chunk's depth stops at K).
#ifndef BYOC_DNNL_NBITS_H_
#define BYOC_DNNL_NBITS_H_

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu.h"
#include "simd.h"

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
  return SumOfLanes(_mm256_add_ps(acc0, acc1));
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
  float total = SumOfLanes(acc);
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
      float v = SumOfLanes(totals[c]) - ShiftAvx2(g, scales, zeros, sums, n + c);
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
  if (CpuHasAvx2Fma()) return DotAvx2;
  return DotScalar;
}

// -- int8 activations (MatMulNBits accuracy_level 4: onnxruntime's CompInt8) ---------------------------------
// x is quantized once per call, per block: scale = max|x| / 127, q = x * (127 / max|x|) rounded to nearest even
// (both divisions in float, as MLAS's QuantizeARow_CompInt8 does, so q and the scales are the ones onnxruntime
// computes), and each block's sum of code * q is an integer: y[n] = sum_b scale_x[b] * scale[n, b] *
// sum_j code_j * q_j - sum_b scale[n, b] * zero[n, b] * (scale_x[b] * sum_j q_j), the zero points' share from the
// block sums of the dequantized q (ShiftAvx2, as the float path). 4-bit codes meet q with maddubs (u8 x s8,
// pairs summed in int16: 2 * 15 * 128 cannot saturate); 8-bit codes are widened to int16 first (2 * 255 * 128
// would saturate maddubs), then madd.
//
// q's order: 4-bit codes come two a byte, low nibble first; a chunk of C = min(block, 32) codes is C/2 bytes, its
// low nibbles (codes 0, 2, ...) and high nibbles (codes 1, 3, ...) are unpacked as two halves of a register, so
// q is stored in that order, each chunk's even codes then its odd ones (8-bit: as x).
inline int64_t Int8Chunk(const Geometry& g) { return g.bits == 4 ? std::min<int64_t>(g.block, 32) : 0; }

// Where code j of a block sits in q (the chunk order above).
inline int64_t Int8Slot(int64_t j, int64_t chunk) {
  if (!chunk) return j;
  const int64_t p = j % chunk;
  return j - p + (p % 2) * (chunk / 2) + p / 2;
}

// The padded row x (padded_k floats) quantized: q [padded_k] in the chunk order, per block its scale and
// scale * sum q. Plain C++ for every CPU (the same values on each): a pass over x, small beside the GEMV's.
inline int8_t QuantizeValue(float v, float inverse) {
  // nearest, ties to even (MLAS's _mm256_round_ps(_MM_ROUND_NEAREST)): |v * inverse| <= 128 < 2^22, so adding and
  // taking 1.5 * 2^23 rounds it in the default rounding mode; then saturated to int8 as MLAS's packs do
  const float shifted = v * inverse + 12582912.0f;
  float r = shifted - 12582912.0f;
  r = r >= -128.0f ? r : -128.0f;  // NaN too, as cvtps_epi32's 0x80000000 saturates
  r = r <= 127.0f ? r : 127.0f;
  return static_cast<int8_t>(static_cast<int>(r));
}

inline void QuantizeRow(const Geometry& g, const float* x, int8_t* q, float* scales, float* sums) {
  const int64_t chunk = Int8Chunk(g), half = chunk / 2;
  for (int64_t b = 0; b < g.blocks; ++b) {
    const float* xb = x + b * g.block;
    float most = 0.0f;
    for (int64_t j = 0; j < g.block; ++j) {
      const float a = std::fabs(xb[j]);
      most = most > a ? most : a;
    }
    const float scale = most / 127.0f, inverse = most != 0.0f ? 127.0f / most : 0.0f;
    int8_t* qb = q + b * g.block;
    if (chunk) {
      for (int64_t c = 0; c < g.block; c += chunk)
        for (int64_t i = 0; i < half; ++i) {
          qb[c + i] = QuantizeValue(xb[c + 2 * i], inverse);
          qb[c + half + i] = QuantizeValue(xb[c + 2 * i + 1], inverse);
        }
    } else {
      for (int64_t j = 0; j < g.block; ++j) qb[j] = QuantizeValue(xb[j], inverse);
    }
    int sum = 0;
    for (int64_t j = 0; j < g.block; ++j) sum += qb[j];
    scales[b] = scale;
    sums[b] = scale * static_cast<float>(sum);
  }
}

// QuantizeRow on AVX2: the same values (MLAS's own steps: max of |x|, x * inverse rounded to nearest even,
// packed to int8 with saturation), 16 values at a time, each chunk's even values then its odd ones by a shuffle.
__attribute__((target("avx2,fma"))) inline void QuantizeRowAvx2(const Geometry& g, const float* x, int8_t* q,
                                                               float* scales, float* sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // each 16 bytes' even bytes, then its odd ones
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t b = 0; b < g.blocks; ++b) {
    const float* xb = x + b * g.block;
    __m256 most8 = _mm256_setzero_ps();
    for (int64_t j = 0; j < g.block; j += 8) most8 = _mm256_max_ps(most8, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(most8, 1), _mm256_castps256_ps128(most8));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float most = _mm_cvtss_f32(m4);
    const float scale = most / 127.0f, inverse = most != 0.0f ? 127.0f / most : 0.0f;
    const __m256 mul = _mm256_set1_ps(inverse);
    int8_t* qb = q + b * g.block;
    __m256i total = _mm256_setzero_si256();
    for (int64_t j = 0; j < g.block; j += 32) {
      __m128i v[2];
      for (int h = 0; h < 2 && j + 16 * h < g.block; ++h) {
        const float* p = xb + j + 16 * h;
        const __m256i lo = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p), mul),
                                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i hi = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p + 8), mul),
                                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        v[h] = _mm_packs_epi16(_mm_packs_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)),
                               _mm_packs_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)));
        total = _mm256_add_epi32(total, _mm256_madd_epi16(_mm256_cvtepi8_epi16(v[h]), _mm256_set1_epi16(1)));
      }
      if (g.block == 16) {  // one chunk of 16 (4 bits) or as x (8 bits)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + j), g.bits == 4 ? _mm_shuffle_epi8(v[0], split) : v[0]);
      } else if (g.bits == 4) {  // a chunk of 32: its 16 even values, then its 16 odd ones
        const __m128i a = _mm_shuffle_epi8(v[0], split), c = _mm_shuffle_epi8(v[1], split);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + j), _mm_unpacklo_epi64(a, c));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + j + 16), _mm_unpackhi_epi64(a, c));
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + j), v[0]);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + j + 16), v[1]);
      }
    }
    __m128i t4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t4 = _mm_add_epi32(t4, _mm_unpackhi_epi64(t4, t4));
    t4 = _mm_add_epi32(t4, _mm_shuffle_epi32(t4, 1));
    scales[b] = scale;
    sums[b] = scale * static_cast<float>(_mm_cvtsi128_si32(t4));
  }
}

// Rows [0, rows) of x [rows, K] with each block's values replaced by their int8 quantization dequantized,
// q * scale (the GEMM's input under accuracy_level 4: the same products onnxruntime's int8 GEMM sums).
inline void FakeQuantizeRows(const Geometry& g, const float* x, int64_t rows, float* out) {
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t k0 = 0; k0 < g.k; k0 += g.block) {
      const int64_t size = std::min(g.block, g.k - k0);  // the last block's values past K are zeros: no larger
      const float* xb = x + m * g.k + k0;
      float* ob = out + m * g.k + k0;
      float most = 0.0f;
      for (int64_t j = 0; j < size; ++j) {
        const float a = std::fabs(xb[j]);
        most = most > a ? most : a;
      }
      const float scale = most / 127.0f, inverse = most != 0.0f ? 127.0f / most : 0.0f;
      for (int64_t j = 0; j < size; ++j) ob[j] = static_cast<float>(QuantizeValue(xb[j], inverse)) * scale;
    }
  }
}

// A row quantized by QuantizeRow.
struct QuantizedRow {
  const int8_t* q;
  const float* scales;
  const float* sums;
  const int32_t* lane_sums = nullptr;  // the VNNI dots' 4-bit codes: each group's 16 lanes' sums of q (GroupLaneSums)
};

inline int64_t BlockDotInt8Scalar(const uint8_t* codes, const int8_t* q, int64_t block, int64_t bits) {
  int64_t d = 0;
  if (bits == 4) {
    const int64_t chunk = std::min<int64_t>(block, 32);
    for (int64_t c = 0; c < block; c += chunk, codes += chunk / 2, q += chunk)
      for (int64_t i = 0; i < chunk / 2; ++i) d += (codes[i] & 15) * q[i] + (codes[i] >> 4) * q[chunk / 2 + i];
  } else {
    for (int64_t j = 0; j < block; ++j) d += codes[j] * q[j];
  }
  return d;
}

// As DotInt8Avx2, in plain C++ (the same integers; the float sums in another order).
inline void DotInt8Scalar(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                          const float* bias, const QuantizedRow& x, float* y, int64_t n0, int64_t n1) {
  const int64_t row_bytes = g.blocks * g.bytes_per_block();
  for (int64_t n = n0; n < n1; ++n) {
    float total = 0.0f;
    for (int64_t b = 0; b < g.blocks; ++b) {
      const int64_t i = n * g.blocks + b;
      const int64_t d =
          BlockDotInt8Scalar(packed + n * row_bytes + b * g.bytes_per_block(), x.q + b * g.block, g.block, g.bits);
      total += static_cast<float>(d) * (x.scales[b] * scales[i]) - scales[i] * zeros.at(i) * x.sums[b];
    }
    y[n] = bias ? total + bias[n] : total;
  }
}

// 8 int32 partial sums of 32 codes times 32 q (in the chunk order).
template <int Bits>
__attribute__((target("avx2,fma"))) inline __m256i Dot32Int8(const uint8_t* codes, const int8_t* q) {
  if (Bits == 4) {
    // the 16 bytes in both halves (one load), the high half shifted by 4: low nibbles, then high nibbles
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
    const __m256i c = _mm256_and_si256(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                       _mm256_set1_epi8(15));
    const __m256i pairs = _mm256_maddubs_epi16(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
  const __m256i c0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m256i c1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16)));
  const __m256i q0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m256i q1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
  return _mm256_add_epi32(_mm256_madd_epi16(c0, q0), _mm256_madd_epi16(c1, q1));
}

// The same for a block of 16 codes (block 16): 4-bit codes unpacked in 128 bits, the sums in the low half.
template <int Bits>
__attribute__((target("avx2,fma"))) inline __m256i Dot16Int8(const uint8_t* codes, const int8_t* q) {
  const __m128i qv = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  if (Bits == 4) {
    const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)), mask = _mm_set1_epi8(15);
    const __m128i c = _mm_unpacklo_epi64(_mm_and_si128(packed, mask), _mm_and_si128(_mm_srli_epi16(packed, 4), mask));
    const __m128i sums = _mm_madd_epi16(_mm_maddubs_epi16(c, qv), _mm_set1_epi16(1));
    return _mm256_inserti128_si256(_mm256_setzero_si256(), sums, 0);
  }
  const __m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  return _mm256_madd_epi16(c, _mm256_cvtepi8_epi16(qv));
}

// One block's 8 int32 partial sums of code * q (Block: the block when known at compile time, else 0).
template <int Bits, int Block>
__attribute__((target("avx2,fma"))) inline __m256i BlockDotInt8Avx2(const uint8_t* codes, const int8_t* q,
                                                                    int64_t block) {
  if (Block == 16 || (Block == 0 && block == 16)) return Dot16Int8<Bits>(codes, q);
  const int64_t size = Block ? Block : block;
  __m256i acc = Dot32Int8<Bits>(codes, q);
  for (int64_t j = 32; j < size; j += 32) acc = _mm256_add_epi32(acc, Dot32Int8<Bits>(codes + j * Bits / 8, q + j));
  return acc;
}

// y[n] for n in [n0, n1) of one quantized row, R (4 or 1) rows of B^T at a time: per block, each row's integer
// sums converted once and scaled by scale_x * scale into a vector total; the zero points' share taken off once per
// output (ShiftAvx2 on the block sums of the dequantized q).
template <int Bits, int Block, int R>
__attribute__((target("avx2,fma"))) inline void DotInt8Rows(const Geometry& g, const uint8_t* packed,
                                                           const float* scales, const Zeros& zeros, const float* bias,
                                                           const QuantizedRow& x, float* y, int64_t n) {
  const int64_t row_bytes = g.blocks * g.bytes_per_block(), block = Block ? Block : g.block;
  const int64_t block_bytes = block * Bits / 8;
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  const uint8_t* codes = packed + n * row_bytes;
  const float* scale = scales + n * g.blocks;
  for (int64_t b = 0; b < g.blocks; ++b) {
    const int8_t* qb = x.q + b * block;
    const __m256 sx = _mm256_set1_ps(x.scales[b]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i d = BlockDotInt8Avx2<Bits, Block>(codes + r * row_bytes + b * block_bytes, qb, block);
      total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(sx, _mm256_broadcast_ss(scale + r * g.blocks + b)),
                                 total[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const float v = SumOfLanes(total[r]) - ShiftAvx2(g, scales, zeros, x.sums, n + r);
    y[n + r] = bias ? v + bias[n + r] : v;
  }
}

template <int Bits, int Block>
__attribute__((target("avx2,fma"))) inline void DotInt8Avx2Of(const Geometry& g, const uint8_t* packed,
                                                             const float* scales, const Zeros& zeros,
                                                             const float* bias, const QuantizedRow& x, float* y,
                                                             int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) DotInt8Rows<Bits, Block, 4>(g, packed, scales, zeros, bias, x, y, n);
  for (; n < n1; ++n) DotInt8Rows<Bits, Block, 1>(g, packed, scales, zeros, bias, x, y, n);
}

template <int Bits>
inline void DotInt8Avx2Bits(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                            const float* bias, const QuantizedRow& x, float* y, int64_t n0, int64_t n1) {
  switch (g.block) {
    case 16: return DotInt8Avx2Of<Bits, 16>(g, packed, scales, zeros, bias, x, y, n0, n1);
    case 32: return DotInt8Avx2Of<Bits, 32>(g, packed, scales, zeros, bias, x, y, n0, n1);
    case 64: return DotInt8Avx2Of<Bits, 64>(g, packed, scales, zeros, bias, x, y, n0, n1);
    case 128: return DotInt8Avx2Of<Bits, 128>(g, packed, scales, zeros, bias, x, y, n0, n1);
    default: return DotInt8Avx2Of<Bits, 0>(g, packed, scales, zeros, bias, x, y, n0, n1);
  }
}

inline void DotInt8Avx2(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                        const float* bias, const QuantizedRow& x, float* y, int64_t n0, int64_t n1) {
  if (g.bits == 4) return DotInt8Avx2Bits<4>(g, packed, scales, zeros, bias, x, y, n0, n1);
  return DotInt8Avx2Bits<8>(g, packed, scales, zeros, bias, x, y, n0, n1);
}

using DotInt8Fn = void (*)(const Geometry&, const uint8_t*, const float*, const Zeros&, const float*,
                              const QuantizedRow&, float*, int64_t, int64_t);

// -- int8 activations on AVX-512 VNNI: vpdpbusd sums four u8 code x s8 q products into each int32 lane in one
// instruction (AVX2's maddubs + madd, and no widening of 8-bit codes first).
// - 8-bit codes: 64 a register as they are, q in x's order; blocks of 32 are two a register, each half scaled by
//   its own block's scales; larger blocks (multiples of 64) sum their registers in int32 first.
// - 4-bit codes: q in groups of 128 codes (QuantizeRowVnni), each group's even codes then its odd ones, so that
//   one 64-byte load of a group's codes splits into the even codes (low nibbles) and the odd ones (high nibbles)
//   with an AND and a shift, and both dots sum into one register: int32 lane l holds codes [8l, 8l + 8) of the
//   group, so with blocks of 32 lanes 4b..4b+3 are its block b, and one permute spreads a group's scales over its
//   lanes. (The chunk-of-32 order had a permute per 64 codes to unpack them and one more for each pair of scales:
//   on AMD Zen 4 the GEMV ran at 10 GB/s a core, onnxruntime's at 17.)
#define BYOC_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

constexpr int64_t kVnniGroup = 128;  // 4-bit codes per group (64 bytes)

// Codes [g0, g0 + size) of a row in QuantizeRowVnni's order, from x's order (`plain`): each group's even codes,
// then its odd ones (a last group of fewer codes the same over its own size).
inline void GroupOrder(const int8_t* plain, int64_t padded, int8_t* q) {
  for (int64_t g0 = 0; g0 < padded; g0 += kVnniGroup) {
    const int64_t half = std::min(kVnniGroup, padded - g0) / 2;
    for (int64_t i = 0; i < half; ++i) {
      q[g0 + i] = plain[g0 + 2 * i];
      q[g0 + half + i] = plain[g0 + 2 * i + 1];
    }
  }
}

// QuantizeRow for the VNNI dots: the same values, 4-bit codes' q in groups (above), 8-bit codes' in x's order.
inline void QuantizeRowVnni(const Geometry& g, const float* x, int8_t* q, float* scales, float* sums) {
  Geometry plain = g;
  plain.bits = 8;  // x's order
  QuantizeRowAvx2(plain, x, q, scales, sums);
  if (g.bits == 8) return;
  int8_t group[kVnniGroup];  // each group reordered in place, from a copy of it
  for (int64_t g0 = 0; g0 < g.padded_k(); g0 += kVnniGroup) {
    const int64_t size = std::min(kVnniGroup, g.padded_k() - g0);
    std::memcpy(group, q + g0, static_cast<size_t>(size));
    GroupOrder(group, size, q + g0);
  }
}

// [s[0] x 8, s[1] x 8]: two blocks' scales for the two halves of a register (a load and a permute).
BYOC_VNNI inline __m512 ScalePair(const float* s) {
  const __m512 both = _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(s))));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), both);
}

// As DotInt8Rows for 8-bit codes, R rows of B^T at a time from row n's codes at `codes` (rows `row_bytes` apart),
// for blocks of 32 or a multiple of 64 (Block: the block when known at compile time, else 0).
template <int Block, int R>
BYOC_VNNI inline void DotInt8RowsVnni(const Geometry& g, const uint8_t* codes, int64_t row_bytes, const float* scales,
                                      const Zeros& zeros, const float* bias, const QuantizedRow& x, float* y, int64_t n) {
  const int64_t block = Block ? Block : g.block;
  __m512 total[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  const float* scale = scales + n * g.blocks;
  if (block == 32) {
    int64_t b = 0;
    for (; b + 2 <= g.blocks; b += 2) {
      const __m512i q = _mm512_loadu_si512(x.q + b * 32);
      const __m512 sx = ScalePair(x.scales + b);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_loadu_si512(codes + r * row_bytes + b * 32), q);
        total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sx, ScalePair(scale + r * g.blocks + b)),
                                   total[r]);
      }
    }
    if (b < g.blocks) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + b * 32));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + r * row_bytes + b * 32));
        const __m512 product = _mm512_zextps256_ps512(_mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), c, q)));
        total[r] = _mm512_fmadd_ps(product, _mm512_set1_ps(x.scales[b] * scale[r * g.blocks + b]), total[r]);
      }
    }
  } else {
    for (int64_t b = 0; b < g.blocks; ++b) {
      __m512i d[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) d[r] = _mm512_setzero_si512();
      for (int64_t j = 0; j < block; j += 64) {
        const __m512i q = _mm512_loadu_si512(x.q + b * block + j);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
          d[r] = _mm512_dpbusd_epi32(d[r], _mm512_loadu_si512(codes + r * row_bytes + b * block + j), q);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r)
        total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[r]), _mm512_set1_ps(x.scales[b] * scale[r * g.blocks + b]),
                                   total[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const float v = _mm512_reduce_add_ps(total[r]) - ShiftAvx2(g, scales, zeros, x.sums, n + r);
    y[n + r] = bias ? v + bias[n + r] : v;
  }
}

// The group's lanes' blocks, counted from the group's first block (lane l holds codes [8l, 8l + 8)).
BYOC_VNNI inline __m512i GroupLaneBlocks(int64_t block) {
  alignas(64) int32_t index[16];
  for (int l = 0; l < 16; ++l) index[l] = static_cast<int32_t>(8 * l / block);
  return _mm512_load_si512(index);
}

// Whether the zero point is folded into the integer dots: a uniform whole zero point z (MatMulNBits' default
// 2^(bits-1)) is taken off each lane as z * sum q, in int32 before the scaling, which makes the sum that of
// (code - z) * q exactly; other zero points are taken off after (ShiftAvx2). At K = 384 the shift and the sum of
// each output's lanes cost more than its three groups of dots (a Llama prompt's [32,384]x[384,1024]).
inline bool FoldsZero(const Zeros& zeros) {
  return !zeros.bytes && !zeros.floats && zeros.uniform >= 0.0f && zeros.uniform <= 255.0f &&
         zeros.uniform == static_cast<float>(static_cast<int>(zeros.uniform));
}

// The dots' starting value for group `group` of a row of q: -z * (the sum of each lane's q).
BYOC_VNNI inline __m512i FoldedZero(const QuantizedRow& x, int64_t group, __m512i negative_zero) {
  return _mm512_mullo_epi32(_mm512_loadu_si512(x.lane_sums + 16 * group), negative_zero);
}

// One group of `size` (<= kVnniGroup) codes from code g0: the codes of each half (its even codes, then its odd
// ones), the bytes a half spans, the group's first block and the mask of its blocks' scales.
struct GroupSpan {
  int64_t half;
  __mmask64 bytes;
  int64_t first;
  __mmask16 blocks;
};

inline GroupSpan SpanOf(const Geometry& g, int64_t g0, int64_t size) {
  const int64_t half = size / 2, first = g0 / g.block;
  const int64_t count = std::min<int64_t>((size + g.block - 1) / g.block, g.blocks - first);
  return {half, half == 64 ? ~0ULL : (1ULL << half) - 1, first, static_cast<__mmask16>((1u << count) - 1)};
}

// Each group's 16 lanes' sums of the quantized row q (QuantizeRowVnni's order of 4-bit codes) into `lane_sums`
// (16 a group): computed once a row, where the dots' folded zero point had summed them again for every group of
// every tile of B^T's rows.
BYOC_VNNI inline void GroupLaneSums(const Geometry& g, const int8_t* q, int32_t* lane_sums) {
  const __m512i ones = _mm512_set1_epi8(1);
  const int64_t padded = g.padded_k();
  for (int64_t g0 = 0; g0 < padded; g0 += kVnniGroup, lane_sums += 16) {
    const GroupSpan s = SpanOf(g, g0, std::min(kVnniGroup, padded - g0));
    const __m512i qe = _mm512_maskz_loadu_epi8(s.bytes, q + g0), qo = _mm512_maskz_loadu_epi8(s.bytes, q + g0 + s.half);
    _mm512_storeu_si512(lane_sums, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, qe), ones, qo));
  }
}

// The even and the odd codes of one group of `size` 4-bit codes packed at `codes` + g0 / 2 (64 bytes when Whole;
// `mask` the bytes of each half).
template <bool Whole>
BYOC_VNNI inline void GroupCodes(const uint8_t* codes, int64_t g0, __mmask64 mask, __m512i* even, __m512i* odd) {
  const __m512i v = Whole ? _mm512_loadu_si512(codes + g0 / 2) : _mm512_maskz_loadu_epi8(mask, codes + g0 / 2);
  const __m512i low = _mm512_set1_epi8(15);
  *even = _mm512_and_si512(v, low);
  *odd = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
}

// One group's products summed into total[r] for R rows of B^T (Whole: 128 codes, else `size`).
template <bool Whole, int R>
BYOC_VNNI inline void GroupDots(const Geometry& g, const uint8_t* codes, int64_t row_bytes, const float* scale,
                                const QuantizedRow& x, int64_t g0, int64_t size, __m512i lanes, __m512i negative_zero,
                                bool fold, __m512* total) {
  const GroupSpan s = SpanOf(g, g0, size);
  const __m512i qe = Whole ? _mm512_loadu_si512(x.q + g0) : _mm512_maskz_loadu_epi8(s.bytes, x.q + g0);
  const __m512i qo = Whole ? _mm512_loadu_si512(x.q + g0 + s.half) : _mm512_maskz_loadu_epi8(s.bytes, x.q + g0 + s.half);
  const __m512 sx = _mm512_permutexvar_ps(lanes, _mm512_maskz_loadu_ps(s.blocks, x.scales + s.first));
  const __m512i start = fold ? FoldedZero(x, g0 / kVnniGroup, negative_zero) : _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m512i even, odd;
    GroupCodes<Whole>(codes + r * row_bytes, g0, s.bytes, &even, &odd);
    const __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, even, qe), odd, qo);
    const __m512 sw = _mm512_permutexvar_ps(lanes, _mm512_maskz_loadu_ps(s.blocks, scale + r * g.blocks + s.first));
    total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sx, sw), total[r]);
  }
}

// As DotInt8Rows for 4-bit codes in groups (above), R rows of B^T at a time from row n's codes at `codes`.
template <int R>
BYOC_VNNI inline void DotInt4RowsVnni(const Geometry& g, const uint8_t* codes, int64_t row_bytes, const float* scales,
                                      const Zeros& zeros, const float* bias, const QuantizedRow& x, float* y, int64_t n,
                                      __m512i lanes) {
  const int64_t padded = g.padded_k();
  __m512 total[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  const float* scale = scales + n * g.blocks;
  const bool fold = FoldsZero(zeros) && x.lane_sums;
  const __m512i negative_zero = _mm512_set1_epi32(fold ? -static_cast<int>(zeros.uniform) : 0);
  int64_t g0 = 0;
  for (; g0 + kVnniGroup <= padded; g0 += kVnniGroup)
    GroupDots<true, R>(g, codes, row_bytes, scale, x, g0, kVnniGroup, lanes, negative_zero, fold, total);
  if (g0 < padded)
    GroupDots<false, R>(g, codes, row_bytes, scale, x, g0, padded - g0, lanes, negative_zero, fold, total);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const float v = _mm512_reduce_add_ps(total[r]) - (fold ? 0.0f : ShiftAvx2(g, scales, zeros, x.sums, n + r));
    y[n + r] = bias ? v + bias[n + r] : v;
  }
}

// Outputs [n0, n1) of one quantized row, B^T's row n0's packed 4-bit codes at `codes`.
BYOC_VNNI inline void DotInt4Vnni(const Geometry& g, const uint8_t* codes, int64_t row_bytes, const float* scales,
                                  const Zeros& zeros, const float* bias, const QuantizedRow& x, float* y, int64_t n0,
                                  int64_t n1) {
  const __m512i lanes = GroupLaneBlocks(g.block);
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4)
    DotInt4RowsVnni<4>(g, codes + (n - n0) * row_bytes, row_bytes, scales, zeros, bias, x, y, n, lanes);
  for (; n < n1; ++n)
    DotInt4RowsVnni<1>(g, codes + (n - n0) * row_bytes, row_bytes, scales, zeros, bias, x, y, n, lanes);
}

template <int Block>
BYOC_VNNI inline void DotInt8VnniOf(const Geometry& g, const uint8_t* codes, int64_t row_bytes, const float* scales,
                                    const Zeros& zeros, const float* bias, const QuantizedRow& x, float* y, int64_t n0,
                                    int64_t n1) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4)
    DotInt8RowsVnni<Block, 4>(g, codes + (n - n0) * row_bytes, row_bytes, scales, zeros, bias, x, y, n);
  for (; n < n1; ++n)
    DotInt8RowsVnni<Block, 1>(g, codes + (n - n0) * row_bytes, row_bytes, scales, zeros, bias, x, y, n);
}

// Outputs [n0, n1) of one row quantized by QuantizeRowVnni.
inline void DotInt8Vnni(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                        const float* bias, const QuantizedRow& x, float* y, int64_t n0, int64_t n1) {
  const int64_t row_bytes = g.blocks * g.bytes_per_block();
  const uint8_t* codes = packed + n0 * row_bytes;
  if (g.bits == 4) return DotInt4Vnni(g, codes, row_bytes, scales, zeros, bias, x, y, n0, n1);
  switch (g.block) {
    case 32: return DotInt8VnniOf<32>(g, codes, row_bytes, scales, zeros, bias, x, y, n0, n1);
    case 64: return DotInt8VnniOf<64>(g, codes, row_bytes, scales, zeros, bias, x, y, n0, n1);
    case 128: return DotInt8VnniOf<128>(g, codes, row_bytes, scales, zeros, bias, x, y, n0, n1);
    default: return DotInt8VnniOf<0>(g, codes, row_bytes, scales, zeros, bias, x, y, n0, n1);
  }
}

// A tile of a prompt's products on VNNI: MR rows of x by NR rows of B^T (from row n), the codes unpacked to bytes
// in q's group order (`row_bytes` apart). Each group's codes are loaded once for the MR rows of x and each row's q
// once for the NR rows of B^T: as 32 GEMVs, a prompt of 32 tokens ran at a GEMV's pace per row, compute-bound
// with its weight in the caches.
template <int MR, int NR>
BYOC_VNNI inline void GemmTileVnni(const Geometry& g, const uint8_t* codes, int64_t row_bytes, const float* scales,
                                   const Zeros& zeros, const float* bias, const QuantizedRow* rows, float* y,
                                   int64_t n, __m512i lanes) {
  const int64_t padded = g.padded_k();
  __m512 total[MR][NR];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) total[m][r] = _mm512_setzero_ps();
  const float* scale = scales + n * g.blocks;
  const bool fold = FoldsZero(zeros) && rows[0].lane_sums;  // every row's, or none (MatmulNBitsKernel::DotsInt8)
  const __m512i negative_zero = _mm512_set1_epi32(fold ? -static_cast<int>(zeros.uniform) : 0);
  for (int64_t g0 = 0; g0 < padded; g0 += kVnniGroup) {
    const GroupSpan s = SpanOf(g, g0, std::min(kVnniGroup, padded - g0));
    __m512i even[NR], odd[NR];
    __m512 sw[NR];
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      even[r] = _mm512_maskz_loadu_epi8(s.bytes, codes + r * row_bytes + g0);
      odd[r] = _mm512_maskz_loadu_epi8(s.bytes, codes + r * row_bytes + g0 + s.half);
      sw[r] = _mm512_permutexvar_ps(lanes, _mm512_maskz_loadu_ps(s.blocks, scale + r * g.blocks + s.first));
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m512i qe = _mm512_maskz_loadu_epi8(s.bytes, rows[m].q + g0);
      const __m512i qo = _mm512_maskz_loadu_epi8(s.bytes, rows[m].q + g0 + s.half);
      const __m512 sx = _mm512_permutexvar_ps(lanes, _mm512_maskz_loadu_ps(s.blocks, rows[m].scales + s.first));
      const __m512i start = fold ? FoldedZero(rows[m], g0 / kVnniGroup, negative_zero) : _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, even[r], qe), odd[r], qo);
        total[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sx, sw[r]), total[m][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const float v = _mm512_reduce_add_ps(total[m][r]) - (fold ? 0.0f : ShiftAvx2(g, scales, zeros, rows[m].sums, n + r));
      y[m * g.n + n + r] = bias ? v + bias[n + r] : v;
    }
}

// MR (1-4) rows of x by B^T's unpacked rows [n0, n1), three at a time.
template <int MR>
BYOC_VNNI inline void GemmRowsVnni(const Geometry& g, const uint8_t* codes, int64_t row_bytes, const float* scales,
                                   const Zeros& zeros, const float* bias, const QuantizedRow* rows, float* y,
                                   int64_t n0, int64_t n1, __m512i lanes) {
  int64_t n = n0;
  for (; n + 3 <= n1; n += 3)
    GemmTileVnni<MR, 3>(g, codes + (n - n0) * row_bytes, row_bytes, scales, zeros, bias, rows, y, n, lanes);
  for (; n < n1; ++n)
    GemmTileVnni<MR, 1>(g, codes + (n - n0) * row_bytes, row_bytes, scales, zeros, bias, rows, y, n, lanes);
}

// Many rows of x (a prompt) on VNNI: B^T's rows [n0, n1) against the `count` quantized rows, y's rows g.n apart.
// 4-bit codes are unpacked once into `unpacked` (bytes in q's group order, padded_k a row), not once per row of x,
// and read from the core's caches by tiles of four rows of x (GemmTileVnni); 8-bit codes are bytes already.
BYOC_VNNI inline void GemmInt8Vnni(const Geometry& g, const uint8_t* packed, const float* scales, const Zeros& zeros,
                                   const float* bias, const QuantizedRow* rows, int64_t count, float* y, int64_t n0,
                                   int64_t n1, std::vector<uint8_t>* unpacked) {
  if (g.bits == 8) {
    for (int64_t m = 0; m < count; ++m) DotInt8Vnni(g, packed, scales, zeros, bias, rows[m], y + m * g.n, n0, n1);
    return;
  }
  const int64_t packed_row = g.blocks * g.bytes_per_block(), padded = g.padded_k();
  unpacked->resize(static_cast<size_t>((n1 - n0) * padded));
  const __m512i low = _mm512_set1_epi8(15);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* from = packed + n * packed_row;
    uint8_t* to = unpacked->data() + (n - n0) * padded;
    for (int64_t g0 = 0; g0 < padded; g0 += kVnniGroup) {
      const int64_t half = std::min(kVnniGroup, padded - g0) / 2;
      const __mmask64 mask = half == 64 ? ~0ULL : (1ULL << half) - 1;
      const __m512i v = _mm512_maskz_loadu_epi8(mask, from + g0 / 2);
      _mm512_mask_storeu_epi8(to + g0, mask, _mm512_and_si512(v, low));
      _mm512_mask_storeu_epi8(to + g0 + half, mask, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
    }
  }
  const __m512i lanes = GroupLaneBlocks(g.block);
  const uint8_t* codes = unpacked->data();
  int64_t m = 0;
  for (; m + 4 <= count; m += 4)
    GemmRowsVnni<4>(g, codes, padded, scales, zeros, bias, rows + m, y + m * g.n, n0, n1, lanes);
  switch (count - m) {
    case 3: return GemmRowsVnni<3>(g, codes, padded, scales, zeros, bias, rows + m, y + m * g.n, n0, n1, lanes);
    case 2: return GemmRowsVnni<2>(g, codes, padded, scales, zeros, bias, rows + m, y + m * g.n, n0, n1, lanes);
    case 1: return GemmRowsVnni<1>(g, codes, padded, scales, zeros, bias, rows + m, y + m * g.n, n0, n1, lanes);
    default: return;
  }
}
#undef BYOC_VNNI

// Whether the VNNI dots take g's blocks: any (of 16 or more) for 4-bit codes, 32 or a multiple of 64 for 8-bit ones.
inline bool VnniBlocks(const Geometry& g) { return g.bits == 4 || g.block == 32 || g.block % 64 == 0; }

// The int8 dot for this CPU: VNNI's where `vnni_dots` (the CPU has AVX-512 VNNI, oneDNN may use it and the
// dots take the blocks: the caller asks oneDNN, whose ONEDNN_MAX_CPU_ISA caps byoc's kernels too).
inline DotInt8Fn ChooseDotInt8(bool vnni_dots) {
  __builtin_cpu_init();
  if (vnni_dots) return DotInt8Vnni;
  if (CpuHasAvx2Fma()) return DotInt8Avx2;
  return DotInt8Scalar;
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

}  // namespace nbits
}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_NBITS_H_
