// kernels.h -- steps byoc computes itself between oneDNN primitives: the Winograd transforms, byte tables,
// ONNX's Erf, Sin and Cos, NaN guards, the windows of a conv1d and a pad's fill (their loops: winograd.h, byte_table.h).
#ifndef BYOC_DNNL_KERNELS_H_
#define BYOC_DNNL_KERNELS_H_

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "byte_table.h"
#include "common.h"
#include "cpu.h"
#include "winograd.h"

namespace byoc {
namespace dnnl_runtime {

// `body(t0, t1)` over [0, n) split between the calling thread's OpenMP team (sized by the step).
template <class Body>
void SplitAcrossTeam(int64_t n, Body body) {
#pragma omp parallel
  {
    int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
    body(n * part / parts, n * (part + 1) / parts);
  }
}

// Below this many elements a glue kernel (a mask's select, a gather) runs on the calling thread: waking the
// team costs more than the work (a small DeBERTa's six glue ops took 30 us more than TVM's serial host code).
constexpr int64_t kSerialElements = 16384;

// SplitAcrossTeam for `elements` of work in all, on the calling thread alone when they are few.
template <class Body>
void SplitAcrossTeamIfLarge(int64_t n, int64_t elements, Body body) {
  if (elements < kSerialElements) {
    body(0, n);
    return;
  }
  SplitAcrossTeam(n, body);
}

template <class T>
T* Data(const std::unordered_map<int, memory>& args, int key) {
  return static_cast<T*>(args.at(key).get_data_handle());
}

// Winograd F(4x4, 3x3) (winograd.h): the input transform, x (NHWC) -> V.
class WinogradInput : public Kernel {
 public:
  explicit WinogradInput(const winograd::Geometry& g) : g_(g), zeros_(static_cast<size_t>(g.c), 0.0f) {}
  const char* Name() const override { return "winograd_input"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    float* v = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeam(g_.tiles(), [&](int64_t t0, int64_t t1) { winograd::InputTransform(g_, x, zeros_.data(), v, t0, t1); });
  }

 private:
  winograd::Geometry g_;
  std::vector<float> zeros_;
};

// Winograd F(4x4, 3x3): the output transform, M -> y (NHWC), with the bias and the conv's post-ops; a
// post-op's operand is argument DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, as for a primitive.
class WinogradOutput : public Kernel {
 public:
  WinogradOutput(const winograd::Geometry& g, bool bias, std::vector<winograd::Epilogue> epilogue)
      : g_(g), bias_(bias), epilogue_(std::move(epilogue)), zeros_(static_cast<size_t>(g.k), 0.0f) {}
  const char* Name() const override { return "winograd_output"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    std::vector<winograd::Epilogue> epilogue = epilogue_;
    for (size_t i = 0; i < epilogue.size(); ++i) {
      auto operand = args.find(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1);
      if (operand != args.end()) epilogue[i].data = static_cast<const float*>(operand->second.get_data_handle());
    }
    const float* m = Data<const float>(args, DNNL_ARG_SRC);
    const float* bias = bias_ ? Data<const float>(args, DNNL_ARG_BIAS) : nullptr;
    float* y = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeam(g_.tiles(), [&](int64_t t0, int64_t t1) {
      winograd::OutputTransform(g_, m, bias, zeros_.data(), epilogue, y, t0, t1);
    });
  }

 private:
  winograd::Geometry g_;
  bool bias_;
  std::vector<winograd::Epilogue> epilogue_;
  std::vector<float> zeros_;
};

// An 8-bit tensor mapped byte by byte through a 256-entry table: an element-wise unit whose output depends on
// its one 8-bit input alone (dequantize, element-wise ops, quantize). The table is the unit's own primitive
// run once on the 256 possible bytes (Builder::LookupTableOf), so a call computes exactly what that primitive
// would, at a fraction of its cost (byte_table.h): oneDNN's binary with a chain of post-ops took 1-2 ns per
// element.
class LookupTable : public Kernel {
 public:
  LookupTable(std::vector<uint8_t> table, int64_t count) : table_(std::move(table)), count_(count) {}
  const char* Name() const override { return "byte_table"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const uint8_t* x = Data<const uint8_t>(args, DNNL_ARG_SRC);
    uint8_t* y = Data<uint8_t>(args, DNNL_ARG_DST);
    const uint8_t* table = table_.data();
    SplitAcrossTeam(count_, [&](int64_t i0, int64_t i1) { byte_table::Map(table, x + i0, y + i0, i1 - i0); });
  }

