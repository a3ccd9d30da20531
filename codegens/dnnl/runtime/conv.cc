// conv.cc -- convolutions: conv1d/conv2d (direct, or Winograd: winograd.cc) and the transposed conv2d.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "builder.h"

namespace byoc {
namespace dnnl_runtime {

Builder::ConvDims Builder::ConvShape(const BodyOp& op, const Attrs& a) const {
  int w = op.inputs[1];
  if (!IsConstant(w)) Fail(op.where + ": the weight must be a constant (it is reordered at load)");
  const std::vector<int64_t> ws = WeightShape(op);
  size_t spatial = op.kernel == "relax.nn.conv1d" || op.kernel == "qnn.conv1d" ? 1 : 2;
  ConvGeometry g = CheckConv(a, g_.Shape(op.inputs[0]), ws, g_.Shape(op.output), spatial, op.where);
  Dims weights(ws.begin(), ws.end());
  if (g.groups != 1) {
    weights[0] /= g.groups;
    weights.insert(weights.begin(), g.groups);
  }
  ConvDims c{g.groups, weights, Dims(g.strides.begin(), g.strides.end()), {}, {}, {}};
  for (size_t d = 0; d < spatial; ++d) {
    c.dilation.push_back(g.dilation[d] - 1);
    c.pad_l.push_back(g.padding[d]);
    c.pad_r.push_back(g.padding[spatial + d]);
  }
  return c;
}

// A forward convolution over `c`, with a bias when `bias` is given.
dnnl::convolution_forward::primitive_desc Builder::ConvPd(const ConvDims& c, const Desc& src, const Desc& weights,
                                                          const Desc* bias, const Desc& dst,
                                                          const primitive_attr& attr) {
  if (bias)
    return dnnl::convolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                     algorithm::convolution_direct, src, weights, *bias, dst,
                                                     c.strides, c.dilation, c.pad_l, c.pad_r, attr);
  return dnnl::convolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                   algorithm::convolution_direct, src, weights, dst, c.strides,
                                                   c.dilation, c.pad_l, c.pad_r, attr);
}

size_t Builder::Conv(size_t k, const Attrs& a) {
  const BodyOp& op = g_.ops()[k];
  Arity(op, 2);
  int x = op.inputs[0], w = op.inputs[1];
  const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
  ConvDims c = ConvShape(op, a);
  int64_t channels = ys[1];
  // A per-channel add or multiply by a constant in a later node is a post-op too (onnxruntime folds them into the
  // conv): as a primitive of its own it read and wrote the output again (a 1x1 conv's add: 2.3x onnxruntime's time).
  Fused f = FusePostOps(k, [&](int b) { return ChannelBias(b, channels, ys.size()); }, Later::kConstants);
  FakeQuantizeAfter(&f);
  if (size_t next = WinogradConv(k, c, f)) return next;
  Dims src_dims = DimsOf(xs), dst_dims = DimsOf(ys);
  bool binary = std::any_of(f.post.begin(), f.post.end(), [](const PostOp& p) { return p.tensor >= 0; });
  if (size_t unit = binary ? 0 : UnitSpatialAxis(xs, g_.Shape(w), ys, c)) {
    DropSpatialAxis(&c, unit - 2);
    src_dims.erase(src_dims.begin() + static_cast<std::ptrdiff_t>(unit));
    dst_dims.erase(dst_dims.begin() + static_cast<std::ptrdiff_t>(unit));
  }
  Desc bias = Plain(Dims{channels});
  auto make = [&](memory::format_tag layout) {
    return CreateWithPostOps(f, ys, [&](const primitive_attr& attr) {
      return ConvPd(c, Desc(src_dims, memory::data_type::f32, layout), Any(c.weights), f.bias >= 0 ? &bias : nullptr,
                    Desc(dst_dims, memory::data_type::f32, layout), attr);
    });
  };
  auto pd = [&] {
    for (memory::format_tag blocks : DepthwiseBlocks(x, c, src_dims)) {
      auto blocked = make(blocks);
      if (IsJit(blocked)) return blocked;
    }
    return make(memory::format_tag::any);
  }();
  // The weights, viewed with the group dimension (or as fewer, wider groups: below), reordered once into the
  // primitive's layout.
  int plain_weights = values_.ConstView(values_.of(w), Plain(c.weights));
  const ConvDims original = c;
  for (int64_t merge : GroupsToMerge(c, pd.impl_info_str())) {
    c = GroupsMerged(original, merge);  // what `make` reads
    auto merged = make(memory::format_tag::any);
    if (IsJit(merged) && std::string(merged.impl_info_str()).find("gemm") == std::string::npos) {
      pd = merged;
      plain_weights = BlockDiagonalWeights(plain_weights, original, merge);
      break;
    }
    c = original;
  }
  // With a unit axis dropped, the graph's tensors are the same memory seen with it.
  Desc src = pd.src_desc(), dst = pd.dst_desc();
  int src_value = As(x, src_dims.size() == xs.size() ? src : src.reshape(DimsOf(xs)));
  int weights = values_.ReorderConst(plain_weights, pd.weights_desc());
  std::vector<Arg> args = {{DNNL_ARG_SRC, src_value, src}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()}};
  if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, values_.of(f.bias), bias});
  AddBinaryArgs(f, &args, ys, dst);
  args.push_back({DNNL_ARG_DST, Define(f.last, dst_dims.size() == ys.size() ? dst : dst.reshape(DimsOf(ys))), dst});
  AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
  return f.next;
}

