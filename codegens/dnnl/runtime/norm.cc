// norm.cc -- normalizations: softmax, layer norm, LRN, batch norm.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "builder.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

void Builder::Softmax(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  SameShape(op, op.inputs[0]);
  const auto& xs = g_.Shape(op.inputs[0]);
  if (xs.empty()) Fail(op.where + ": softmax of a scalar is not supported");
  int axis = static_cast<int>(NormAxis(a.Int("axis"), xs.size(), op.where));
  auto make = [&](const Desc& desc) {
    return dnnl::softmax_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                 algorithm::softmax_accurate, desc, desc, axis, UserScratchpad());
  };
  Desc desc = Plain(xs);
  auto pd = make(desc);
  // oneDNN's jit softmax needs the axis innermost in memory; over another axis it runs its
  // reference kernel (measured: 18 ms of NudeNet's 40 ms, YOLOv8's softmax over 16 box bins
  // on axis 1). So the input is reordered into a layout with the axis innermost, where the
  // output stays.
  if (static_cast<size_t>(axis) + 1 < xs.size() && IsReference(pd)) {
    Dims strides(xs.size());
    int64_t stride = xs[static_cast<size_t>(axis)];
    for (size_t i = xs.size(); i-- > 0;)
      if (static_cast<int>(i) != axis) strides[i] = stride, stride *= xs[i];
    strides[static_cast<size_t>(axis)] = 1;
    desc = Desc(DimsOf(xs), memory::data_type::f32, strides);
    pd = make(desc);
  }
  int src = As(op.inputs[0], desc);
  int dst = Define(op.output, desc);
  AddStep(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, src, desc}, {DNNL_ARG_DST, dst, desc}}, pd.scratchpad_desc());
}

void Builder::LayerNorm(const BodyOp& op, const Attrs& a) {
  Arity(op, 3);
  SameShape(op, op.inputs[0]);
  const auto& xs = g_.Shape(op.inputs[0]);
  auto axes = a.Ints("axes");
  if (xs.size() < 2 || axes.size() != 1 || NormAxis(axes[0], xs.size(), op.where) != static_cast<int64_t>(xs.size() - 1))
    Fail(op.where + ": layer norm over the last axis of a tensor of rank >= 2 only");
  int64_t c = xs.back();
  for (int p : {op.inputs[1], op.inputs[2]})
    if (g_.tensor(p).numel != c) Fail(op.where + ": gamma and beta must have " + std::to_string(c) + " values");
  auto flags = dnnl::normalization_flags::none;
  if (a.Bool("scale")) flags |= dnnl::normalization_flags::use_scale;
  if (a.Bool("center")) flags |= dnnl::normalization_flags::use_shift;
  Desc desc = Plain(xs), param = Plain(Dims{c});
  dnnl::layer_normalization_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, desc, desc,
                                                       static_cast<float>(a.Float("epsilon")), flags, UserScratchpad());
  int src = As(op.inputs[0], desc);
  std::vector<Arg> args = {{DNNL_ARG_SRC, src, desc}};
  if (a.Bool("scale")) args.push_back({DNNL_ARG_SCALE, As(op.inputs[1], Plain(g_.Shape(op.inputs[1]))), param});
  if (a.Bool("center")) args.push_back({DNNL_ARG_SHIFT, As(op.inputs[2], Plain(g_.Shape(op.inputs[2]))), param});
  args.push_back({DNNL_ARG_DST, Define(op.output, desc), desc});
  AddStep(dnnl::layer_normalization_forward(pd), std::move(args), pd.scratchpad_desc());
}

// byoc.rms_norm {epsilon}: x / sqrt(mean(x * x) + epsilon) over the last axis, times a weight of its width when
// given: the byoc RmsNorm kernel over plain layouts (codegens/dnnl/rms_norm.py makes the op of the exporters' forms).
void Builder::RmsNormOp(const BodyOp& op, const Attrs& a) {
  if (op.inputs.size() != 1 && op.inputs.size() != 2) Fail(op.where + ": expected x and an optional weight");
  SameShape(op, op.inputs[0]);
  const auto& xs = g_.Shape(op.inputs[0]);
  if (xs.empty() || xs.back() == 0) Fail(op.where + ": RMS norm of a scalar or an empty axis");
  int64_t width = xs.back(), rows = 1;
  for (size_t d = 0; d + 1 < xs.size(); ++d) rows *= xs[d];
  Desc desc = Plain(xs);
  std::vector<Arg> args = {{DNNL_ARG_SRC, As(op.inputs[0], desc), desc}};
  bool weighted = op.inputs.size() == 2;
  if (weighted) {
    if (g_.tensor(op.inputs[1]).numel != width)
      Fail(op.where + ": the weight must have " + std::to_string(width) + " values");
    Desc param = Plain(g_.Shape(op.inputs[1]));
    args.push_back({DNNL_ARG_WEIGHTS, As(op.inputs[1], param), param});
  }
  args.push_back({DNNL_ARG_DST, Define(op.output, desc), desc});
  AddStep(dnnl::primitive(), std::move(args), Desc(),
          std::make_shared<RmsNorm>(rows, width, static_cast<float>(a.Float("epsilon")), weighted));
}