 private:
  std::vector<uint8_t> table_;
  int64_t count_;
};

// A float function per element over a dense float32 tensor, for ops oneDNN has no eltwise algorithm for: ONNX's Erf
// (its gelu_erf is 0.5 x (1 + erf(x / sqrt 2)); the GELU spelled as ops is one gelu_erf op instead), Sin and Cos (a
// decoder's rotary tables, computed per call from the positions).
class PerElement : public Kernel {
 public:
  PerElement(int64_t count, float (*f)(float), const char* name) : count_(count), f_(f), name_(name) {}
  const char* Name() const override { return name_; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    float* y = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeam(count_, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) y[i] = f_(x[i]);
    });
  }

 private:
  int64_t count_;
  float (*f_)(float);
  const char* name_;
};

// Activations built on exp, for CPUs without AVX-512 (Builder::Eltwise): oneDNN's AVX2 kernels for them read
// tables with vgatherdps, which Zen runs slowly (AMD EPYC, 2 threads: gelu_tanh over [1, 128, 3072] 0.77 ms
// against onnxruntime's 0.24; the logistic over [1, 256, 56, 56] 0.25 ms against 0.14), where with AVX-512 they
// permute registers instead. exp is a polynomial after range reduction (Cephes' expf, within 2 ulp), no table:
// - GELU's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3), as x / (1 + exp(-2u)), the
//   same function (tanh(u) = 2 sigmoid(2u) - 1);
// - the logistic, 1 / (1 + exp(-x)).
namespace exp_activation {
enum class Function { kGeluTanh, kLogistic };
constexpr float kScale = 0.7978845608028654f, kCube = 0.044715f;

inline float Scalar(Function f, float x) {
  if (f == Function::kLogistic) return 1.0f / (1.0f + std::exp(-x));
  return 0.5f * x * (1.0f + std::tanh(kScale * (x + kCube * x * x * x)));
}

__attribute__((target("avx2,fma"))) inline __m256 ExpAvx2(__m256 z) {
  z = _mm256_min_ps(_mm256_max_ps(z, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), z);  // ln 2 in two parts: r = z - n ln 2, exactly
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

__attribute__((target("avx2,fma"))) inline void MapAvx2(Function f, const float* x, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (f == Function::kLogistic) {
      _mm256_storeu_ps(y + i, _mm256_div_ps(one, _mm256_add_ps(one, ExpAvx2(_mm256_sub_ps(_mm256_setzero_ps(), v)))));
    } else {
      __m256 u = _mm256_mul_ps(_mm256_set1_ps(kScale), _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kCube), v),
                                                                       _mm256_mul_ps(v, v), v));
      __m256 e = ExpAvx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
      _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, e)));
    }
  }
  for (; i < n; ++i) y[i] = Scalar(f, x[i]);
}
}  // namespace exp_activation

class ExpActivation : public Kernel {
 public:
  ExpActivation(exp_activation::Function f, int64_t count) : f_(f), count_(count) {}
  const char* Name() const override { return f_ == exp_activation::Function::kLogistic ? "logistic" : "gelu_tanh"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    float* y = Data<float>(args, DNNL_ARG_DST);
    static const bool avx2 = CpuHasAvx2Fma();
    SplitAcrossTeam(count_, [&](int64_t i0, int64_t i1) {
      if (avx2) {
        exp_activation::MapAvx2(f_, x + i0, y + i0, i1 - i0);
      } else {
        for (int64_t i = i0; i < i1; ++i) y[i] = exp_activation::Scalar(f_, x[i]);
      }
    });
  }

 private:
  exp_activation::Function f_;
  int64_t count_;
};

// NaNs replaced by a value (byoc.nan_to: ONNX's Where(IsNaN(x), c, x), the guard after a transformer's softmax).
class NanTo : public Kernel {
 public:
  NanTo(int64_t count, float value) : count_(count), value_(value) {}
  const char* Name() const override { return "nan_to"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    float* y = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeam(count_, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) y[i] = std::isnan(x[i]) ? value_ : x[i];
    });
  }

 private:
  int64_t count_;
  float value_;
};