// How many neighbouring groups of the grouped (not depthwise) conv `c` to run as one, when oneDNN offers it only
// its im2col gemm (`impl`): ResNeXt's 32 groups of 4 channels took 1.88 ms so (AMD EPYC, AVX2, 2 threads) where
// onnxruntime takes 0.72 ms; as 16 groups of 8 whose weights are block-diagonal, oneDNN's jit:avx2 conv took
// 0.70 ms, for twice the multiplies. The merges to try, fewest groups first, whose channels fill 8 lanes (AVX2)
// or 16 (AVX-512): the first that gets a generated kernel runs; none for other convs. The sums gain only products
// by zero (an infinite input would make them NaN where the grouped conv gives a number).
std::vector<int64_t> Builder::GroupsToMerge(const ConvDims& c, const std::string& impl) {
  std::vector<int64_t> merges;
  if (c.groups <= 1 || c.weights.size() != 5 || impl.find("gemm") == std::string::npos) return merges;
  int64_t out = c.weights[1], in = c.weights[2];
  if (out == 1 && in == 1) return merges;  // depthwise: its own kernels
  for (int64_t m = 2; m <= 16 && c.groups % m == 0; m *= 2)
    if ((m * out) % 8 == 0 && (m * in) % 8 == 0 && m * std::max(out, in) <= 16) merges.push_back(m);
  return merges;
}

// The grouped conv `c` as G / `merge` groups, each `merge` times as wide.
Builder::ConvDims Builder::GroupsMerged(const ConvDims& c, int64_t merge) {
  ConvDims wider = c;
  wider.groups /= merge;
  wider.weights[0] = wider.groups;
  wider.weights[1] *= merge;
  wider.weights[2] *= merge;
  return wider;
}

// The weights `plain` of the grouped conv `c` ([G, O/G, I/G, ...]) as those of GroupsMerged(c, merge):
// block-diagonal, zero between groups. Made once per constant, shared by the programs.
int Builder::BlockDiagonalWeights(int plain, const ConvDims& c, int64_t merge) {
  int64_t groups = c.groups, out = c.weights[1], in = c.weights[2], taps = 1;
  for (size_t d = 3; d < c.weights.size(); ++d) taps *= c.weights[d];
  const Dims wide = GroupsMerged(c, merge).weights;
  std::string key = values_.GivenKey(values_.Root(plain)) + "/block_diagonal/" + std::to_string(merge) + "/" + DescKey(Plain(c.weights));
  return values_.KeepShared(key, [&] {
    memory merged(Plain(wide), Engine());
    auto* to = static_cast<float*>(merged.get_data_handle());
    std::fill(to, to + groups * out * in * merge * taps, 0.0f);
    const auto* from = static_cast<const float*>(values_.ConstData(values_[values_.Root(plain)].slot));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t o = 0; o < out; ++o) {
        int64_t wide_out = (g / merge) * out * merge + (g % merge) * out + o;  // [G/m][m*O/G] flattened
        float* row = to + (wide_out * in * merge + (g % merge) * in) * taps;
        std::memcpy(row, from + (g * out + o) * in * taps, static_cast<size_t>(in * taps) * sizeof(float));
      }
    return merged;
  });
}