// relax.nn.group_norm over channel axis 1 (ONNX GroupNormalization-21, and InstanceNormalization, which the
// preparation imports as one group per channel). oneDNN 3.2 has no group norm: a layer norm without scale or
// shift over the rows of the plain [N * groups, C / groups * spatial] view, then the per-channel scale and
// shift as one binary multiply with an add post-op over the [N, C, spatial] view.
void Builder::GroupNorm(const BodyOp& op, const Attrs& a) {
  Arity(op, 3);
  SameShape(op, op.inputs[0]);
  const auto& xs = g_.Shape(op.inputs[0]);
  int64_t groups = a.Int("num_groups");
  if (xs.size() < 3 || NormAxis(a.Int("channel_axis"), xs.size(), op.where) != 1 || groups <= 0 || xs[1] % groups)
    Fail(op.where + ": group norm over channel axis 1 of a tensor of rank >= 3, in groups that divide its channels");
  int64_t n = xs[0], c = xs[1], spatial = 1;
  for (size_t i = 2; i < xs.size(); ++i) spatial *= xs[i];
  Desc rows = Plain(Dims{n * groups, c / groups * spatial});
  dnnl::layer_normalization_forward::primitive_desc norm(Engine(), prop_kind::forward_inference, rows, rows,
                                                         static_cast<float>(a.Float("epsilon")),
                                                         dnnl::normalization_flags::none, UserScratchpad());
  int src = As(op.inputs[0], Plain(xs));
  bool scale = a.Bool("scale"), center = a.Bool("center");
  int normed = scale || center ? NewTemp(Plain(xs)) : Define(op.output, Plain(xs));
  AddStep(dnnl::layer_normalization_forward(norm), {{DNNL_ARG_SRC, src, rows}, {DNNL_ARG_DST, normed, rows}},
          norm.scratchpad_desc());
  if (!scale && !center) return;
  Desc ys = Plain(Dims{n, c, spatial}), param = Plain(Dims{1, c, 1});
  auto operand = [&](int input) { return As(input, Plain(g_.Shape(input))); };
  post_ops shift;
  if (scale && center) shift.append_binary(algorithm::binary_add, param);
  dnnl::binary::primitive_desc affine(Engine(), scale ? algorithm::binary_mul : algorithm::binary_add, ys, param, ys,
                                      UserScratchpad(shift));
  std::vector<Arg> args = {{DNNL_ARG_SRC_0, normed, ys}, {DNNL_ARG_SRC_1, operand(op.inputs[scale ? 1 : 2]), param},
                           {DNNL_ARG_DST, Define(op.output, Plain(xs)), ys}};
  if (scale && center) args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, operand(op.inputs[2]), param});
  AddStep(dnnl::binary(affine), std::move(args), affine.scratchpad_desc());
}

// A byoc.lrn op: ONNX LRN, which TVM imports as eight ops and the dnnl codegen rewrites as one
// (codegens/dnnl/activations.py): oneDNN's LRN across channels, x / (bias + alpha/size * the sum of the
// squares over `size` channels)^beta.
void Builder::Lrn(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  SameShape(op, op.inputs[0]);
  int x = op.inputs[0];
  const auto& xs = g_.Shape(x);
  if (xs.size() != 4) Fail(op.where + ": LRN of a rank-" + std::to_string(xs.size()) + " tensor (oneDNN: 4-D NCHW)");
  int src = values_.of(x);
  Desc desc = g_.tensor(x).kind == Kind::kConst ? Plain(xs) : values_[src].desc;
  dnnl::lrn_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, algorithm::lrn_across_channels, desc,
                                       desc, a.Int("size"), static_cast<float>(a.Float("alpha")),
                                       static_cast<float>(a.Float("beta")), static_cast<float>(a.Float("bias")),
                                       UserScratchpad());
  AddStep(dnnl::lrn_forward(pd),
          {{DNNL_ARG_SRC, As(x, desc), desc}, {DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()}},
          pd.scratchpad_desc());
}

// Inference batch norm (the first result of relax.nn.batch_norm): moving statistics as given.
void Builder::BatchNorm(const BodyOp& op, const Attrs& a) {
  Arity(op, 5);
  SameShape(op, op.inputs[0]);
  const auto& xs = g_.Shape(op.inputs[0]);
  if (xs.size() < 2 || xs.size() > 5 || NormAxis(a.Int("axis"), xs.size(), op.where) != 1)
    Fail(op.where + ": batch norm over axis 1 of a tensor of rank 2 to 5 only");
  if (a.Bool("training")) Fail(op.where + ": batch norm in training mode is not supported");
  int64_t c = xs[1];
  for (size_t i = 1; i < 5; ++i)
    if (g_.tensor(op.inputs[i]).numel != c) Fail(op.where + ": gamma, beta, mean and variance must have " + std::to_string(c) + " values");
  auto flags = dnnl::normalization_flags::use_global_stats;
  if (a.Bool("scale")) flags |= dnnl::normalization_flags::use_scale;
  if (a.Bool("center")) flags |= dnnl::normalization_flags::use_shift;
  int src = values_.of(op.inputs[0]);
  Desc desc = values_[src].desc, param = Plain(Dims{c});
  if (g_.tensor(op.inputs[0]).kind == Kind::kConst) desc = Plain(xs);
  dnnl::batch_normalization_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, desc, desc,
                                                       static_cast<float>(a.Float("epsilon")), flags, UserScratchpad());
  std::vector<Arg> args = {{DNNL_ARG_SRC, As(op.inputs[0], desc), desc}};
  auto param_arg = [&](int key, int id) { args.push_back({key, As(id, Plain(g_.Shape(id))), param}); };
  if (a.Bool("scale")) param_arg(DNNL_ARG_SCALE, op.inputs[1]);
  if (a.Bool("center")) param_arg(DNNL_ARG_SHIFT, op.inputs[2]);
  param_arg(DNNL_ARG_MEAN, op.inputs[3]);
  param_arg(DNNL_ARG_VARIANCE, op.inputs[4]);
  args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
  AddStep(dnnl::batch_normalization_forward(pd), std::move(args), pd.scratchpad_desc());
}

}  // namespace dnnl_runtime
}  // namespace byoc