// One value replaced by another (`from` by `to`) in place: the finite extreme a max (min) reduction of oneDNN starts
// from, by the infinity ONNX's starts from (Builder::Reduce).
class ValueTo : public Kernel {
 public:
  ValueTo(int64_t count, float from, float to) : count_(count), from_(from), to_(to) {}
  const char* Name() const override { return "value_to"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    float* y = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeamIfLarge(count_, count_, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) y[i] = y[i] == from_ ? to_ : y[i];
    });
  }

 private:
  int64_t count_;
  float from_, to_;
};

// x / sqrt(mean(x * x) + epsilon) over each row of `width`, times a weight of `width` values when given
// (byoc.rms_norm: RMSNorm, which exports spell as six or seven ops; codegens/dnnl/rms_norm.py).
class RmsNorm : public Kernel {
 public:
  RmsNorm(int64_t rows, int64_t width, float epsilon, bool weighted)
      : rows_(rows), width_(width), epsilon_(epsilon), weighted_(weighted) {}
  const char* Name() const override { return "rms_norm"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    const float* w = weighted_ ? Data<const float>(args, DNNL_ARG_WEIGHTS) : nullptr;
    float* y = Data<float>(args, DNNL_ARG_DST);
    const int64_t width = width_;
    SplitAcrossTeamIfLarge(rows_, rows_ * width, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * width;
        float* yr = y + r * width;
        float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight partial sums: a loop the compiler vectorizes
        int64_t j = 0;
        for (; j + 8 <= width; j += 8)
          for (int k = 0; k < 8; ++k) lanes[k] += xr[j + k] * xr[j + k];
        float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        for (; j < width; ++j) sum += xr[j] * xr[j];
        const float inv = 1.0f / std::sqrt(sum / static_cast<float>(width) + epsilon_);
        if (w != nullptr) {
          for (j = 0; j < width; ++j) yr[j] = xr[j] * inv * w[j];
        } else {
          for (j = 0; j < width; ++j) yr[j] = xr[j] * inv;
        }
      }
    });
  }

 private:
  int64_t rows_, width_;
  float epsilon_;
  bool weighted_;
};

// Strides (in elements) of a plain tensor of dims `in`, read through the `out` dims it broadcasts to (numpy's
// right-aligned broadcasting): 0 on an axis it has size 1 on, or lacks.
inline std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    size_t d_in = in.size() - 1 - k, d_out = out.size() - 1 - k;
    if (in[d_in] != 1) strides[d_out] = stride;
    stride *= in[d_in];
  }
  return strides;
}

// The offset of row `row` (a multi-index over every axis but the last, in `dims`) through `strides`.
inline int64_t RowOffset(int64_t row, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t d = dims.size() - 1; d-- > 0;) {
    offset += (row % dims[d]) * strides[d];
    row /= dims[d];
  }
  return offset;
}

// x * cos + rotate_half(x) * sin over the last axis, where rotate_half(x) = concat(-x[d/2:], x[:d/2]), with cos and
// sin broadcast to x's dims (`cos`, `sin`: BroadcastStrides). byoc.rotary: the rotary position embedding, which
// exports spell as seven ops (codegens/dnnl/rotary.py).
class Rotary : public Kernel {
 public:
  Rotary(std::vector<int64_t> dims, std::vector<int64_t> cos, std::vector<int64_t> sin)
      : dims_(std::move(dims)), cos_(std::move(cos)), sin_(std::move(sin)) {}
  const char* Name() const override { return "rotary"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC_0);
    const float* c = Data<const float>(args, DNNL_ARG_SRC_1);
    const float* s = Data<const float>(args, DNNL_ARG_SRC_2);
    float* out = Data<float>(args, DNNL_ARG_DST);
    const int64_t width = dims_.back(), half = width / 2, cl = cos_.back(), sl = sin_.back();
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < dims_.size(); ++d) rows *= dims_[d];
    SplitAcrossTeamIfLarge(rows, rows * width, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* xr = x + r * width;
        const float* cr = c + RowOffset(r, dims_, cos_);
        const float* sr = s + RowOffset(r, dims_, sin_);
        float* o = out + r * width;
        for (int64_t j = 0; j < half; ++j) o[j] = xr[j] * cr[j * cl] + (-xr[j + half]) * sr[j * sl];
        for (int64_t j = half; j < width; ++j) o[j] = xr[j] * cr[j * cl] + xr[j - half] * sr[j * sl];
      }
    });
  }

 private:
  std::vector<int64_t> dims_, cos_, sin_;
};

