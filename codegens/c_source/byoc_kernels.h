/*
 * byoc_kernels.h -- reference float32 CPU kernels for byoc-generated C code.
 *
 * Conventions
 *  - Tensors are float32 (int8, uint8 and int32 for the quantization kernels at
 *    the end), dense, contiguous and row-major (C order).
 *  - Shapes are int64_t arrays of rank <= BYOC_MAX_RANK; rank 0 is a scalar
 *    (one element, the shape pointer is not read).
 *  - Semantics follow ONNX (numpy broadcasting for elementwise ops, numpy.matmul
 *    for MatMul, NCHW / OIHW layouts for Conv and pooling).
 *  - Output buffers are allocated by the caller, must not alias the inputs and
 *    are fully overwritten.
 *  - Every function is `static inline` (and marked unused for GCC/clang) so the
 *    header can be pasted into several translation units; no global mutable
 *    state, no I/O, safe to call concurrently from several threads.
 *  - Portable C99 that is also valid C++ (TVM compiles C sources with g++):
 *    no restrict, VLAs, compound literals or designated initialisers, and no
 *    reinterpretation of float bytes (endianness independent).
 */
#ifndef BYOC_KERNELS_H_
#define BYOC_KERNELS_H_

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>

// The one place the rank limit is written: codegens/limits.py reads it for Python and setup.py.
#define BYOC_MAX_RANK 8

#if defined(__GNUC__) || defined(__clang__)
#define BYOC_K_UNUSED __attribute__((unused))
#else
#define BYOC_K_UNUSED
#endif

#define BYOC_K_FN static inline BYOC_K_UNUSED

enum { BYOC_ADD = 0, BYOC_SUB = 1, BYOC_MUL = 2, BYOC_DIV = 3 };
enum { BYOC_RELU = 0, BYOC_SIGMOID = 1, BYOC_TANH = 2, BYOC_CLIP = 3 };

/* ------------------------------------------------------------------------ */
/* internal helpers                                                          */
/* ------------------------------------------------------------------------ */