// The channel-blocked layouts, in order of preference, the depthwise 2-D conv `c` over `x` may run in rather
// than the one oneDNN picks, channels last (brdgmm_dw); none unless `x` arrives plain or in such blocks, as at a
// partition's edge. The first that has a generated kernel runs it. Reading the channels-last output back into
// NCHW cost more than the conv (ConvNeXt's 7x7 over 96 channels at 56x56, 2 threads: conv 0.14 ms then 0.18 ms
// to NCHW, against 0.15 ms on jit_dw then 0.03 ms from nChw16c). Blocks of 8 where 16 would pad the channels (72
// at 56x56: 0.15 ms channels last, 0.20 ms in padded blocks of 16, 0.07 ms in blocks of 8, NCHW to NCHW), and
// where blocks of 16 have no generated depthwise kernel (AVX2: jit_dw takes blocks of 8). Between channels-last
// producers and consumers (MobileNet's 1x1 convs) it stays channels last.
std::vector<memory::format_tag> Builder::DepthwiseBlocks(int x, const ConvDims& c, const Dims& src_dims) const {
  using tag = memory::format_tag;
  bool depthwise = c.groups > 1 && c.weights.size() == 5 && c.weights[1] == 1 && c.weights[2] == 1;
  if (!depthwise || src_dims.size() != 4 || c.groups % 8 != 0) return {};
  tag now = TagOf(values_.DescOf(x));
  if (now != tag::nchw && now != tag::nChw16c && now != tag::nChw8c) return {};
  if (c.groups % 16 == 0) return {tag::nChw16c, tag::nChw8c};
  return {tag::nChw8c};
}

// The axis (2 or 3) of a conv2d along which input, kernel and output are all 1 wide, without
// padding, or 0. The conv is then a conv1d over the other axis, and oneDNN's 1-D kernels run
// it far faster than its 2-D ones a 1-wide axis (measured: Magika's 5x1 conv over 512x1 with
// 256 -> 512 channels, 11.7 ms as conv2d, 5.9 ms as conv1d).
size_t Builder::UnitSpatialAxis(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                                const std::vector<int64_t>& ys, const ConvDims& c) {
  if (xs.size() != 4) return 0;
  for (size_t d = 0; d < 2; ++d)
    if (xs[2 + d] == 1 && ws[2 + d] == 1 && ys[2 + d] == 1 && c.pad_l[d] == 0 && c.pad_r[d] == 0) return 2 + d;
  return 0;
}

void Builder::DropSpatialAxis(ConvDims* c, size_t d) {
  auto drop = [](Dims* dims, size_t i) { dims->erase(dims->begin() + static_cast<std::ptrdiff_t>(i)); };
  drop(&c->weights, c->weights.size() - 2 + d);
  for (Dims* dims : {&c->strides, &c->dilation, &c->pad_l, &c->pad_r}) drop(dims, d);
}

// A constant the primitive can add as its bias: one value per output channel of NCW/NCHW
// (shape (1, C, 1...) or (C, 1...) with a 1 per spatial dim of the `rank`-D output).
bool Builder::ChannelBias(int b, int64_t channels, size_t rank) const {
  const TensorInfo& t = g_.tensor(b);
  std::vector<int64_t> per_channel(rank, 1);
  per_channel[1] = channels;
  return t.kind == Kind::kConst &&
         (t.shape == per_channel || t.shape == std::vector<int64_t>(per_channel.begin() + 1, per_channel.end()));
}