// relax.where (ONNX Where): x where the bool mask is set, else y, each operand broadcast to the output's dims.
// Transformers' attention masks (a score or the float minimum, by a mask computed from the input's).
class Select : public Kernel {
 public:
  Select(std::vector<int64_t> dims, std::vector<int64_t> cond, std::vector<int64_t> x, std::vector<int64_t> y)
      : dims_(std::move(dims)), cond_(std::move(cond)), x_(std::move(x)), y_(std::move(y)) {}
  const char* Name() const override { return "where"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const uint8_t* c = Data<const uint8_t>(args, DNNL_ARG_SRC_0);
    const float* x = Data<const float>(args, DNNL_ARG_SRC_1);
    const float* y = Data<const float>(args, DNNL_ARG_SRC_2);
    float* out = Data<float>(args, DNNL_ARG_DST);
    int64_t width = dims_.empty() ? 1 : dims_.back(), rows = 1;
    for (size_t d = 0; d + 1 < dims_.size(); ++d) rows *= dims_[d];
    int64_t cl = dims_.empty() ? 0 : cond_.back(), xl = dims_.empty() ? 0 : x_.back(), yl = dims_.empty() ? 0 : y_.back();
    SplitAcrossTeamIfLarge(rows, rows * width, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* cr = c + (dims_.empty() ? 0 : RowOffset(r, dims_, cond_));
        const float* xr = x + (dims_.empty() ? 0 : RowOffset(r, dims_, x_));
        const float* yr = y + (dims_.empty() ? 0 : RowOffset(r, dims_, y_));
        float* o = out + r * width;
        for (int64_t j = 0; j < width; ++j) o[j] = cr[j * cl] ? xr[j * xl] : yr[j * yl];
      }
    });
  }

 private:
  std::vector<int64_t> dims_, cond_, x_, y_;
};

// relax.gather_elements (ONNX GatherElements): out[i] = data[i with its `axis` coordinate replaced by index[i]];
// the index (int64, or float32 for a constant; negative from the end) has the output's dims, the data plain
// strides. An index out of range
// is an error, as in onnxruntime, never a read outside the data.
class GatherElements : public Kernel {
 public:
  GatherElements(std::vector<int64_t> dims, std::vector<int64_t> data_strides, size_t axis, int64_t extent)
      : dims_(std::move(dims)), data_(std::move(data_strides)), axis_(axis), extent_(extent) {}
  const char* Name() const override { return "gather_elements"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC_0);
    const memory& index_memory = args.at(DNNL_ARG_SRC_1);
    // int64 from the host, or float32 for a constant index (codegens/dnnl/gather.py)
    bool float_index = index_memory.get_desc().get_data_type() == memory::data_type::f32;
    const int64_t* index = static_cast<const int64_t*>(index_memory.get_data_handle());
    const float* float_index_data = static_cast<const float*>(index_memory.get_data_handle());
    float* out = Data<float>(args, DNNL_ARG_DST);
    size_t last = dims_.size() - 1;
    int64_t width = dims_.back(), rows = 1;
    for (size_t d = 0; d < last; ++d) rows *= dims_[d];
    std::vector<int64_t> base = data_;
    base[axis_] = 0;  // a row's offset without its axis coordinate
    std::atomic<bool> outside{false};
    SplitAcrossTeamIfLarge(rows, rows * width, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        int64_t offset = RowOffset(r, dims_, base);
        float* o = out + r * width;
        for (int64_t j = 0; j < width; ++j) {
          int64_t i = float_index ? static_cast<int64_t>(float_index_data[r * width + j]) : index[r * width + j];
          int64_t k = i < 0 ? i + extent_ : i;
          if (k < 0 || k >= extent_) {
            outside.store(true, std::memory_order_relaxed);
            o[j] = 0.0f;
            continue;
          }
          o[j] = x[offset + k * data_[axis_] + (axis_ == last ? 0 : j * data_[last])];
        }
      }
    });
    if (outside.load()) Fail("GatherElements: an index is outside the axis of " + std::to_string(extent_));
  }

 private:
  std::vector<int64_t> dims_, data_;
  size_t axis_;
  int64_t extent_;
};

