// dynamic.cc -- quantize_dynamic's matmuls (byoc.dynamic_int8_matmul, codegens/dnnl/dynamic.py): the float32
// activation quantized to u8 per call exactly as ONNX defines DynamicQuantizeLinear, then one oneDNN u8 x s8 matmul
// whose source scale and zero point are run-time arguments, the weight scales constant, the bias its bias.
#include <algorithm>
#include <cmath>
#include <limits>

#include <immintrin.h>

#include "builder.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

namespace {

// min and max of x[0, n) (NaNs ignored by the comparisons, as onnxruntime's MlasFindMinMaxElement).
void MinMaxScalar(const float* x, int64_t n, float* lo, float* hi) {
  float l = *lo, h = *hi;
  for (int64_t i = 0; i < n; ++i) {
    l = x[i] < l ? x[i] : l;
    h = x[i] > h ? x[i] : h;
  }
  *lo = l;
  *hi = h;
}

__attribute__((target("avx2"))) void MinMaxAvx2(const float* x, int64_t n, float* lo, float* hi) {
  int64_t i = 0;
  if (n >= 8) {
    __m256 l = _mm256_set1_ps(*lo), h = _mm256_set1_ps(*hi);
    for (; i + 8 <= n; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i);
      l = _mm256_min_ps(v, l);  // the second operand where either is NaN
      h = _mm256_max_ps(v, h);
    }
    alignas(32) float ls[8], hs[8];
    _mm256_store_ps(ls, l);
    _mm256_store_ps(hs, h);
    MinMaxScalar(ls, 8, lo, hi);
    MinMaxScalar(hs, 8, lo, hi);
  }
  MinMaxScalar(x + i, n - i, lo, hi);
}

// y = saturate(round_half_even(x / scale) + zero_point) to u8 (ONNX QuantizeLinear; the rounding mode is the
// default, to nearest even).
void QuantizeScalar(const float* x, int64_t n, float scale, float zero_point, uint8_t* y) {
  for (int64_t i = 0; i < n; ++i) {
    float v = std::nearbyint(x[i] / scale) + zero_point;
    v = v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v);
    y[i] = static_cast<uint8_t>(static_cast<int32_t>(v));
  }
}

__attribute__((target("avx2"))) void QuantizeAvx2(const float* x, int64_t n, float scale, float zero_point,
                                                  uint8_t* y) {
  const __m256 s = _mm256_set1_ps(scale), zp = _mm256_set1_ps(zero_point), lo = _mm256_setzero_ps(),
               hi = _mm256_set1_ps(255.0f);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * j), s),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, zp), lo), hi));
    }
    // pack 32 int32 in [0, 255] to bytes; the packs work per 128-bit lane, the permute puts them in order
    __m256i words = _mm256_packus_epi32(q[0], q[1]), words2 = _mm256_packus_epi32(q[2], q[3]);
    __m256i bytes = _mm256_packus_epi16(words, words2);
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), bytes);
  }
  QuantizeScalar(x + i, n - i, scale, zero_point, y + i);
}

const bool kAvx2 = __builtin_cpu_supports("avx2");

void MinMax(const float* x, int64_t n, float* lo, float* hi) {
  *lo = std::numeric_limits<float>::max();
  *hi = std::numeric_limits<float>::lowest();
  kAvx2 ? MinMaxAvx2(x, n, lo, hi) : MinMaxScalar(x, n, lo, hi);
}

void QuantizeU8(const float* x, int64_t n, float scale, float zero_point, uint8_t* y) {
  kAvx2 ? QuantizeAvx2(x, n, scale, zero_point, y) : QuantizeScalar(x, n, scale, zero_point, y);
}

