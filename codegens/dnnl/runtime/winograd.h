/*
 * winograd.h -- the transforms of a Winograd F(4x4, 3x3) convolution over NHWC float32 tensors, for
 * winograd.cc (which runs the 36 products of transformed tiles and weights as one batched oneDNN matmul).
 *
 * A 3x3 stride-1 convolution computes each 4x4 output tile from a 6x6 input patch d as
 *     Y = A^T [ (G g G^T) (.) (B^T d B) ] A
 * (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", points 0, +-1, +-2): 36 multiplies
 * per tile and channel pair where a direct convolution does 144. On this project's 2-core AVX-512 machine
 * oneDNN 3.2 has no Winograd kernel for f32 and its direct kernels run at the FMA peak, so this is where
 * a 3x3 layer gets faster (1.6-2.3x for ResNet's 56x56x64 ... 14x14x256 layers, weights not in cache).
 * Its result differs from the direct sum by about 1e-5 of the output's magnitude.
 *
 * Layouts: x is [N, H, W, C] (NHWC), y [N, OH, OW, K]; the transformed input V and the products M are
 * [36][tiles][C] and [36][tiles][K], tiles in (n, tile row, tile column) order; the transformed weights
 * U are [36][C][K]. The transforms run over a range of tiles, so a caller splits tiles between threads.
 * The channel loops are vectorized for AVX-512, AVX2 and baseline x86-64 (target_clones), whatever the
 * flags the runtime was compiled with.
 */
