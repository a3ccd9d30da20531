// reduce.cc -- pooling and reductions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "builder.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

void Builder::Pool(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  bool max = op.kernel == "relax.nn.max_pool2d";
  if (a.Str("layout") != "NCHW" || a.Str("out_layout") != "NCHW") Fail(op.where + ": only NCHW is supported");
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  if (xs.size() != 4 || ys.size() != 4 || xs[0] != ys[0] || xs[1] != ys[1]) Fail(op.where + ": pooling needs 4-D NCHW tensors");
  auto kernel = a.Ints("pool_size"), st = a.Ints("strides"), pad = a.Ints("padding"), dil = a.Ints("dilation");
  if (kernel.size() != 2 || st.size() != 2 || pad.size() != 4 || dil.size() != 2)
    Fail(op.where + ": pool_size/strides/dilation need 2 values and padding 4");
  if (!max && (dil[0] != 1 || dil[1] != 1)) Fail(op.where + ": average pooling with dilation is not supported");
  Dims pad_r = {pad[2], pad[3]};
  for (int d = 0; d < 2; ++d) {
    if (kernel[d] < 1 || st[d] < 1 || dil[d] < 1 || pad[d] < 0 || pad[d + 2] < 0) Fail(op.where + ": invalid window");
    int64_t span = dil[d] * (kernel[d] - 1) + 1;
    // ceil_mode: pad the end just enough for oneDNN's floor formula to give the output size. An average that
    // counts padding would count that extension too, where ONNX counts only the pads it was given.
    if ((xs[2 + d] + pad[d] + pad_r[d] - span) / st[d] + 1 != ys[2 + d]) {
      if (!max && a.Bool("count_include_pad"))
        Fail(op.where + ": ceil_mode average pooling that counts its padding, with a window ceil_mode extends");
      pad_r[d] = (ys[2 + d] - 1) * st[d] + span - xs[2 + d] - pad[d];
    }
    if (pad_r[d] < 0 || (xs[2 + d] + pad[d] + pad_r[d] - span) / st[d] + 1 != ys[2 + d])
      Fail(op.where + ": output shape " + ShapeStr(ys) + " does not follow from the attributes");
  }
  algorithm alg = max ? algorithm::pooling_max
                      : a.Bool("count_include_pad") ? algorithm::pooling_avg_include_padding
                                                    : algorithm::pooling_avg_exclude_padding;
  auto make = [&](const Desc& src) {
    return dnnl::pooling_forward::primitive_desc(Engine(), prop_kind::forward_inference, alg, src,
                                                 Any(DimsOf(ys), DataType(g_.tensor(op.output))), {st[0], st[1]},
                                                 {kernel[0], kernel[1]}, {dil[0] - 1, dil[1] - 1}, {pad[0], pad[1]},
                                                 pad_r, UserScratchpad());
  };
  auto pd = make(values_.DescOf(op.inputs[0]));
  // The source's layout has only a reference or plain-C kernel (a u8 NCHW tensor: ref, 26 ms in a ResNet-50;
  // a global max over a long NCW row: simple_nchw, 0.4 ms in Magika): take it channels last, if that jits.
  if (!IsJit(pd)) {
    auto nhwc = make(ChannelsLast(xs, DataType(g_.tensor(op.inputs[0]))));
    if (IsJit(nhwc)) pd = nhwc;
  }
  int src = As(op.inputs[0], pd.src_desc());
  int dst = Define(op.output, pd.dst_desc());
  AddStep(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
          pd.scratchpad_desc());
}

const algorithm* Builder::ReductionOf(const std::string& kernel) {
  static const std::map<std::string, algorithm> table = {{"relax.mean", algorithm::reduction_mean},
                                                         {"relax.sum", algorithm::reduction_sum},
                                                         {"relax.max", algorithm::reduction_max},
                                                         {"relax.min", algorithm::reduction_min}};
  return Find(table, kernel);
}