// ONNX DynamicQuantizeLinear on a plain float32 tensor: DNNL_ARG_SRC (n floats) -> DNNL_ARG_DST (n u8),
// DNNL_ARG_DST_1 (the scale, one f32), DNNL_ARG_DST_2 (the zero point, one s32). The range includes 0;
// scale = (max - min) / 255, zero point = saturate(round_half_even(-min / scale)). An all-zero tensor (max ==
// min) takes scale 1, as onnxruntime does (ONNX's formula divides by 0 there).
class DynamicQuantize : public Kernel {
 public:
  explicit DynamicQuantize(int64_t count) : count_(count) {}
  const char* Name() const override { return "dynamic_quantize"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    uint8_t* y = Data<uint8_t>(args, DNNL_ARG_DST);
    float lo = 0.0f, hi = 0.0f;
    bool team = count_ >= kTeamElements;  // a token's row is not worth waking the team
#pragma omp parallel if (team)
    {
      int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
      int64_t i0 = count_ * part / parts, i1 = count_ * (part + 1) / parts;
      float l = 0.0f, h = 0.0f;
      if (i1 > i0) MinMax(x + i0, i1 - i0, &l, &h);
#pragma omp critical
      {
        if (i1 > i0) {
          lo = std::min(lo, l);
          hi = std::max(hi, h);
        }
      }
    }
    lo = std::min(lo, 0.0f);
    hi = std::max(hi, 0.0f);
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zero_point = std::min(255.0f, std::max(0.0f, std::nearbyint(0.0f - lo / scale)));
    *Data<float>(args, DNNL_ARG_DST_1) = scale;
    *Data<int32_t>(args, DNNL_ARG_DST_2) = static_cast<int32_t>(zero_point);
    if (team)
      SplitAcrossTeam(count_, [&](int64_t i0, int64_t i1) { QuantizeU8(x + i0, i1 - i0, scale, zero_point, y + i0); });
    else
      QuantizeU8(x, count_, scale, zero_point, y);
  }

 private:
  static constexpr int64_t kTeamElements = 16384;
  int64_t count_;
};

// DynamicQuantizeLinear(x) as the float32 integers x_q - zero_point (DNNL_ARG_DST) and x_scale * w_scale
// (DNNL_ARG_DST_1, one f32, the product ONNX's Mul node of the two scales computes): what a float32 convolution of
// the integer weights reads where int8 kernels would saturate (DynamicInt8Conv2d without VNNI).
class DynamicQuantizeCentred : public Kernel {
 public:
  DynamicQuantizeCentred(int64_t count, float w_scale) : count_(count), w_scale_(w_scale) {}
  const char* Name() const override { return "dynamic_quantize_f32"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    float* y = Data<float>(args, DNNL_ARG_DST);
    float lo = 0.0f, hi = 0.0f;
    MinMax(x, count_, &lo, &hi);
    lo = std::min(lo, 0.0f);
    hi = std::max(hi, 0.0f);
    float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zero_point = std::min(255.0f, std::max(0.0f, std::nearbyint(0.0f - lo / scale)));
    *Data<float>(args, DNNL_ARG_DST_1) = scale * w_scale_;
    for (int64_t i = 0; i < count_; ++i) {
      float v = std::nearbyint(x[i] / scale) + zero_point;
      y[i] = (v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v)) - zero_point;
    }
  }

 private:
  int64_t count_;
  float w_scale_;
};

// The source's scale and zero point as run-time arguments (one each, per tensor): the values a
// DynamicallyQuantized step writes on every call.
void RunTimeSourceQuantization(primitive_attr* attr, std::vector<Arg>* args, int scale, int zero_point) {
  attr->set_scales_mask(DNNL_ARG_SRC, 0);
  args->push_back({DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, scale, Plain({1})});
  attr->set_zero_points_mask(DNNL_ARG_SRC, 0);
  args->push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zero_point, Plain({1}, memory::data_type::s32)});
}

}  // namespace