// ScatterElements with each update replacing: out = data, then out at each index (along `axis`, the other
// coordinates the index's own) = the update there. In place (`copy` false: out is data's buffer) where nothing else
// reads the data: a decoder's cache with its new entries written at their positions costs their bytes, not the
// cache's. An index outside the axis is an error, as for onnxruntime; duplicate indices leave the last update.
class ScatterElements : public Kernel {
 public:
  ScatterElements(std::vector<int64_t> index_dims, std::vector<int64_t> data_strides, size_t axis, int64_t extent,
                  size_t data_bytes, bool copy)
      : dims_(std::move(index_dims)), data_(std::move(data_strides)), axis_(axis), extent_(extent),
        data_bytes_(data_bytes), copy_(copy) {}
  const char* Name() const override { return copy_ ? "scatter_elements" : "scatter_elements_in_place"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const int64_t* index = Data<const int64_t>(args, DNNL_ARG_SRC_1);
    const float* updates = Data<const float>(args, DNNL_ARG_SRC_2);
    float* out = Data<float>(args, DNNL_ARG_DST);
    if (copy_) std::memcpy(out, Data<const float>(args, DNNL_ARG_SRC_0), data_bytes_);
    size_t last = dims_.size() - 1;
    int64_t width = dims_.back(), rows = 1;
    for (size_t d = 0; d < last; ++d) rows *= dims_[d];
    std::vector<int64_t> base = data_;
    base[axis_] = 0;  // a row's offset without its axis coordinate
    for (int64_t r = 0; r < rows; ++r) {  // in order: the last of duplicate indices is written last
      int64_t offset = RowOffset(r, dims_, base);
      for (int64_t j = 0; j < width; ++j) {
        int64_t i = index[r * width + j];
        int64_t k = i < 0 ? i + extent_ : i;
        if (k < 0 || k >= extent_)
          Fail("ScatterElements: index " + std::to_string(i) + " is outside the axis of " + std::to_string(extent_));
        out[offset + k * data_[axis_] + (axis_ == last ? 0 : j * data_[last])] = updates[r * width + j];
      }
    }
  }

 private:
  std::vector<int64_t> dims_, data_;
  size_t axis_;
  int64_t extent_;
  size_t data_bytes_;
  bool copy_;
};

// The windows of a stride-1 unpadded conv1d over a batch-1 NWC source, as the rows of a matrix: row t is the
// bytes of x[t .. t + kernel) (contiguous in NWC), so the conv is one matmul of these rows (Builder::WindowsAsMatmul).
class Windows : public Kernel {
 public:
  Windows(int64_t rows, int64_t row_bytes, int64_t step_bytes)
      : rows_(rows), row_bytes_(row_bytes), step_bytes_(step_bytes) {}
  const char* Name() const override { return "windows"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const char* x = Data<const char>(args, DNNL_ARG_SRC);
    char* rows = Data<char>(args, DNNL_ARG_DST);
    SplitAcrossTeam(rows_, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) std::memcpy(rows + t * row_bytes_, x + t * step_bytes_, row_bytes_);
    });
  }

 private:
  int64_t rows_, row_bytes_, step_bytes_;
};

// Every float of the destination set to one value: the border of a constant pad, before the source is
// copied into its middle (Builder::Pad). oneDNN has no fill primitive, and x * 0 + v keeps a stale NaN.
class Fill : public Kernel {
 public:
  Fill(int64_t count, float value) : count_(count), value_(value) {}
  const char* Name() const override { return "fill"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    float* y = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeam(count_, [&](int64_t i0, int64_t i1) { std::fill(y + i0, y + i1, value_); });
  }

 private:
  int64_t count_;
  float value_;
};

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_KERNELS_H_