#ifndef BYOC_DNNL_WINOGRAD_H_
#define BYOC_DNNL_WINOGRAD_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace byoc {
namespace winograd {

constexpr int kTile = 4;   // outputs per tile side
constexpr int kPatch = 6;  // inputs per tile side
constexpr int kPoints = kPatch * kPatch;

// A convolution's geometry, with its tiling.
struct Geometry {
  int64_t n, h, w, c, k, oh, ow, pad_t, pad_l;
  int64_t tiles_h() const { return (oh + kTile - 1) / kTile; }
  int64_t tiles_w() const { return (ow + kTile - 1) / kTile; }
  int64_t tiles() const { return n * tiles_h() * tiles_w(); }
};

// What follows the convolution, applied to each output value in order (oneDNN's post-ops that byoc fuses).
struct Epilogue {
  enum Kind { kRelu, kClip, kLinear, kSwish, kHardswish, kHardsigmoid, kLogistic, kAddTensor, kMulTensor,
              kAddChannel, kMulChannel };
  Kind kind;
  float alpha = 0.0f, beta = 0.0f;
  const float* data = nullptr;  // a tensor of the output's shape (NHWC), or one value per channel
};

// U[p][c][k] = (G g G^T)[p] for the weights [K, C, 3, 3], computed in double.
inline void TransformWeights(const float* weights, int64_t k_count, int64_t c_count, float* u) {
  static const double G[kPatch][3] = {{0.25, 0, 0},
                                      {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                      {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                      {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                      {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                      {0, 0, 1}};
  for (int64_t k = 0; k < k_count; ++k) {
    for (int64_t c = 0; c < c_count; ++c) {
      const float* g = weights + (k * c_count + c) * 9;
      double rows[kPatch][3];
      for (int i = 0; i < kPatch; ++i)
        for (int j = 0; j < 3; ++j) rows[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
      for (int i = 0; i < kPatch; ++i)
        for (int j = 0; j < kPatch; ++j)
          u[((i * kPatch + j) * c_count + c) * k_count + k] =
              static_cast<float>(rows[i][0] * G[j][0] + rows[i][1] * G[j][1] + rows[i][2] * G[j][2]);
    }
  }
}

// o = B^T d for six vectors d of n values each: the 1-D input transform, run down the columns of a
// patch and then along the rows of the result.
inline void InputTransform1D(const float* const d[kPatch], float* const o[kPatch], int64_t n) {
  const float *d0 = d[0], *d1 = d[1], *d2 = d[2], *d3 = d[3], *d4 = d[4], *d5 = d[5];
  float *o0 = o[0], *o1 = o[1], *o2 = o[2], *o3 = o[3], *o4 = o[4], *o5 = o[5];
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    o0[c] = 4 * d0[c] - 5 * d2[c] + d4[c];
    o1[c] = -4 * (d1[c] + d2[c]) + d3[c] + d4[c];
    o2[c] = 4 * (d1[c] - d2[c]) - d3[c] + d4[c];
    o3[c] = 2 * (d3[c] - d1[c]) - d2[c] + d4[c];
    o4[c] = 2 * (d1[c] - d3[c]) - d2[c] + d4[c];
    o5[c] = 4 * d1[c] - 5 * d3[c] + d5[c];
  }
}

// V = B^T d B for the tiles [t0, t1). `zeros` holds at least c zeros (the padding).
__attribute__((target_clones("avx512f", "avx2", "default"))) inline void InputTransform(
    const Geometry& g, const float* x, const float* zeros, float* v, int64_t t0, int64_t t1) {
  const int64_t c_count = g.c, per_image = g.tiles_h() * g.tiles_w(), tiles = g.tiles();
  std::vector<float> rows(static_cast<size_t>(kPoints * c_count));
  for (int64_t t = t0; t < t1; ++t) {
    int64_t image = t / per_image, ty = t % per_image / g.tiles_w(), tx = t % g.tiles_w();
    int64_t y0 = ty * kTile - g.pad_t, x0 = tx * kTile - g.pad_l;
    for (int j = 0; j < kPatch; ++j) {  // B^T d: down each column of the patch
      const float* column[kPatch];
      float* out[kPatch];
      for (int i = 0; i < kPatch; ++i) {
        int64_t y = y0 + i, xx = x0 + j;
        column[i] = y >= 0 && y < g.h && xx >= 0 && xx < g.w ? x + ((image * g.h + y) * g.w + xx) * c_count : zeros;
        out[i] = &rows[(i * kPatch + j) * c_count];
      }
      InputTransform1D(column, out, c_count);
    }
    for (int i = 0; i < kPatch; ++i) {  // (B^T d) B: along each row
      const float* row[kPatch];
      float* out[kPatch];
      for (int j = 0; j < kPatch; ++j) {
        row[j] = &rows[(i * kPatch + j) * c_count];
        out[j] = v + ((i * kPatch + j) * tiles + t) * c_count;
      }
      InputTransform1D(row, out, c_count);
    }
  }
}

// The epilogue over `pixels` consecutive output pixels starting at element `at` of y (NHWC).
__attribute__((target_clones("avx512f", "avx2", "default"))) inline void ApplyEpilogue(
    const std::vector<Epilogue>& epilogue, float* y, int64_t at, int64_t pixels, int64_t k_count) {
  float* out = y + at;
  int64_t n = pixels * k_count;
  for (const Epilogue& e : epilogue) {
    const float a = e.alpha, b = e.beta;
    switch (e.kind) {
      case Epilogue::kRelu:
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] = out[i] > 0 ? out[i] : out[i] * a;
        break;
      case Epilogue::kClip:
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] = std::min(std::max(out[i], a), b);
        break;
      case Epilogue::kLinear:
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] = a * out[i] + b;
        break;
      case Epilogue::kSwish:
        for (int64_t i = 0; i < n; ++i) out[i] = out[i] / (1.0f + std::exp(-a * out[i]));
        break;
      case Epilogue::kLogistic:
        for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-out[i]));
        break;
      case Epilogue::kHardswish:
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] = out[i] * std::min(std::max(a * out[i] + b, 0.0f), 1.0f);
        break;
      case Epilogue::kHardsigmoid:
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] = std::min(std::max(a * out[i] + b, 0.0f), 1.0f);
        break;
      case Epilogue::kAddTensor: {
        const float* other = e.data + at;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] += other[i];
        break;
      }
      case Epilogue::kMulTensor: {
        const float* other = e.data + at;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) out[i] *= other[i];
        break;
      }
      case Epilogue::kAddChannel:
        for (int64_t p = 0; p < pixels; ++p)