// x quantized to u8 in layout `layout` (plain, or channels last for a conv), with its scale and zero point: one
// byoc kernel step per (x, layout), shared by every dynamic int8 op that reads x so (Q, K and V).
const Builder::DynamicQuantized& Builder::DynamicallyQuantized(int x, const Desc& layout) {
  auto key = std::make_pair(x, DescKey(layout));
  auto found = dynamic_quantized_.find(key);
  if (found != dynamic_quantized_.end()) return found->second;
  Desc values(layout.get_dims(), memory::data_type::u8, layout.get_strides());
  Desc scale = Plain({1}), zero_point = Plain({1}, memory::data_type::s32);
  DynamicQuantized q{NewTemp(values), NewTemp(scale), NewTemp(zero_point)};
  AddStep(dnnl::primitive(),
          {{DNNL_ARG_SRC, As(x, layout), layout}, {DNNL_ARG_DST, q.values, values}, {DNNL_ARG_DST_1, q.scale, scale},
           {DNNL_ARG_DST_2, q.zero_point, zero_point}},
          Desc(), std::make_shared<DynamicQuantize>(g_.tensor(x).numel));
  return dynamic_quantized_.emplace(key, q).first->second;
}

// x [N, C, H, W] (float32) conv w [O, C/groups, kh, kw] (a constant of int8 values) [+ bias [O]] -> y float32: x quantized
// per call (channels last, the layout oneDNN's int8 convolutions take), one int8 convolution with the source scale
// and zero point as run-time arguments (ConvInteger -> Cast -> Mul(x_scale * w_scale) [-> Add bias]).
size_t Builder::DynamicInt8Conv2d(size_t k, const Attrs& a) {
  const BodyOp& op = g_.ops()[k];
  if (op.inputs.size() != 2 && op.inputs.size() != 3) Fail(op.where + " takes 2 or 3 inputs");
  int x = op.inputs[0], w = op.inputs[1];
  const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
  // the weight's int8 bytes, sent as a float32 constant of a quarter of the elements (codegens/dnnl/dynamic.py)
  const std::vector<int64_t> ws = a.Ints("w_shape");
  if (ws.size() != 4) Fail(op.where + ": w_shape " + ShapeStr(ws) + " is not OIHW");
  ConvGeometry g = CheckConv(a, xs, ws, ys, 2, op.where);
  // Grouped (ConvNeXt's and MobileNet's depthwise 7x7 and 3x3): oneDNN's weights [G, O/G, C/G, kh, kw], the same
  // bytes as ONNX's [O, C/G, kh, kw].
  Dims wdims(ws.begin(), ws.end());
  if (g.groups != 1) {
    wdims[0] /= g.groups;
    wdims.insert(wdims.begin(), g.groups);
  }
  ConvDims c{g.groups, wdims, Dims(g.strides.begin(), g.strides.end()), {}, {}, {}};
  for (size_t d = 0; d < 2; ++d) {
    c.dilation.push_back(g.dilation[d] - 1);
    c.pad_l.push_back(g.padding[d]);
    c.pad_r.push_back(g.padding[2 + d]);
  }
  int weights = values_.ConstView(PackedConst(w, Plain(ws, memory::data_type::s8), op.where),
                                  Plain(std::vector<int64_t>(wdims.begin(), wdims.end()), memory::data_type::s8));
  if (op.inputs.size() == 3 && g_.tensor(op.inputs[2]).numel != ys[1])
    Fail(op.where + ": the bias must hold one value per output channel (" + std::to_string(ys[1]) + ")");
  std::vector<double> w_scale = a.Floats("w_scale");
  if (w_scale.size() != 1) Fail(op.where + ": " + std::to_string(w_scale.size()) + " weight scales (one only)");
  if (!OnednnHasVnni()) {
    // Without VNNI oneDNN's int8 convolution sums u8 x s8 pairs in int16, which saturates where onnxruntime's
    // ConvInteger does not (measured: 0.64 off in one channel of a 4 -> 8 3x3 conv). A float32 convolution of
    // the integers computes the sums exactly while they stay below 2**24, and within float32's rounding beyond
    // (what the host computes for this form too: qoperators.py); the scale product and the bias follow as
    // post-ops, in ONNX's order.
    Desc centred = ChannelsLast(xs, memory::data_type::f32), product = Plain({1});
    int values = NewTemp(centred), scaled = NewTemp(product);
    AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, As(x, centred), centred}, {DNNL_ARG_DST, values, centred},
                                {DNNL_ARG_DST_1, scaled, product}},
            Desc(), std::make_shared<DynamicQuantizeCentred>(g_.tensor(x).numel, static_cast<float>(w_scale[0])));
    Desc one({1, 1, 1, 1}, memory::data_type::f32, memory::format_tag::abcd);
    Desc per_channel({1, ys[1], 1, 1}, memory::data_type::f32, memory::format_tag::abcd);
    post_ops post;
    post.append_binary(algorithm::binary_mul, one);
    if (op.inputs.size() == 3) post.append_binary(algorithm::binary_add, per_channel);
    primitive_attr attr = UserScratchpad(post);
    auto pd = ConvPd(c, centred, Any(c.weights), nullptr, Any(DimsOf(ys), memory::data_type::f32), attr);
    std::vector<Arg> args{{DNNL_ARG_SRC, values, centred},
                          {DNNL_ARG_WEIGHTS, values_.ReorderConst(weights, pd.weights_desc()),
                           pd.weights_desc()},
                          {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scaled, one}};
    if (op.inputs.size() == 3)
      args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, values_.of(op.inputs[2]), per_channel});
    args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
    AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
    return k + 1;
  }
  const DynamicQuantized& q = DynamicallyQuantized(x, ChannelsLast(xs, memory::data_type::f32));
  primitive_attr attr = UserScratchpad();
  std::vector<Arg> args;
  RunTimeSourceQuantization(&attr, &args, q.scale, q.zero_point);
  Scales(&attr, &args, DNNL_ARG_WEIGHTS, w_scale, 0);
  Desc src = ChannelsLast(xs, memory::data_type::u8), bias = Plain({ys[1]});
  auto pd = ConvPd(c, src, Any(c.weights, memory::data_type::s8), op.inputs.size() == 3 ? &bias : nullptr,
                   Any(DimsOf(ys), memory::data_type::f32), attr);
  args.push_back({DNNL_ARG_SRC, q.values, src});
  args.push_back({DNNL_ARG_WEIGHTS, values_.ReorderConst(weights, pd.weights_desc(), {}, 0),
                  pd.weights_desc()});
  if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, values_.of(op.inputs[2]), bias});
  args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
  AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
  return k + 1;
}