/* Product of shape[0..ndim). */
BYOC_K_FN int64_t byoc_k_numel(const int64_t* shape, int ndim) {
  int64_t n = 1;
  int d;
  for (d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

/* Strides (in elements) of a tensor `shape[ndim]` (innermost stride `unit`)
 * broadcast against an output of rank out_ndim >= ndim, right-aligned: size-1
 * dims and missing leading dims get stride 0. Writes out_ndim entries. */
BYOC_K_FN void byoc_k_bcast_strides(const int64_t* shape, int ndim, int out_ndim, int64_t unit,
                                    int64_t* strides) {
  int64_t s = unit;
  int d;
  for (d = out_ndim - 1; d >= 0; --d) {
    int sd = d - (out_ndim - ndim);
    if (sd < 0) {
      strides[d] = 0;
    } else {
      strides[d] = (shape[sd] == 1) ? 0 : s;
      s *= shape[sd];
    }
  }
}

/* Smallest integer >= p / q for q > 0 (p may be negative). */
BYOC_K_FN int64_t byoc_k_ceil_div(int64_t p, int64_t q) {
  int64_t r = p / q;
  if (r * q < p) ++r;
  return r;
}

/* Range [*lo, *hi) of output positions i in [0, out_len) such that
 * 0 <= i * stride + off < in_len. */
BYOC_K_FN void byoc_k_valid_range(int64_t off, int64_t stride, int64_t in_len, int64_t out_len,
                                  int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : byoc_k_ceil_div(-off, stride);
  int64_t h = (in_len - off) <= 0 ? 0 : byoc_k_ceil_div(in_len - off, stride);
  if (h > out_len) h = out_len;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* Advance an odometer over dims [0, ndim) of `shape` by one step, moving the offsets of two
   operands (strides `as`, `bs`) with it; a dim that wraps resets to 0 and carries. */
BYOC_K_FN void byoc_k_advance2(int64_t* idx, const int64_t* shape, int ndim, const int64_t* as,
                                 const int64_t* bs, int64_t* ao, int64_t* bo) {
  int d;
  for (d = ndim - 1; d >= 0; --d) {
    ++idx[d];
    *ao += as[d];
    *bo += bs[d];
    if (idx[d] < shape[d]) return;
    *ao -= as[d] * shape[d];
    *bo -= bs[d] * shape[d];
    idx[d] = 0;
  }
}

/* ------------------------------------------------------------------------ */
/* elementwise binary with numpy broadcasting                                */
/* ------------------------------------------------------------------------ */

BYOC_K_FN void byoc_k_binary(int op, const float* a, const int64_t* a_shape, int a_ndim,
                             const float* b, const int64_t* b_shape, int b_ndim,
                             float* out, const int64_t* out_shape, int out_ndim) {
  int64_t as[BYOC_MAX_RANK], bs[BYOC_MAX_RANK], idx[BYOC_MAX_RANK];
  int64_t outer, inner, sa, sb, r, j, ao = 0, bo = 0;
  int d, last;

  if (out_ndim <= 0) {
    float u = a[0], v = b[0];
    switch (op) {
      case BYOC_ADD: out[0] = u + v; break;
      case BYOC_SUB: out[0] = u - v; break;
      case BYOC_MUL: out[0] = u * v; break;
      default: out[0] = u / v; break;
    }
    return;
  }
  if (byoc_k_numel(out_shape, out_ndim) == 0) return;

  byoc_k_bcast_strides(a_shape, a_ndim, out_ndim, 1, as);
  byoc_k_bcast_strides(b_shape, b_ndim, out_ndim, 1, bs);
  for (d = 0; d < out_ndim; ++d) idx[d] = 0;

  last = out_ndim - 1;
  inner = out_shape[last];
  outer = byoc_k_numel(out_shape, last);
  sa = as[last];
  sb = bs[last];

  for (r = 0; r < outer; ++r) {
    float* o = out + r * inner;
    const float* pa = a + ao;
    const float* pb = b + bo;
    switch (op) {
      case BYOC_ADD:
        for (j = 0; j < inner; ++j) o[j] = pa[j * sa] + pb[j * sb];
        break;
      case BYOC_SUB:
        for (j = 0; j < inner; ++j) o[j] = pa[j * sa] - pb[j * sb];
        break;
      case BYOC_MUL:
        for (j = 0; j < inner; ++j) o[j] = pa[j * sa] * pb[j * sb];
        break;
      default:
        for (j = 0; j < inner; ++j) o[j] = pa[j * sa] / pb[j * sb];
        break;
    }
    byoc_k_advance2(idx, out_shape, last, as, bs, &ao, &bo);
  }
}

/* ------------------------------------------------------------------------ */
/* elementwise unary                                                         */
/* ------------------------------------------------------------------------ */

BYOC_K_FN void byoc_k_unary(int op, const float* x, float* y, int64_t n, float p0, float p1) {
  int64_t i;
  switch (op) {
    case BYOC_RELU:
      for (i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN propagates */
      break;
    case BYOC_SIGMOID:
      for (i = 0; i < n; ++i) {
        float v = x[i];
        if (v >= 0.0f) {
          y[i] = 1.0f / (1.0f + expf(-v));
        } else {
          float e = expf(v); /* in (0, 1): no overflow */
          y[i] = e / (1.0f + e);
        }
      }
      break;
    case BYOC_TANH:
      for (i = 0; i < n; ++i) y[i] = tanhf(x[i]);
      break;
    case BYOC_CLIP:
    default:
      for (i = 0; i < n; ++i) {
        float v = x[i];
        if (v < p0) v = p0;
        if (v > p1) v = p1;
        y[i] = v;
      }
      break;
  }
}

/* ------------------------------------------------------------------------ */
/* matmul (numpy.matmul semantics)                                           */
/* ------------------------------------------------------------------------ */

/* One definition for float32 and for int32 (the integer accumulation of quantized units). */
#define BYOC_K_DEFINE_MATMUL(NAME, T)                                                               \
BYOC_K_FN void NAME(const T* a, const int64_t* a_shape, int a_ndim,                                 \
                             const T* b, const int64_t* b_shape, int b_ndim,                        \
                             T* out, const int64_t* out_shape, int out_ndim) {                      \
  int64_t as[BYOC_MAX_RANK], bs[BYOC_MAX_RANK], idx[BYOC_MAX_RANK];                                 \
  int64_t m, k, n, nbatch, bi, i, kk, j, ao = 0, bo = 0;                                            \
  int a_b, b_b, o_b, d;                                                                             \
                                                                                                    \
  if (a_ndim < 1 || b_ndim < 1) return;                                                             \
  m = a_ndim >= 2 ? a_shape[a_ndim - 2] : 1;                                                        \
  k = a_shape[a_ndim - 1];                                                                          \
  n = b_ndim >= 2 ? b_shape[b_ndim - 1] : 1;                                                        \
  a_b = a_ndim >= 2 ? a_ndim - 2 : 0;                                                               \
  b_b = b_ndim >= 2 ? b_ndim - 2 : 0;                                                               \
  o_b = out_ndim - (a_ndim >= 2 ? 1 : 0) - (b_ndim >= 2 ? 1 : 0);                                   \
  if (o_b < 0) return;                                                                              \
                                                                                                    \
  byoc_k_bcast_strides(a_shape, a_b, o_b, m * k, as);                                               \
  byoc_k_bcast_strides(b_shape, b_b, o_b, k * n, bs);                                               \
  for (d = 0; d < o_b; ++d) idx[d] = 0;                                                             \
  nbatch = byoc_k_numel(out_shape, o_b);                                                            \
                                                                                                    \
  for (bi = 0; bi < nbatch; ++bi) {                                                                 \
    const T* pa = a + ao;                                                                           \
    const T* pb = b + bo;                                                                           \
    T* pc = out + bi * m * n;                                                                       \
    for (i = 0; i < m * n; ++i) pc[i] = (T)0;                                                       \
    for (i = 0; i < m; ++i) {                                                                       \
      T* crow = pc + i * n;                                                                         \
      const T* arow = pa + i * k;                                                                   \
      for (kk = 0; kk < k; ++kk) {                                                                  \
        const T av = arow[kk];                                                                      \
        const T* brow = pb + kk * n;                                                                \
        for (j = 0; j < n; ++j) crow[j] += av * brow[j];                                            \
      }                                                                                             \
    }                                                                                               \
    byoc_k_advance2(idx, out_shape, o_b, as, bs, &ao, &bo);                                         \
  }                                                                                                 \
}
BYOC_K_DEFINE_MATMUL(byoc_k_matmul, float)
BYOC_K_DEFINE_MATMUL(byoc_k_matmul_i32, int32_t)

/* ------------------------------------------------------------------------ */
/* conv2d (NCHW, OIHW, groups, optional bias and fused relu)                 */
/* ------------------------------------------------------------------------ */

#define BYOC_K_DEFINE_CONV2D(NAME, T)                                                               \
BYOC_K_FN void NAME(const T* x, const T* w, const T* bias, T* y,                                    \
                             int64_t n, int64_t c, int64_t h, int64_t wd,                           \
                             int64_t o, int64_t kh, int64_t kw, int64_t oh, int64_t ow,             \
                             int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l,      \
                             int64_t dil_h, int64_t dil_w, int64_t groups, int relu) {              \
  int64_t cpg, opg, nn, g, ocg, icg, oy, ki, kj, ox, i;                                             \
  if (groups < 1) groups = 1;                                                                       \
  cpg = c / groups;                                                                                 \
  opg = o / groups;                                                                                 \
                                                                                                    \
  for (nn = 0; nn < n; ++nn) {                                                                      \
    for (g = 0; g < groups; ++g) {                                                                  \
      for (ocg = 0; ocg < opg; ++ocg) {                                                             \
        const int64_t oc = g * opg + ocg;                                                           \
        T* yp = y + (nn * o + oc) * oh * ow;                                                        \
        const T b0 = bias ? bias[oc] : (T)0;                                                        \
        for (i = 0; i < oh * ow; ++i) yp[i] = b0;                                                   \
                                                                                                    \
        for (icg = 0; icg < cpg; ++icg) {                                                           \
          const int64_t ic = g * cpg + icg;                                                         \
          const T* xp = x + (nn * c + ic) * h * wd;                                                 \
          const T* wp = w + (oc * cpg + icg) * kh * kw;                                             \
          for (oy = 0; oy < oh; ++oy) {                                                             \
            T* yrow = yp + oy * ow;                                                                 \
            for (ki = 0; ki < kh; ++ki) {                                                           \
              const int64_t iy = oy * stride_h - pad_t + ki * dil_h;                                \
              const T* xrow;                                                                        \
              if (iy < 0 || iy >= h) continue;                                                      \
              xrow = xp + iy * wd;                                                                  \
              for (kj = 0; kj < kw; ++kj) {                                                         \
                const T wv = wp[ki * kw + kj];                                                      \
                const int64_t off = kj * dil_w - pad_l;                                             \
                int64_t lo, hi;                                                                     \
                byoc_k_valid_range(off, stride_w, wd, ow, &lo, &hi);                                \
                for (ox = lo; ox < hi; ++ox) yrow[ox] += wv * xrow[ox * stride_w + off];            \
              }                                                                                     \
            }                                                                                       \
          }                                                                                         \
        }                                                                                           \
        if (relu) {                                                                                 \
          for (i = 0; i < oh * ow; ++i)                                                             \
            if (yp[i] < (T)0) yp[i] = (T)0;                                                         \
        }                                                                                           \
      }                                                                                             \
    }                                                                                               \
  }                                                                                                 \
}
BYOC_K_DEFINE_CONV2D(byoc_k_conv2d, float)
BYOC_K_DEFINE_CONV2D(byoc_k_conv2d_i32, int32_t)

/* ------------------------------------------------------------------------ */
/* pooling (NCHW)                                                            */
/* ------------------------------------------------------------------------ */

BYOC_K_FN void byoc_k_maxpool2d(const float* x, float* y, int64_t n, int64_t c, int64_t h,
                                int64_t wd, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                                int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l,
                                int64_t dil_h, int64_t dil_w) {
  int64_t p, oy, ox, ki, kj;
  for (p = 0; p < n * c; ++p) {
    const float* xp = x + p * h * wd;
    float* yp = y + p * oh * ow;
    for (oy = 0; oy < oh; ++oy) {
      const int64_t y0 = oy * stride_h - pad_t;
      for (ox = 0; ox < ow; ++ox) {
        const int64_t x0 = ox * stride_w - pad_l;
        float m = -INFINITY;
        for (ki = 0; ki < kh; ++ki) {
          const int64_t iy = y0 + ki * dil_h;
          if (iy < 0 || iy >= h) continue;
          for (kj = 0; kj < kw; ++kj) {
            const int64_t ix = x0 + kj * dil_w;
            float v;
            if (ix < 0 || ix >= wd) continue;
            v = xp[iy * wd + ix];
            if (v > m || v != v) m = v; /* NaN propagates and sticks */
          }
        }
        yp[oy * ow + ox] = m;
      }
    }
  }
}

BYOC_K_FN void byoc_k_avgpool2d(const float* x, float* y, int64_t n, int64_t c, int64_t h,
                                int64_t wd, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                                int64_t stride_h, int64_t stride_w, int64_t pad_t, int64_t pad_l,
                                int64_t pad_b, int64_t pad_r, int count_include_pad) {
  int64_t p, oy, ox, iy, ix;
  for (p = 0; p < n * c; ++p) {
    const float* xp = x + p * h * wd;
    float* yp = y + p * oh * ow;
    for (oy = 0; oy < oh; ++oy) {
      const int64_t ys = oy * stride_h - pad_t;
      const int64_t ye = ys + kh;
      const int64_t ys_v = ys < 0 ? 0 : ys;
      const int64_t ye_v = ye > h ? h : ye;
      const int64_t ye_p = ye > h + pad_b ? h + pad_b : ye;
      for (ox = 0; ox < ow; ++ox) {
        const int64_t xs = ox * stride_w - pad_l;
        const int64_t xe = xs + kw;
        const int64_t xs_v = xs < 0 ? 0 : xs;
        const int64_t xe_v = xe > wd ? wd : xe;
        const int64_t xe_p = xe > wd + pad_r ? wd + pad_r : xe;
        int64_t cnt;
        float s = 0.0f;
        for (iy = ys_v; iy < ye_v; ++iy)
          for (ix = xs_v; ix < xe_v; ++ix) s += xp[iy * wd + ix];
        if (count_include_pad) {
          /* window start is always >= -pad (top/left) */
          cnt = (ye_p > ys ? ye_p - ys : 0) * (xe_p > xs ? xe_p - xs : 0);
        } else {
          cnt = (ye_v > ys_v ? ye_v - ys_v : 0) * (xe_v > xs_v ? xe_v - xs_v : 0);
        }
        yp[oy * ow + ox] = cnt > 0 ? s / (float)cnt : 0.0f;
      }
    }
  }
}

/* ------------------------------------------------------------------------ */
/* reductions                                                                */
/* ------------------------------------------------------------------------ */

BYOC_K_FN void byoc_k_mean(const float* x, const int64_t* shape, int ndim, const int* reduce,
                           float* y) {
  int64_t st[BYOC_MAX_RANK], kidx[BYOC_MAX_RANK], ridx[BYOC_MAX_RANK];
  int kd[BYOC_MAX_RANK], rd[BYOC_MAX_RANK];
  int nk = 0, nr = 0, d, q;
  int64_t ny = 1, nred = 1, s = 1, yi, r, koff = 0;

  for (d = ndim - 1; d >= 0; --d) {
    st[d] = s;
    s *= shape[d];
  }
  for (d = 0; d < ndim; ++d) {
    if (reduce[d]) {
      rd[nr++] = d;
      nred *= shape[d];
    } else {
      kd[nk++] = d;
      ny *= shape[d];
    }
    kidx[d] = 0;
    ridx[d] = 0;
  }
  if (ny == 0) return;

  for (yi = 0; yi < ny; ++yi) {
    double acc = 0.0;
    int64_t roff = 0;
    for (q = 0; q < nr; ++q) ridx[q] = 0;
    for (r = 0; r < nred; ++r) {
      acc += (double)x[koff + roff];
      for (q = nr - 1; q >= 0; --q) {
        const int dd = rd[q];
        ++ridx[q];
        roff += st[dd];
        if (ridx[q] < shape[dd]) break;
        roff -= st[dd] * shape[dd];
        ridx[q] = 0;
      }
    }
    y[yi] = nred > 0 ? (float)(acc / (double)nred) : NAN;
    for (q = nk - 1; q >= 0; --q) {
      const int dd = kd[q];
      ++kidx[q];
      koff += st[dd];
      if (kidx[q] < shape[dd]) break;
      koff -= st[dd] * shape[dd];
      kidx[q] = 0;
    }
  }
}

BYOC_K_FN void byoc_k_softmax(const float* x, float* y, int64_t outer, int64_t axis_len,
                              int64_t inner) {
  int64_t o, i, a;
  for (o = 0; o < outer; ++o) {
    const float* xp = x + o * axis_len * inner;
    float* yp = y + o * axis_len * inner;
    for (i = 0; i < inner; ++i) {
      float m = -INFINITY;
      float sum = 0.0f;
      for (a = 0; a < axis_len; ++a) {
        const float v = xp[a * inner + i];
        if (v > m || v != v) m = v;
      }
      for (a = 0; a < axis_len; ++a) {
        const float e = expf(xp[a * inner + i] - m);
        yp[a * inner + i] = e;
        sum += e;
      }
      for (a = 0; a < axis_len; ++a) yp[a * inner + i] /= sum;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* data movement                                                             */
/* ------------------------------------------------------------------------ */

BYOC_K_FN void byoc_k_concat(const float* const* xs, const int64_t* axis_lens, int n, float* y,
                             int64_t outer, int64_t inner) {
  int64_t o;
  int i;
  for (o = 0; o < outer; ++o) {
    for (i = 0; i < n; ++i) {
      const int64_t len = axis_lens[i] * inner;
      if (len > 0) memcpy(y, xs[i] + o * len, (size_t)len * sizeof(float));
      y += len;
    }
  }
}

BYOC_K_FN void byoc_k_transpose(const float* x, const int64_t* shape, int ndim,
                                const int64_t* perm, float* y) {
  int64_t ist[BYOC_MAX_RANK], ost[BYOC_MAX_RANK], osh[BYOC_MAX_RANK], idx[BYOC_MAX_RANK];
  int64_t s = 1, outer, inner, sl, r, j, off = 0;
  int d, last;

  if (ndim <= 0) {
    y[0] = x[0];
    return;
  }
  for (d = ndim - 1; d >= 0; --d) {
    ist[d] = s;
    s *= shape[d];
  }
  if (s == 0) return;
  for (d = 0; d < ndim; ++d) {
    ost[d] = ist[perm[d]];
    osh[d] = shape[perm[d]];
    idx[d] = 0;
  }
  last = ndim - 1;
  inner = osh[last];
  outer = s / inner;
  sl = ost[last];
  for (r = 0; r < outer; ++r) {
    const float* xp = x + off;
    float* yp = y + r * inner;
    for (j = 0; j < inner; ++j) yp[j] = xp[j * sl];
    for (d = last - 1; d >= 0; --d) {
      ++idx[d];
      off += ost[d];
      if (idx[d] < osh[d]) break;
      off -= ost[d] * osh[d];
      idx[d] = 0;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* quantization (ONNX QuantizeLinear / DequantizeLinear, int8 units)         */
/* ------------------------------------------------------------------------ */
/* Integer tensors are passed as void* with a type code. A scale or zero point
 * array holds one value per tensor (axis_len 1) or one per index of the
 * quantized axis, whose elements lie `inner` apart (the product of the dims
 * after it). Rounding is half to even (nearbyint in the default mode). */

enum { BYOC_U8 = 0, BYOC_I8 = 1, BYOC_I32 = 2 };

BYOC_K_FN int32_t byoc_k_load(const void* x, int code, int64_t i) {
  if (code == BYOC_U8) return ((const uint8_t*)x)[i];
  if (code == BYOC_I8) return ((const int8_t*)x)[i];
  return ((const int32_t*)x)[i];
}

BYOC_K_FN int64_t byoc_k_channel(int64_t i, int64_t axis_len, int64_t inner) {
  return axis_len == 1 ? 0 : (i / inner) % axis_len;
}

/* Stores `v` clamped to [lo, hi] (within the type's range). */
BYOC_K_FN void byoc_k_store(void* y, int code, int64_t i, double v, int32_t lo, int32_t hi) {
  int32_t q;
  if (v < (double)lo) v = (double)lo;
  if (v > (double)hi) v = (double)hi;
  q = (int32_t)v;
  if (code == BYOC_U8) ((uint8_t*)y)[i] = (uint8_t)q;
  else if (code == BYOC_I8) ((int8_t*)y)[i] = (int8_t)q;
  else ((int32_t*)y)[i] = q;
}

/* out = x - zero_point, as int32. */
BYOC_K_FN void byoc_k_widen(const void* x, int code, int64_t n, const int32_t* zp, int64_t axis_len,
                            int64_t inner, int32_t* out) {
  int64_t i;
  for (i = 0; i < n; ++i) out[i] = byoc_k_load(x, code, i) - zp[byoc_k_channel(i, axis_len, inner)];
}

BYOC_K_FN void byoc_k_dequantize(const void* x, int code, int64_t n, const float* scale, const int32_t* zp,
                                 int64_t axis_len, int64_t inner, float* y) {
  int64_t i;
  for (i = 0; i < n; ++i) {
    const int64_t ch = byoc_k_channel(i, axis_len, inner);
    y[i] = (float)(byoc_k_load(x, code, i) - zp[ch]) * scale[ch];
  }
}

/* y = clamp(round(x / scale) + zero_point, lo, hi); a NaN becomes the zero point. */
BYOC_K_FN void byoc_k_quantize(const float* x, int64_t n, const float* scale, const int32_t* zp,
                               int64_t axis_len, int64_t inner, int code, int32_t lo, int32_t hi, void* y) {
  int64_t i;
  for (i = 0; i < n; ++i) {
    const int64_t ch = byoc_k_channel(i, axis_len, inner);
    const float r = nearbyintf(x[i] / scale[ch]);
    byoc_k_store(y, code, i, (r == r ? (double)r : 0.0) + (double)zp[ch], lo, hi);
  }
}

/* An int32 accumulation back to 8 bits: y = clamp(round(acc * mult + offset) + zp, lo, hi), with
 * mult (x_scale * w_scale / y_scale) and offset (bias * bias_scale / y_scale) per output channel. */
BYOC_K_FN void byoc_k_requantize(const int32_t* acc, int64_t n, const double* mult, const double* offset,
                                 int64_t axis_len, int64_t inner, int32_t zp, int code, int32_t lo, int32_t hi,
                                 void* y) {
  int64_t i;
  for (i = 0; i < n; ++i) {
    const int64_t ch = byoc_k_channel(i, axis_len, inner);
    byoc_k_store(y, code, i, nearbyint((double)acc[i] * mult[ch] + offset[ch]) + (double)zp, lo, hi);
  }
}

#endif /* BYOC_KERNELS_H_ */
