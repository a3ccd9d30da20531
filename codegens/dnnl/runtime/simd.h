// simd.h -- vector helpers byoc's own AVX2 kernels share (nbits.h, decode_attention.cc).
#ifndef BYOC_DNNL_SIMD_H_
#define BYOC_DNNL_SIMD_H_

#include <immintrin.h>

namespace byoc {
namespace dnnl_runtime {

// The sum of the 8 lanes of v.
__attribute__((target("avx2,fma"))) inline float SumOfLanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_SIMD_H_