// x [..., K] (float32) x w [K, N] (a constant holding s8 values) [+ bias [N]] -> y [..., N] float32, as the rows
// [rows, K] x [K, N]: y = (x_q - zp) w * (x_scale * w_scale) + bias, where x_q, x_scale and zp are
// DynamicQuantizeLinear(x), computed once per x for all the ops that read it.
size_t Builder::DynamicInt8Matmul(size_t k, const Attrs& a) {
  const BodyOp& op = g_.ops()[k];
  if (op.inputs.size() != 2 && op.inputs.size() != 3) Fail(op.where + " takes 2 or 3 inputs");
  int x = op.inputs[0], w = op.inputs[1];
  // the weight's int8 bytes, sent as a float32 constant of a quarter of the elements (codegens/dnnl/dynamic.py)
  const std::vector<int64_t> ws = a.Ints("w_shape");
  const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
  if (xs.size() < 2 || ws.size() != 2 || xs.back() != ws[0] || ys.back() != ws[1] || ys.size() != xs.size())
    Fail(op.where + ": shapes " + ShapeStr(xs) + " x " + ShapeStr(ws) + " -> " + ShapeStr(ys) + " do not match");
  int64_t depth = ws[0], columns = ws[1], rows = g_.tensor(x).numel / depth;
  if (op.inputs.size() == 3 && g_.tensor(op.inputs[2]).numel != columns)
    Fail(op.where + ": the bias must hold one value per output column (" + std::to_string(columns) + ")");
  std::vector<double> w_scale = a.Floats("w_scale");
  if (w_scale.size() != 1 && static_cast<int64_t>(w_scale.size()) != columns)
    Fail(op.where + ": " + std::to_string(w_scale.size()) + " weight scales for " + std::to_string(columns) + " columns");

  const DynamicQuantized& q = DynamicallyQuantized(x, Plain(xs));

  primitive_attr attr = UserScratchpad();
  std::vector<Arg> args;
  RunTimeSourceQuantization(&attr, &args, q.scale, q.zero_point);
  Scales(&attr, &args, DNNL_ARG_WEIGHTS, w_scale, 2);  // per output column
  if (DynamicRowsAsConv(op, ws, q, w_scale)) return k + 1;
  Desc src({rows, depth}, memory::data_type::u8, memory::format_tag::ab);
  Desc dst({rows, columns}, memory::data_type::f32, memory::format_tag::ab);
  Desc bias({1, columns}, memory::data_type::f32, memory::format_tag::ab);
  Desc w_any({depth, columns}, memory::data_type::s8, memory::format_tag::any);
  auto pd = op.inputs.size() == 3 ? dnnl::matmul::primitive_desc(Engine(), src, w_any, bias, dst, attr)
                                  : dnnl::matmul::primitive_desc(Engine(), src, w_any, dst, attr);
  args.push_back({DNNL_ARG_SRC, q.values, src});
  args.push_back({DNNL_ARG_WEIGHTS, values_.ReorderConst(PackedConst(w, Plain(ws, memory::data_type::s8), op.where), pd.weights_desc(), {}, 0),
                  pd.weights_desc()});
  if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, values_.of(op.inputs[2]), bias});
  args.push_back({DNNL_ARG_DST, Define(op.output, Plain(ys)), dst});
  AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
  return k + 1;
}