// relax.mean, sum, max or min over some axes.
void Builder::Reduce(const BodyOp& op, const Attrs& a, algorithm alg) {
  Arity(op, 1);
  bool mean = alg == algorithm::reduction_mean, additive = mean || alg == algorithm::reduction_sum;
  auto stacked = stacked_.find(op.inputs[0]);
  if (stacked != stacked_.end()) {
    if (additive)
      SumOf(op, stacked->second, mean);
    else
      ExtremeOf(op, stacked->second, alg == algorithm::reduction_max ? algorithm::binary_max : algorithm::binary_min);
    return;
  }
  const auto& xs = g_.Shape(op.inputs[0]);
  if (xs.empty()) Fail(op.where + ": a reduction of a scalar is not supported");
  Dims kept = DimsOf(xs);
  if (a.IsNone("axis")) {
    kept.assign(xs.size(), 1);
  } else {
    for (int64_t axis : a.Ints("axis")) kept[NormAxis(axis, xs.size(), op.where)] = 1;
  }
  int64_t numel = 1;
  for (auto d : kept) numel *= d;
  if (numel != g_.tensor(op.output).numel) Fail(op.where + ": output shape does not match the reduced axes");
  if (kept == DimsOf(xs)) {  // nothing to reduce: the reduction of one value is that value, a reshape
    Reshape(op);
    return;
  }
  int src = values_.of(op.inputs[0]);
  if ((mean || alg == algorithm::reduction_max) && (xs.size() == 3 || xs.size() == 4) && kept[0] == xs[0] &&
      kept[1] == xs[1] && std::all_of(kept.begin() + 2, kept.end(), [](int64_t d) { return d == 1; })) {
    GlobalPool(op, src, kept, mean ? algorithm::pooling_avg_exclude_padding : algorithm::pooling_max);
  } else {
    // The result is plain with the reduced axes kept; the graph's tensor is the same bytes without them.
    dnnl::reduction::primitive_desc pd(Engine(), alg, values_[src].desc, Plain(kept), 0.0f, 0.0f, UserScratchpad());
    if (IsReference(pd) && additive && ReduceByMatmul(op, kept, mean)) return;
    int dst = Define(op.output, Plain(g_.Shape(op.output)));
    AddStep(dnnl::reduction(pd), {{DNNL_ARG_SRC, src, values_[src].desc}, {DNNL_ARG_DST, dst, Plain(kept)}},
            pd.scratchpad_desc());
  }
  if (!additive && DataType(g_.tensor(op.output)) == memory::data_type::f32) {
    // oneDNN's max (min) starts from the least (greatest) finite float, so the max of a row of -inf was -3.4e38:
    // ONNX's Attention function compares such a max with -inf to find the rows its mask hides entirely. The
    // result is that infinity wherever it is the finite extreme, which differs from ONNX only where an input
    // holds that extreme exactly and nothing beyond it (the host's max starts from -inf: byoc/host/legalize.py).
    bool max = alg == algorithm::reduction_max;
    float lowest = std::numeric_limits<float>::lowest(), infinity = std::numeric_limits<float>::infinity();
    int dst = values_.of(op.output);
    const Desc& desc = values_[dst].desc;
    AddStep(dnnl::primitive(), {{DNNL_ARG_DST, dst, desc}}, Desc(),
            std::make_shared<ValueTo>(static_cast<int64_t>(desc.get_size() / sizeof(float)), max ? lowest : -lowest,
                                      max ? -infinity : infinity));
  }
}

// The element-wise max (min) of `terms` (ONNX Max / Min of n tensors, stacked then reduced):
// a chain of binary primitives on plain tensors (one term: its max with itself, a copy).
void Builder::ExtremeOf(const BodyOp& op, const std::vector<int>& terms, algorithm alg) {
  const auto& ys = g_.Shape(op.output);
  for (int t : terms)
    if (g_.Shape(t) != ys) Fail(op.where + ": terms of another shape than " + ShapeStr(ys));
  Desc plain = Plain(ys);
  dnnl::binary::primitive_desc pd(Engine(), alg, plain, plain, plain, UserScratchpad());
  int acc = As(terms[0], plain);
  for (size_t i = std::min<size_t>(1, terms.size() - 1); i < terms.size(); ++i) {
    int dst = i + 1 == terms.size() ? Define(op.output, plain) : NewTemp(plain);
    AddStep(dnnl::binary(pd), {{DNNL_ARG_SRC_0, acc, plain}, {DNNL_ARG_SRC_1, As(terms[i], plain), plain},
                               {DNNL_ARG_DST, dst, plain}},
            pd.scratchpad_desc());
    acc = dst;
  }
}

// A sum (mean) over consecutive axes as a matmul with a row of ones (1/K): viewed plain as
// [outer, K, inner], it is ones[1, 1, K] x X[outer, K, inner]. oneDNN has only its reference
// kernel for such reductions when the axes are not innermost (measured: 4 ms for a
// 512x256 sum over the 512 axis in Magika, where the matmul takes tens of microseconds).
// Returns false, having added nothing, when the reduced axes are not one run.
bool Builder::ReduceByMatmul(const BodyOp& op, const Dims& kept, bool mean) {
  const auto& xs = g_.Shape(op.inputs[0]);
  std::vector<size_t> axes;  // the reduced ones
  for (size_t i = 0; i < xs.size(); ++i)
    if (kept[i] != xs[i]) axes.push_back(i);
  if (axes.empty()) return false;
  size_t first = axes.front(), last = axes.back();
  for (size_t j = first; j <= last; ++j)
    if (kept[j] == xs[j] && xs[j] != 1) return false;  // a kept axis between two reduced ones
  int64_t outer = 1, reduced = 1, inner = 1;
  for (size_t i = 0; i < xs.size(); ++i) (i < first ? outer : i <= last ? reduced : inner) *= xs[i];
  Desc ones_desc = Plain({1, 1, reduced});
  memory ones(ones_desc, Engine());
  std::fill_n(static_cast<float*>(ones.get_data_handle()), reduced, mean ? 1.0f / reduced : 1.0f);
  int ones_value = values_.KeepConst(ones);
  Desc x_desc = Plain({outer, reduced, inner}), y_desc = Plain({outer, 1, inner});
  dnnl::matmul::primitive_desc pd(Engine(), ones_desc, x_desc, y_desc, UserScratchpad());
  int x = As(op.inputs[0], Plain(DimsOf(xs)));
  int y = Define(op.output, Plain(g_.Shape(op.output)));
  AddStep(dnnl::matmul(pd), {{DNNL_ARG_SRC, ones_value, ones_desc}, {DNNL_ARG_WEIGHTS, x, x_desc},
                             {DNNL_ARG_DST, y, y_desc}},
          pd.scratchpad_desc());
  return true;
}

