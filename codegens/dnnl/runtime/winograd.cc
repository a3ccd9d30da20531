// winograd.cc -- big 3x3 stride-1 convolutions as Winograd F(4x4, 3x3) around one batched matmul.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "builder.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

// A 3x3 stride-1 conv2d as Winograd F(4x4, 3x3) (winograd.h), where that pays: the input transform, one
// batched oneDNN matmul of the 36 transformed products, the output transform with the bias and post-ops,
// all NHWC. Measured on 2 AVX-512 cores, weights not in cache: 1.6-2.3x oneDNN's direct kernel from 14x14
// tiles up (ResNet's 56x56x64, 28x28x128, 14x14x256), no gain under 25 M multiply-adds or 16 tiles (a
// 7x7x512 layer: 0.7x) or with fewer than 32 channels in or out (SqueezeNet's 55x55, 16 -> 64: 1.05x, the
// transforms as costly as the products). Returns the op after the fused chain, or 0 (the direct conv) when it does
// not apply:
// another geometry, a post-op it has no epilogue for, or the graph's option winograd off.
size_t Builder::WinogradConv(size_t k, const ConvDims& c, const Fused& f) {
  const BodyOp& op = g_.ops()[k];
  int x = op.inputs[0], w = op.inputs[1];
  const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
  if (!winograd_ || op.kernel != "relax.nn.conv2d" || xs.size() != 4 || c.groups != 1 ||
      c.weights != Dims{ys[1], xs[1], 3, 3} || c.strides != Dims{1, 1} || c.dilation != Dims{0, 0} ||
      DataType(g_.tensor(x)) != memory::data_type::f32)
    return 0;
  for (const Dims* pads : {&c.pad_l, &c.pad_r})
    for (int64_t pad : *pads)
      if (pad < 0 || pad > 2) return 0;
  winograd::Geometry g{xs[0], xs[2], xs[3], xs[1], ys[1], ys[2], ys[3], c.pad_l[0], c.pad_l[1]};
  double macs = 9.0 * static_cast<double>(g.n * g.oh * g.ow) * static_cast<double>(g.c * g.k);
  if (g.c < 32 || g.k < 32 || g.tiles() < 16 || macs < 25e6) return 0;
  std::vector<winograd::Epilogue> epilogue;
  std::vector<std::pair<int, Desc>> operands;  // (post-op index, layout read) per tensor post-op
  Desc out(DimsOf(ys), memory::data_type::f32, memory::format_tag::nhwc);
  for (size_t i = 0; i < f.post.size(); ++i) {
    const PostOp& p = f.post[i];
    winograd::Epilogue e;
    e.alpha = p.alpha, e.beta = p.beta;
    if (p.tensor >= 0) {
      bool full = g_.Shape(p.tensor) == ys;
      bool per_channel = !full && Padded(g_.Shape(p.tensor), 4) == Dims{1, ys[1], 1, 1};
      if ((p.alg != algorithm::binary_add && p.alg != algorithm::binary_mul) || !(full || per_channel)) return 0;
      bool add = p.alg == algorithm::binary_add;
      e.kind = full ? (add ? winograd::Epilogue::kAddTensor : winograd::Epilogue::kMulTensor)
                    : (add ? winograd::Epilogue::kAddChannel : winograd::Epilogue::kMulChannel);
      operands.push_back({static_cast<int>(i), full ? out : Plain(g_.Shape(p.tensor))});
    } else {
      static const std::map<algorithm, winograd::Epilogue::Kind> kinds = {
          {algorithm::eltwise_relu, winograd::Epilogue::kRelu}, {algorithm::eltwise_clip, winograd::Epilogue::kClip},
          {algorithm::eltwise_clip_v2, winograd::Epilogue::kClip},
          {algorithm::eltwise_linear, winograd::Epilogue::kLinear},
          {algorithm::eltwise_swish, winograd::Epilogue::kSwish},
          {algorithm::eltwise_hardswish, winograd::Epilogue::kHardswish},
          {algorithm::eltwise_hardsigmoid, winograd::Epilogue::kHardsigmoid},
          {algorithm::eltwise_logistic, winograd::Epilogue::kLogistic}};
      auto kind = kinds.find(p.alg);
      if (kind == kinds.end()) return 0;
      e.kind = kind->second;
    }
    epilogue.push_back(e);
  }
  // The weights, transformed once, packed for the matmul.
  int64_t tiles = g.tiles();
  Desc v_desc({winograd::kPoints, tiles, g.c}, memory::data_type::f32, memory::format_tag::abc);
  Desc m_desc({winograd::kPoints, tiles, g.k}, memory::data_type::f32, memory::format_tag::abc);
  Desc u_plain({winograd::kPoints, g.c, g.k}, memory::data_type::f32, memory::format_tag::abc);
  dnnl::matmul::primitive_desc pd(Engine(), v_desc, Any(u_plain.get_dims()), m_desc, UserScratchpad());
  // Every shape of a symbolic graph transforms the same weight: one transform per packed layout (this was
  // most of ResNet-18's first call at a new shape).
  std::string source = g_.tensor(w).kind == Kind::kConst ? values_.GivenKey(values_.of(w)) : std::to_string(w);
  int u_value = values_.KeepShared(source + "/winograd/" + DescKey(pd.weights_desc()), [&] {
    std::vector<float> u(static_cast<size_t>(winograd::kPoints * g.c * g.k));
    winograd::TransformWeights(ConstFloats(w), g.k, g.c, u.data());
    memory packed(pd.weights_desc(), Engine()), given(u_plain, Engine(), u.data());
    dnnl::stream stream(Engine());
    dnnl::reorder(given, packed).execute(stream, given, packed);
    stream.wait();
    return packed;
  });
  Desc nhwc(DimsOf(xs), memory::data_type::f32, memory::format_tag::nhwc);
  int src = As(x, nhwc), v = NewTemp(v_desc), m = NewTemp(m_desc);
  AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, src, nhwc}, {DNNL_ARG_DST, v, v_desc}}, Desc(),
          std::make_shared<WinogradInput>(g));
  AddStep(dnnl::matmul(pd), {{DNNL_ARG_SRC, v, v_desc}, {DNNL_ARG_WEIGHTS, u_value, pd.weights_desc()},
                             {DNNL_ARG_DST, m, m_desc}},
          pd.scratchpad_desc());
  std::vector<Arg> args = {{DNNL_ARG_SRC, m, m_desc}};
  if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, values_.of(f.bias), Plain(Dims{g.k})});
  for (const auto& [i, desc] : operands)
    args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, As(f.post[i].tensor, desc), desc});
  args.push_back({DNNL_ARG_DST, Define(f.last, out), out});
  AddStep(dnnl::primitive(), std::move(args), Desc(), std::make_shared<WinogradOutput>(g, f.bias >= 0, epilogue));
  return f.next;
}

}  // namespace dnnl_runtime
}  // namespace byoc