// The matmul as a 1x1 convolution over a rows x 1 NHWC image (the same bytes in and out, as RowsAsConv for the
// static units): oneDNN's int8 1x1 convolution packs the weight once, where its int8 gemm packs it on every call.
// Measured on AVX2 (AMD EPYC, 2 threads): [128, 768] x [768, 768] 0.40 ms against 0.86 ms; one row 0.010 ms
// against 0.085 ms. Both add u8 x s8 pairs in int16 without VNNI, as onnxruntime's kernels do (int8.md). False,
// adding nothing, when oneDNN offers only its reference kernel.
bool Builder::DynamicRowsAsConv(const BodyOp& op, const std::vector<int64_t>& ws, const DynamicQuantized& q,
                                const std::vector<double>& w_scale) {
  int w = op.inputs[1];
  const auto& ys = g_.Shape(op.output);
  int64_t depth = ws[0], columns = ws[1], rows = g_.tensor(op.inputs[0]).numel / depth;
  Desc src({1, depth, rows, 1}, memory::data_type::u8, memory::format_tag::nhwc);
  Desc dst({1, columns, rows, 1}, memory::data_type::f32, memory::format_tag::nhwc);
  Desc bias = Plain({columns});
  ConvDims c{1, {columns, depth, 1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}};
  primitive_attr attr = UserScratchpad();
  std::vector<Arg> args;
  RunTimeSourceQuantization(&attr, &args, q.scale, q.zero_point);
  Scales(&attr, &args, DNNL_ARG_WEIGHTS, w_scale, 1);
  auto pd = ConvPd(c, src, Any(c.weights, memory::data_type::s8), op.inputs.size() == 3 ? &bias : nullptr, dst,
                    attr);
  if (IsReference(pd)) return false;
  Desc transposed({columns, depth, 1, 1}, memory::data_type::s8, Dims{1, columns, columns * depth, columns * depth});
  args.push_back({DNNL_ARG_SRC, q.values, src});
  args.push_back({DNNL_ARG_WEIGHTS, values_.ReorderConst(PackedConst(w, transposed, op.where), pd.weights_desc(), {}, 0),
                   pd.weights_desc()});
  if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, values_.of(op.inputs[2]), bias});
  args.push_back({DNNL_ARG_DST, Define(op.output, Plain(ys)), dst});
  AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
  return true;
}

}  // namespace dnnl_runtime
}  // namespace byoc
