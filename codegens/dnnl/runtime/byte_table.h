/*
 * byte_table.h -- y[i] = table[x[i]] over bytes, for the LookupTable kernel (kernels.h) (an element-wise
 * int8 unit computed once for the 256 possible input bytes).
 *
 * A scalar loop takes about 1.4 cycles per byte, which is most of what it replaces (oneDNN's binary with a
 * chain of post-ops, 1-2 ns per element). With AVX-512 VBMI (Ice Lake and later, Zen 4) two byte permutes
 * over the table's halves and a blend on each index's top bit map 64 bytes at a time. Dispatch is at run
 * time, so the runtime stays buildable and runnable for baseline x86-64.
 */
#ifndef BYOC_DNNL_BYTE_TABLE_H_
#define BYOC_DNNL_BYTE_TABLE_H_

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace byoc {
namespace byte_table {

inline void MapScalar(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
}

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline void MapVbmi(const uint8_t* table, const uint8_t* x,
                                                                             uint8_t* y, int64_t n) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512i index = _mm512_loadu_si512(x + i);
    __m512i low = _mm512_permutex2var_epi8(t0, index, t1);   // table[index & 127]
    __m512i high = _mm512_permutex2var_epi8(t2, index, t3);  // table[128 + (index & 127)]
    _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(index), low, high));
  }
  MapScalar(table, x + i, y + i, n - i);
}
#endif

// y[i] = table[x[i]] for i in [0, n); table holds 256 bytes.
inline void Map(const uint8_t* table, const uint8_t* x, uint8_t* y, int64_t n) {
#if defined(__x86_64__)
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
  if (vbmi) return MapVbmi(table, x, y, n);
#endif
  MapScalar(table, x, y, n);
}

}  // namespace byte_table
}  // namespace byoc

#endif  // BYOC_DNNL_BYTE_TABLE_H_