// The mean (max) over the spatial axes of NCW / NCHW as one pooling window: oneDNN's
// pooling reads blocked layouts with a jit kernel, its reduction does not
// (measured: 21% of MobileNetV2 in the reference reduction).
void Builder::GlobalPool(const BodyOp& op, int src, const Dims& kept, algorithm alg) {
  const auto& xs = g_.Shape(op.inputs[0]);
  Dims window(xs.begin() + 2, xs.end()), ones(xs.size() - 2, 1), zeros(xs.size() - 2, 0);
  auto make = [&](const Desc& from) {
    return dnnl::pooling_forward::primitive_desc(Engine(), prop_kind::forward_inference, alg, from, Any(kept), ones,
                                                 window, zeros, zeros, zeros, UserScratchpad());
  };
  auto pd = make(values_[src].desc);
  if (!IsJit(pd)) {  // a plain NCW row has only simple_nchw (Magika's global max over 508: 0.4 ms)
    auto nwc = make(ChannelsLast(xs, DataType(g_.tensor(op.inputs[0]))));
    if (IsJit(nwc)) {
      pd = nwc;
      src = As(op.inputs[0], nwc.src_desc());
    }
  }
  Desc plain = Plain(kept);
  int dst = Define(op.output, Plain(g_.Shape(op.output)));
  int pooled = pd.dst_desc() == plain ? dst : NewTemp(pd.dst_desc());
  AddStep(dnnl::pooling_forward(pd),
          {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_DST, pooled, pd.dst_desc()}}, pd.scratchpad_desc());
  if (pooled != dst) {
    dnnl::reorder::primitive_desc copy(Engine(), pd.dst_desc(), Engine(), plain, UserScratchpad());
    AddStep(dnnl::reorder(copy), {{DNNL_ARG_FROM, pooled, pd.dst_desc()}, {DNNL_ARG_TO, dst, plain}},
            copy.scratchpad_desc());
  }
}

// Whether the only reader of tensor `id` is a relax.sum / mean / max / min over `axis` alone, without keepdims.
bool Builder::ReducedOverOnly(int id, size_t axis) const {
  if (g_.uses(id) != 1) return false;  // a graph output counts as a use
  for (const BodyOp& reader : g_.ops()) {
    if (std::find(reader.inputs.begin(), reader.inputs.end(), id) == reader.inputs.end()) continue;
    if (!ReductionOf(reader.kernel)) return false;
    Attrs a(reader.attrs, reader.where);
    size_t rank = g_.Shape(id).size();
    return !a.IsNone("axis") && a.Ints("axis").size() == 1 &&
           static_cast<size_t>(NormAxis(a.Ints("axis")[0], rank, reader.where)) == axis && !a.Bool("keepdims");
  }
  return false;
}

// The sum (or mean) of `terms`, one oneDNN sum primitive over them in their own layouts.
void Builder::SumOf(const BodyOp& op, const std::vector<int>& terms, bool mean) {
  for (int t : terms)
    if (g_.Shape(t) != g_.Shape(op.output)) Fail(op.where + ": terms of another shape than " + ShapeStr(g_.Shape(op.output)));
  std::vector<float> scales(terms.size(), mean ? 1.0f / static_cast<float>(terms.size()) : 1.0f);
  auto pd = WithSourceLayouts(terms, [&](const std::vector<Desc>& srcs) {
    return dnnl::sum::primitive_desc(Engine(), scales, srcs, UserScratchpad());
  });
  std::vector<Arg> args;
  for (size_t i = 0; i < terms.size(); ++i) {
    Desc desc = pd.src_desc(static_cast<int>(i));
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), As(terms[i], desc), desc});
  }
  args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
  AddStep(dnnl::sum(pd), std::move(args), pd.scratchpad_desc());
}

}  // namespace dnnl_runtime
}  // namespace byoc