#pragma omp simd
          for (int64_t c = 0; c < k_count; ++c) out[p * k_count + c] += e.data[c];
        break;
      case Epilogue::kMulChannel:
        for (int64_t p = 0; p < pixels; ++p)
#pragma omp simd
          for (int64_t c = 0; c < k_count; ++c) out[p * k_count + c] *= e.data[c];
        break;
    }
  }
}

// o = A^T m (+ bias) for six vectors m of n values each: the 1-D output transform, run down the columns of
// the products and then along the rows of the result. `bias` holds n values (zeros for none).
inline void OutputTransform1D(const float* const m[kPatch], float* const o[kTile], const float* bias, int64_t n) {
  const float *m0 = m[0], *m1 = m[1], *m2 = m[2], *m3 = m[3], *m4 = m[4], *m5 = m[5];
  float *o0 = o[0], *o1 = o[1], *o2 = o[2], *o3 = o[3];
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) {
    float plus = m1[c] + m2[c], minus = m1[c] - m2[c], plus2 = m3[c] + m4[c], minus2 = m3[c] - m4[c];
    o0[c] = m0[c] + plus + plus2 + bias[c];
    o1[c] = minus + 2 * minus2 + bias[c];
    o2[c] = plus + 4 * plus2 + bias[c];
    o3[c] = minus + 8 * minus2 + m5[c] + bias[c];
  }
}

// Y = A^T m A + bias for the tiles [t0, t1), cropped to the output, then the epilogue. `bias` may be null;
// `zeros` holds at least k zeros.
__attribute__((target_clones("avx512f", "avx2", "default"))) inline void OutputTransform(
    const Geometry& g, const float* m, const float* bias, const float* zeros, const std::vector<Epilogue>& epilogue,
    float* y, int64_t t0, int64_t t1) {
  const int64_t k_count = g.k, per_image = g.tiles_h() * g.tiles_w(), tiles = g.tiles();
  std::vector<float> rows(static_cast<size_t>(kTile * kPatch * k_count)), last(static_cast<size_t>(kTile * k_count));
  for (int64_t t = t0; t < t1; ++t) {
    int64_t image = t / per_image, ty = t % per_image / g.tiles_w(), tx = t % g.tiles_w();
    for (int j = 0; j < kPatch; ++j) {  // A^T m: down each column
      const float* column[kPatch];
      float* out[kTile];
      for (int i = 0; i < kPatch; ++i) column[i] = m + ((i * kPatch + j) * tiles + t) * k_count;
      for (int i = 0; i < kTile; ++i) out[i] = &rows[(i * kPatch + j) * k_count];
      OutputTransform1D(column, out, zeros, k_count);
    }
    int64_t x_first = tx * kTile, pixels = std::min<int64_t>(kTile, g.ow - x_first);
    for (int i = 0; i < kTile && ty * kTile + i < g.oh; ++i) {  // (A^T m) A + bias: along each row
      const float* row[kPatch];
      for (int j = 0; j < kPatch; ++j) row[j] = &rows[(i * kPatch + j) * k_count];
      int64_t at = ((image * g.oh + ty * kTile + i) * g.ow + x_first) * k_count;
      float* first = pixels == kTile ? y + at : last.data();  // a cropped tile row goes through `last`
      float* out[kTile] = {first, first + k_count, first + 2 * k_count, first + 3 * k_count};
      OutputTransform1D(row, out, bias ? bias : zeros, k_count);
      if (pixels < kTile) std::copy(last.begin(), last.begin() + pixels * k_count, y + at);
      ApplyEpilogue(epilogue, y, at, pixels, k_count);
    }
  }
}

}  // namespace winograd
}  // namespace byoc

#endif  // BYOC_DNNL_WINOGRAD_H_