// conv2d_transpose (NCHW data, IOHW weights) as a oneDNN deconvolution, with
// the conv's post-ops. ONNX's output_padding extends the end of the output,
// which is oneDNN's right padding made smaller (negative beyond the padding,
// which oneDNN takes: checked against onnxruntime).
size_t Builder::Deconv2d(size_t k, const Attrs& a) {
  const BodyOp& op = g_.ops()[k];
  Arity(op, 2);
  int x = op.inputs[0], w = op.inputs[1];
  if (!IsConstant(w)) Fail(op.where + ": the weight must be a constant (it is reordered at load)");
  if (a.Str("data_layout") != "NCHW" || a.Str("kernel_layout") != "IOHW" || a.Str("out_layout") != "NCHW")
    Fail(op.where + ": only NCHW/IOHW layouts are supported");
  const auto &xs = g_.Shape(x), &ws = g_.Shape(w), &ys = g_.Shape(op.output);
  if (xs.size() != 4 || ws.size() != 4 || ys.size() != 4) Fail(op.where + ": conv2d_transpose tensors must be 4-D");
  int64_t groups = a.Int("groups");
  auto st = a.Ints("strides"), dil = a.Ints("dilation"), pad = a.Ints("padding"), extra = a.Ints("output_padding");
  if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
  if (st.size() != 2 || dil.size() != 2 || pad.size() != 4 || extra.size() != 2)
    Fail(op.where + ": strides/dilation/output_padding need 2 values and padding 2 or 4");
  if (groups < 1 || xs[1] != ws[0] || ws[0] % groups != 0 || ys[0] != xs[0] || ys[1] != ws[1] * groups)
    Fail(op.where + ": channels of " + ShapeStr(xs) + " and weight " + ShapeStr(ws) + " do not match groups=" +
         std::to_string(groups));
  Dims pad_r(2);
  for (int d = 0; d < 2; ++d) {
    if (st[d] < 1 || dil[d] < 1 || pad[d] < 0 || pad[d + 2] < 0 || extra[d] < 0) Fail(op.where + ": invalid window");
    pad_r[d] = pad[d + 2] - extra[d];
    if (ys[2 + d] != (xs[2 + d] - 1) * st[d] + dil[d] * (ws[2 + d] - 1) + 1 - pad[d] - pad_r[d])
      Fail(op.where + ": output shape " + ShapeStr(ys) + " does not follow from the attributes");
  }
  int64_t ic = xs[1] / groups, oc = ys[1] / groups, kh = ws[2], kw = ws[3];
  // The IOHW weight seen as oneDNN's (G,) O, I, H, W through permuted strides.
  Dims wdims = groups == 1 ? Dims{oc, ic, kh, kw} : Dims{groups, oc, ic, kh, kw};
  Dims wstrides = groups == 1 ? Dims{kh * kw, oc * kh * kw, kw, 1} : Dims{ic * oc * kh * kw, kh * kw, oc * kh * kw, kw, 1};
  Desc iohw(wdims, memory::data_type::f32, wstrides);
  int64_t channels = ys[1];
  Fused f = FusePostOps(k, [&](int b) { return ChannelBias(b, channels, ys.size()); });
  Desc bias = Plain(Dims{channels});
  auto pd = CreateWithPostOps(f, ys, [&](const primitive_attr& attr) {
    Dims strides = {st[0], st[1]}, dilation = {dil[0] - 1, dil[1] - 1}, pad_l = {pad[0], pad[1]};
    if (f.bias >= 0)
      return dnnl::deconvolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                         algorithm::deconvolution_direct, Any(DimsOf(xs)), Any(wdims),
                                                         bias, Any(DimsOf(ys)), strides, dilation, pad_l, pad_r, attr);
    return dnnl::deconvolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                       algorithm::deconvolution_direct, Any(DimsOf(xs)), Any(wdims),
                                                       Any(DimsOf(ys)), strides, dilation, pad_l, pad_r, attr);
  });
  int src = As(x, pd.src_desc());
  int weights = values_.ReorderConst(values_.ConstView(values_.of(w), iohw), pd.weights_desc());
  std::vector<Arg> args = {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()}};
  if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, values_.of(f.bias), bias});
  AddBinaryArgs(f, &args, ys, pd.dst_desc());
  args.push_back({DNNL_ARG_DST, Define(f.last, pd.dst_desc()), pd.dst_desc()});
  AddStep(dnnl::deconvolution_forward(pd), std::move(args), pd.scratchpad_desc());
  return f.next;
}

}  // namespace dnnl_runtime
}  // namespace byoc
