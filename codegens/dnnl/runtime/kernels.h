// kernels.h -- steps byoc computes itself between oneDNN primitives: the Winograd transforms, byte tables,
// ONNX's Erf, Sin and Cos, NaN guards, the windows of a conv1d and a pad's fill (their loops: winograd.h, byte_table.h).
#ifndef BYOC_DNNL_KERNELS_H_
#define BYOC_DNNL_KERNELS_H_

#include <algorithm>
#include <cmath>
#include <cstring>

#include "byte_table.h"
#include "common.h"
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
