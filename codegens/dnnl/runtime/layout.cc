// layout.cc -- data movement kept in its source's layout: reshape, transpose, channel shuffle, concat, stack,
// slices, split, resize, constant pad.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels.h"
#include "builder.h"

namespace byoc {
namespace dnnl_runtime {

// Same bytes, other shape: a view of the input in plain layout, no step.
void Builder::Reshape(const BodyOp& op) {
  Arity(op, 1);
  if (g_.tensor(op.inputs[0]).numel != g_.tensor(op.output).numel)
    Fail(op.where + ": " + ShapeStr(g_.Shape(op.inputs[0])) + " and " + ShapeStr(g_.Shape(op.output)) +
         " have different sizes");
  if (g_.Shape(op.inputs[0]) == g_.Shape(op.output) && values_.of(op.inputs[0]) >= 0) {
    values_.Bind(op.output, values_.of(op.inputs[0]));  // the same tensor: keep its layout, blocked or not
    return;
  }
  int v = values_.of(op.inputs[0]);
  if (v >= 0) {
    // The same bytes seen with the new dims when the layout allows it (unit dims dropped or added, or
    // dims merged that lie together): a conv's NWC output squeezed to 3-D stays NWC, with no copy to
    // plain and back (Magika: 0.76 ms of reorders around its conv).
    try {
      values_.Bind(op.output, values_.View(v, values_[v].desc.reshape(DimsOf(g_.Shape(op.output)))));
      return;
    } catch (const dnnl::error&) {
    }
  }
  memory::data_type type = DataType(g_.tensor(op.output));
  values_.Bind(op.output,
               values_.View(As(op.inputs[0], Plain(g_.Shape(op.inputs[0]), type)), Plain(g_.Shape(op.output), type)));
}

// The axes of a permute_dims: output axis i is input axis perm[i] (reversed when the op gives none).
std::vector<int64_t> Builder::Permutation(const BodyOp& op, const Attrs& a) const {
  size_t rank = g_.Shape(op.inputs[0]).size();
  std::vector<int64_t> perm;
  if (a.IsNone("axes")) {
    for (size_t d = rank; d > 0; --d) perm.push_back(static_cast<int64_t>(d - 1));
  } else {
    for (int64_t axis : a.Ints("axes")) perm.push_back(NormAxis(axis, rank, op.where));
  }
  return perm;
}

// A reorder from the input seen through permuted strides into a plain output.
void Builder::Transpose(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  std::vector<int64_t> perm = Permutation(op, a);
  std::vector<bool> seen(xs.size(), false);
  if (perm.size() != xs.size()) Fail(op.where + ": axes is not a permutation");
  memory::data_type type = DataType(g_.tensor(op.inputs[0]));
  int v = values_.of(op.inputs[0]);
  if (v < 0) Fail("tensor " + g_.tensor(op.inputs[0]).name + " is read before it is computed");
  // The source read in its own layout when that is strided (a conv's NWC output), else plain.
  Desc source = IsStrided(values_[v].desc) ? values_[v].desc : Plain(xs, type);
  Dims dims = DimsOf(xs), strides = source.get_strides();
  for (size_t i = 0; i < perm.size(); ++i) {
    if (seen[perm[i]] || ys[i] != xs[perm[i]]) Fail(op.where + ": axes is not a permutation giving " + ShapeStr(ys));
    seen[perm[i]] = true;
    dims[i] = xs[perm[i]];
    strides[i] = source.get_strides()[perm[i]];
  }
  Desc view = Strided(dims, type, strides);
  if (g_.tensor(op.inputs[0]).kind == Kind::kConst) {  // a transposed weight: transposed once, at load
    values_.Bind(op.output, values_.ReorderConst(values_.ConstView(v, view), Plain(ys)));
    return;
  }
  int src = As(op.inputs[0], source);
  // Seen through the permuted strides, the bytes may already be plain or channels last (the NCW <-> NWC
  // transposes a TensorFlow export puts around each conv): the output is then that view, with no step.
  if (view == Plain(ys, type) || (ys.size() >= 3 && ys.size() <= 5 && view == ChannelsLast(ys, type))) {
    values_.Bind(op.output, values_.View(src, view));
    return;
  }
  // Read by matmuls alone, the output stays the permuted view: oneDNN's matmul reads an operand through its
  // strides at full speed where its rows stay contiguous (heads split off a Linear's rows). Where they do not
  // (K^T) Matmul copies it plain, from the view, so two transposes in a row are one copy.
  if (OnlyMatmulsRead(op.output)) {
    values_.Bind(op.output, values_.View(src, view));
    return;
  }
  int dst = Define(op.output, Plain(ys, type));
  dnnl::reorder::primitive_desc pd(Engine(), view, Engine(), Plain(ys, type), UserScratchpad());
  AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, src, view}, {DNNL_ARG_TO, dst, Plain(ys, type)}}, pd.scratchpad_desc());
}

// ShuffleNet's channel shuffle as TVM imports it: reshape [N, C, H, W] -> [N, G, C/G, H, W], permute_dims
// (0, 2, 1, 3, 4), reshape back to [N, C, H, W]; output channel k*G + g is input channel g*(C/G) + k. One
// reorder between two 5-D views, from the input's strided layout into the same layout, so the next conv
// reads it as it is (three reorders before: to plain, the transpose, back to NHWC; 0.8 ms of ShuffleNet's
// 3.5). Returns 3, or 0 when the ops at k are something else.
size_t Builder::ChannelShuffleAt(size_t k) {
  const std::vector<BodyOp>& ops = g_.ops();
  if (k + 3 > ops.size()) return 0;
  const BodyOp &split = ops[k], &swap = ops[k + 1], &merge = ops[k + 2];
  auto reshape = [](const BodyOp& op) { return op.kernel == "relax.reshape" && op.inputs.size() == 1; };
  if (!reshape(split) || swap.kernel != "relax.permute_dims" || !reshape(merge) ||
      swap.inputs != std::vector<int>{split.output} || merge.inputs != std::vector<int>{swap.output} ||
      g_.uses(split.output) != 1 || g_.uses(swap.output) != 1)
    return 0;
  int x = split.inputs[0];
  const auto &xs = g_.Shape(x), &parts = g_.Shape(split.output);
  Attrs a(swap.attrs, swap.where);
  if (xs.size() != 4 || parts.size() != 5 || g_.Shape(merge.output) != xs || a.IsNone("axes") ||
      a.Ints("axes") != std::vector<int64_t>{0, 2, 1, 3, 4} || parts[0] != xs[0] || parts[1] * parts[2] != xs[1] ||
      parts[3] != xs[2] || parts[4] != xs[3] || values_.of(x) < 0 || g_.tensor(x).kind == Kind::kConst)
    return 0;
  memory::data_type type = DataType(g_.tensor(x));
  Desc layout = IsStrided(values_.DescOf(x)) ? values_.DescOf(x) : ChannelsLast(xs, type);
  int src = As(x, layout);
  const Dims& s = layout.get_strides();
  int64_t groups = parts[1], per_group = parts[2];
  Dims dims = {xs[0], per_group, groups, xs[2], xs[3]};
  Desc from(dims, type, Dims{s[0], s[1], per_group * s[1], s[2], s[3]});
  Desc to(dims, type, Dims{s[0], groups * s[1], s[1], s[2], s[3]});
  int dst = Define(merge.output, layout);
  dnnl::reorder::primitive_desc pd(Engine(), from, Engine(), to, UserScratchpad());
  AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, src, from}, {DNNL_ARG_TO, dst, to}}, pd.scratchpad_desc());
  return 3;
}

// A layout given by strides alone (plain, channels last, any permutation), not channel-blocked.
bool IsStrided(const Desc& desc) {
  return desc.get_format_kind() == memory::format_kind::blocked && desc.get_inner_blks().empty();
}

// The format tag of a 3-D or 4-D `desc` among oneDNN's common ones, or undef.
memory::format_tag TagOf(const Desc& desc) {
  using tag = memory::format_tag;
  static const std::vector<tag> tags3 = {tag::ncw, tag::nwc, tag::nCw8c, tag::nCw16c};
  static const std::vector<tag> tags4 = {tag::nchw, tag::nhwc, tag::nChw8c, tag::nChw16c};
  int rank = desc.get_ndims();
  if (rank != 3 && rank != 4) return tag::undef;
  for (tag t : rank == 3 ? tags3 : tags4)
    if (Desc(desc.get_dims(), desc.get_data_type(), t) == desc) return t;
  return tag::undef;
}

// One concat primitive (a copy; the producers do not write into the output).
void Builder::Concat(const BodyOp& op, const Attrs& a) {
  const auto& ys = g_.Shape(op.output);
  if (op.inputs.empty() || ys.empty()) Fail(op.where + ": concat needs at least one tensor of rank >= 1");
  size_t axis = static_cast<size_t>(NormAxis(a.Int("axis"), ys.size(), op.where));
  int64_t total = 0;
  for (int id : op.inputs) {
    const auto& xs = g_.Shape(id);
    bool fits = xs.size() == ys.size();
    for (size_t d = 0; fits && d < ys.size(); ++d) fits = d == axis || xs[d] == ys[d];
    if (!fits) Fail(op.where + ": " + ShapeStr(xs) + " does not fit " + ShapeStr(ys) + " along axis " + std::to_string(axis));
    if (values_.of(id) < 0) Fail(op.where + ": tensor " + g_.tensor(id).name + " is read before it is computed");
    total += xs[axis];
  }
  if (total != ys[axis]) Fail(op.where + ": the inputs do not add up to " + ShapeStr(ys));
  auto pd = WithSourceLayouts(op.inputs, [&](const std::vector<Desc>& srcs) {
    return dnnl::concat::primitive_desc(Engine(), static_cast<int>(axis), srcs, UserScratchpad());
  });
  std::vector<Arg> args;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    Desc desc = pd.src_desc(static_cast<int>(i));
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), As(op.inputs[i], desc), desc});
  }
  args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
  AddStep(dnnl::concat(pd), std::move(args), pd.scratchpad_desc());
}

// broadcast_to: a view where it repeats no values (it adds unit dims); otherwise, for each axis where the input
// has 1 and the output more, a concat of that many copies (grouped-query attention's keys and values repeated for
// each query head of their group, Llama). The rule takes at most kMaxBroadcastCopies copies an axis.
void Builder::BroadcastTo(const BodyOp& op) {
  Arity(op, 1);
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  if (xs.size() > ys.size()) Fail(op.where + ": " + ShapeStr(xs) + " does not broadcast to " + ShapeStr(ys));
  if (g_.tensor(op.inputs[0]).numel == g_.tensor(op.output).numel) return Reshape(op);
  std::vector<int64_t> shape(ys.size() - xs.size(), 1);
  shape.insert(shape.end(), xs.begin(), xs.end());
  memory::data_type type = DataType(g_.tensor(op.output));
  int current = values_.View(As(op.inputs[0], Plain(xs, type)), Plain(shape, type));
  for (size_t axis = 0; axis < ys.size(); ++axis) {
    if (shape[axis] == ys[axis]) continue;
    if (shape[axis] != 1 || ys[axis] > kMaxBroadcastCopies)
      Fail(op.where + ": " + ShapeStr(xs) + " does not broadcast to " + ShapeStr(ys) + " by at most " +
           std::to_string(kMaxBroadcastCopies) + " copies an axis");
    std::vector<Desc> copies(static_cast<size_t>(ys[axis]), Plain(shape, type));
    shape[axis] = ys[axis];
    dnnl::concat::primitive_desc pd(Engine(), Plain(shape, type), static_cast<int>(axis), copies, UserScratchpad());
    std::vector<Arg> args;
    for (size_t i = 0; i < copies.size(); ++i) args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), current, copies[i]});
    int next = NewTemp(Plain(shape, type));
    args.push_back({DNNL_ARG_DST, next, Plain(shape, type)});
    AddStep(dnnl::concat(pd), std::move(args), pd.scratchpad_desc());
    current = next;
  }
  values_.Bind(op.output, current);
}

// stack: a concat of the inputs, each seen with a unit axis inserted, into a plain output;
// or nothing at all when a sum / mean / max / min over the new axis is its only reader (ONNX
// Sum, Mean, Max and Min of n tensors): that reduction is then one oneDNN sum of the inputs
// (SumOf), or a chain of binary max / min (ExtremeOf).
void Builder::Stack(const BodyOp& op, const Attrs& a) {
  const auto& ys = g_.Shape(op.output);
  if (op.inputs.empty()) Fail(op.where + ": stack of nothing");
  const auto& xs = g_.Shape(op.inputs[0]);
  if (ys.size() != xs.size() + 1) Fail(op.where + ": " + ShapeStr(ys) + " is not a stack of " + ShapeStr(xs));
  size_t axis = static_cast<size_t>(NormAxis(a.Int("axis"), ys.size(), op.where));
  std::vector<int64_t> unit = xs;
  unit.insert(unit.begin() + static_cast<std::ptrdiff_t>(axis), 1);
  std::vector<int64_t> want = unit;
  want[axis] = static_cast<int64_t>(op.inputs.size());
  if (want != ys) Fail(op.where + ": " + ShapeStr(ys) + " is not a stack of " + ShapeStr(xs));
  for (int id : op.inputs)
    if (g_.Shape(id) != xs) Fail(op.where + ": stacked tensors differ in shape");
  if (ReducedOverOnly(op.output, axis)) {
    stacked_[op.output] = op.inputs;
    return;
  }
  std::vector<Desc> srcs(op.inputs.size(), Plain(unit));
  dnnl::concat::primitive_desc pd(Engine(), Plain(ys), static_cast<int>(axis), srcs, UserScratchpad());
  std::vector<Arg> args;
  for (size_t i = 0; i < op.inputs.size(); ++i)
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), As(op.inputs[i], Plain(xs)), Plain(unit)});
  args.push_back({DNNL_ARG_DST, Define(op.output, Plain(ys)), Plain(ys)});
  AddStep(dnnl::concat(pd), std::move(args), pd.scratchpad_desc());
}

// A part of an NCHW tensor in oneDNN's nChw8c / nChw16c layout whose channel offset
// falls on a block (YOLOv8's split of a conv output in halves): one reorder from the
// sub-memory into the same layout, which the next conv reads as it is. False when the
// input is in another layout or the part cuts a block.
bool Builder::CopyBlockedPart(const BodyOp& op, const Dims& offsets) {
  int v = values_.of(op.inputs[0]);
  if (v < 0) return false;
  const Desc& src = values_[v].desc;
  if (src.get_ndims() != 4 || src.get_format_kind() != memory::format_kind::blocked) return false;
  Dims blocks = src.get_inner_blks(), idxs = src.get_inner_idxs();
  if (blocks.size() != 1 || idxs != Dims{1} || (blocks[0] != 8 && blocks[0] != 16)) return false;
  Dims dims = DimsOf(g_.Shape(op.output));
  Desc layout(DimsOf(g_.Shape(op.inputs[0])), memory::data_type::f32,
              blocks[0] == 8 ? memory::format_tag::nChw8c : memory::format_tag::nChw16c);
  if (layout != src || offsets[1] % blocks[0] != 0) return false;
  Desc sub = src.submemory_desc(dims, offsets);
  Desc part(dims, memory::data_type::f32, blocks[0] == 8 ? memory::format_tag::nChw8c : memory::format_tag::nChw16c);
  dnnl::reorder::primitive_desc pd(Engine(), sub, Engine(), part, UserScratchpad());
  AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, v, sub}, {DNNL_ARG_TO, Define(op.output, part), part}},
          pd.scratchpad_desc());
  return true;
}

// oneDNN resampling computes the source coordinate of output x as
// (x + 0.5) * in / out - 0.5 (ONNX half_pixel), clamped to the edges, and
// rounds it for nearest. ONNX Resize agrees for linear with half_pixel (and
// pytorch_half_pixel when no output extent is 1), and for nearest at integer
// upscales with half_pixel + round_prefer_floor/ceil (the coordinate stays
// within 0.5 of the right index) or asymmetric + floor. Empty when supported,
// else why not (annotations/dnnl.py's rule says the same).
std::string Builder::ResizeUnsupported(const std::string& method, const std::string& ctm, const std::string& rounding,
                                       const std::vector<int64_t>& xs, const std::vector<int64_t>& ys) {
  bool half_pixel = ctm == "half_pixel" || (ctm == "pytorch_half_pixel" && ys[2] > 1 && ys[3] > 1);
  if (method == "linear") {
    if (!half_pixel) return "linear resize with coordinate_transformation_mode=" + ctm + " (oneDNN: half_pixel only)";
    return "";
  }
  if (method != "nearest_neighbor") return "resize mode " + method + " (oneDNN: nearest and linear only)";
  for (int d = 2; d < 4; ++d)
    if (ys[d] % xs[d] != 0)
      return "nearest resize " + ShapeStr(xs) + " -> " + ShapeStr(ys) +
             " is not an integer upscale (oneDNN rounds half_pixel coordinates, which differs from ONNX otherwise)";
  if ((half_pixel && rounding.rfind("round_", 0) == 0) || (ctm == "asymmetric" && rounding == "floor")) return "";
  return "nearest resize with coordinate_transformation_mode=" + ctm + " and nearest_mode=" + rounding +
         " (oneDNN matches half_pixel with round_prefer_floor/round_prefer_ceil, or asymmetric with floor)";
}

void Builder::Resize(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  if (a.Str("layout") != "NCHW" || xs.size() != 4 || ys.size() != 4 || xs[0] != ys[0] || xs[1] != ys[1])
    Fail(op.where + ": resize of 4-D NCHW tensors only");
  std::string method = a.Str("method");
  std::string why = ResizeUnsupported(method, a.Str("coordinate_transformation_mode"), a.Str("rounding_method"), xs, ys);
  if (!why.empty()) Fail(op.where + ": " + why);
  algorithm alg = method == "linear" ? algorithm::resampling_linear : algorithm::resampling_nearest;
  int src = values_.of(op.inputs[0]);
  dnnl::resampling_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, alg, values_[src].desc,
                                              Any(DimsOf(ys)), UserScratchpad());
  src = As(op.inputs[0], pd.src_desc());
  int dst = Define(op.output, pd.dst_desc());
  AddStep(dnnl::resampling_forward(pd), {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
          pd.scratchpad_desc());
}

// A reorder from a strided view of the (plain) input into a plain output; positive steps.
void Builder::StridedSlice(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  // TVM passes axes, begin, end and strides as tuple arguments after the tensor (byoc/graph.py: arg1..arg4).
  std::vector<int64_t> axes = a.Ints("arg1"), begin = a.Ints("arg2"), end = a.Ints("arg3");
  std::vector<int64_t> steps = a.Has("arg4") && !a.IsNone("arg4") ? a.Ints("arg4") : std::vector<int64_t>(axes.size(), 1);
  if (begin.size() != axes.size() || end.size() != axes.size() || steps.size() != axes.size() || xs.size() != ys.size())
    Fail(op.where + ": axes, begin, end and strides differ in length");
  Dims offsets(xs.size(), 0), dims = DimsOf(xs), step(xs.size(), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    size_t d = static_cast<size_t>(NormAxis(axes[i], xs.size(), op.where));
    if (steps[i] < 1) Fail(op.where + ": stride " + std::to_string(steps[i]) + " (positive strides only)");
    auto clamp = [&](int64_t v) { return std::min(std::max(v < 0 ? v + xs[d] : v, int64_t{0}), xs[d]); };
    offsets[d] = clamp(begin[i]);
    dims[d] = std::max<int64_t>((clamp(end[i]) - offsets[d] + steps[i] - 1) / steps[i], 0);
    step[d] = dims[d] > 1 ? steps[i] : 1;  // one element: any stride
  }
  if (Dims(ys.begin(), ys.end()) != dims)
    Fail(op.where + ": the slice gives " + ShapeStr(std::vector<int64_t>(dims.begin(), dims.end())) + ", not " + ShapeStr(ys));
  if (ys == xs && values_.of(op.inputs[0]) >= 0) {  // the whole tensor (an exporter's no-op slice): itself
    values_.Bind(op.output, values_.of(op.inputs[0]));
    return;
  }
  for (size_t d = 0; d < xs.size(); ++d)
    if (dims[d] * step[d] > xs[d]) return CopySteppedPieces(op, offsets, step);
  CopyPart(op, offsets, step);
}

// oneDNN views n elements at step s along an axis only when n * s <= its extent (its strides must not suggest
// an overlap), and an odd extent halved (LeViT's x[:, ::2] of 7 rows: 4 * 2 > 7) is not. The first n - 1
// elements of each such axis are one view, its last element another: one reorder per piece, into the same
// view of the plain output.
void Builder::CopySteppedPieces(const BodyOp& op, const Dims& offsets, const Dims& step) {
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  std::vector<size_t> cut;
  for (size_t d = 0; d < xs.size(); ++d)
    if (ys[d] * step[d] > xs[d]) cut.push_back(d);
  Desc plain_in = Plain(xs), plain_out = Plain(ys);
  Dims in_strides = plain_in.get_strides(), out_strides = plain_out.get_strides(), view_strides = in_strides;
  for (size_t d = 0; d < xs.size(); ++d) view_strides[d] *= step[d];
  int src = As(op.inputs[0], plain_in);
  int dst = Define(op.output, plain_out);
  for (size_t piece = 0; piece < (size_t{1} << cut.size()); ++piece) {
    Dims dims = DimsOf(ys), from = offsets, to(xs.size(), 0);
    for (size_t j = 0; j < cut.size(); ++j) {
      size_t d = cut[j];
      bool last = (piece >> j) & 1;
      if (last) {
        from[d] += (ys[d] - 1) * step[d];
        to[d] = ys[d] - 1;
      }
      dims[d] = last ? 1 : ys[d] - 1;
    }
    size_t from_bytes = 0, to_bytes = 0;
    for (size_t d = 0; d < xs.size(); ++d) {
      from_bytes += static_cast<size_t>(from[d] * in_strides[d]) * sizeof(float);
      to_bytes += static_cast<size_t>(to[d] * out_strides[d]) * sizeof(float);
    }
    Desc in_view = Strided(dims, memory::data_type::f32, view_strides);
    Desc out_view = Strided(dims, memory::data_type::f32, out_strides);
    dnnl::reorder::primitive_desc pd(Engine(), in_view, Engine(), out_view, UserScratchpad());
    AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, src, in_view, from_bytes}, {DNNL_ARG_TO, dst, out_view, to_bytes}},
            pd.scratchpad_desc());
  }
}

// relax.gather_elements {axis}: byoc's GatherElements kernel over the plain data and the int64 index.
void Builder::GatherElementsOp(const BodyOp& op, const Attrs& a) {
  Arity(op, 2);
  const auto &xs = g_.Shape(op.inputs[0]), &is = g_.Shape(op.inputs[1]), &ys = g_.Shape(op.output);
  if (xs.empty() || xs.size() != is.size() || is != ys) Fail(op.where + ": data, index and output differ in rank");
  size_t axis = static_cast<size_t>(NormAxis(a.Int("axis"), xs.size(), op.where));
  int x = As(op.inputs[0], Plain(xs));
  // int64, sized as f64 (DataType); a constant index is float32 (codegens/dnnl/gather.py)
  int index = As(op.inputs[1], Plain(is, DataType(g_.tensor(op.inputs[1]))));
  Desc out = Plain(ys);
  std::vector<int64_t> strides(xs.size(), 1);
  for (size_t d = xs.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * xs[d + 1];
  AddStep(dnnl::primitive(),
          {{DNNL_ARG_SRC_0, x, values_[x].desc}, {DNNL_ARG_SRC_1, index, values_[index].desc},
           {DNNL_ARG_DST, Define(op.output, out), out}},
          Desc(), std::make_shared<GatherElements>(ys, strides, axis, xs[axis]));
}

// ScatterElements (reduction "update"; annotations/dnnl.py): the data's buffer written in place where nothing else
// reads it (WritableInPlace), else a copy of it first.
void Builder::ScatterElementsOp(const BodyOp& op, const Attrs& a) {
  Arity(op, 3);
  const auto &xs = g_.Shape(op.inputs[0]), &is = g_.Shape(op.inputs[1]), &us = g_.Shape(op.inputs[2]);
  if (xs.empty() || xs.size() != is.size() || is != us || g_.Shape(op.output) != xs)
    Fail(op.where + ": data, index and updates differ in rank, or index and updates in shape");
  size_t axis = static_cast<size_t>(NormAxis(a.Int("axis"), xs.size(), op.where));
  for (size_t d = 0; d < xs.size(); ++d)
    if (d != axis && is[d] > xs[d]) Fail(op.where + ": an index of " + ShapeStr(is) + " for data of " + ShapeStr(xs));
  Desc plain = Plain(xs);
  int x = As(op.inputs[0], plain);
  // int64, sized as f64 (DataType), as GatherElements' index
  int index = As(op.inputs[1], Plain(is, DataType(g_.tensor(op.inputs[1]))));
  int updates = As(op.inputs[2], Plain(us));
  bool in_place = WritableInPlace(op.inputs[0], x);
  int out = in_place ? x : NewTemp(plain);
  values_.Bind(op.output, out);
  std::vector<int64_t> strides(xs.size(), 1);
  for (size_t d = xs.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * xs[d + 1];
  AddStep(dnnl::primitive(),
          {{DNNL_ARG_SRC_0, x, values_[x].desc}, {DNNL_ARG_SRC_1, index, values_[index].desc},
           {DNNL_ARG_SRC_2, updates, values_[updates].desc}, {DNNL_ARG_DST, out, plain}},
          Desc(), std::make_shared<ScatterElements>(is, strides, axis, xs[axis], plain.get_size(), !in_place));
}

// Whether value `v`, which holds graph tensor `id`, may be overwritten by the one op that reads `id`: a plain temp of
// its own (no view of another, no other tensor held by it or by a view of it), and `id` no partition output.
bool Builder::WritableInPlace(int id, int v) const {
  const std::vector<int>& outputs = g_.outputs();
  if (g_.uses(id) != 1 || std::find(outputs.begin(), outputs.end(), id) != outputs.end()) return false;
  if (values_.StorageOf(v) != Storage::kTemp || values_[v].base >= 0) return false;
  for (int other = 0; other < static_cast<int>(g_.tensors().size()); ++other) {
    int held = values_.of(other);
    if (other != id && held >= 0 && values_.Root(held) == v) return false;
  }
  for (int w = 0; w < values_.size(); ++w)
    if (w != v && values_[w].base == v) return false;  // a view of it that a later step may read
  return true;
}

// A constant pad (attrs pad_width: before and after per axis): the plain output filled with the value, then
// the input copied into its middle by one reorder into a view of the output that starts at the widths before.
void Builder::Pad(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  std::vector<int64_t> widths = a.Ints("pad_width");
  if (a.Str("pad_mode") != "constant") Fail(op.where + ": pad mode " + a.Str("pad_mode") + " (constant only)");
  if (widths.size() != 2 * xs.size() || xs.size() != ys.size())
    Fail(op.where + ": " + std::to_string(widths.size()) + " pad widths for a tensor of rank " + std::to_string(xs.size()));
  Desc out = Plain(ys);
  Dims strides = out.get_strides();
  size_t offset = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    if (widths[2 * d] < 0 || widths[2 * d + 1] < 0 || xs[d] + widths[2 * d] + widths[2 * d + 1] != ys[d])
      Fail(op.where + ": " + ShapeStr(xs) + " padded by the widths given is not " + ShapeStr(ys));
    offset += static_cast<size_t>(widths[2 * d] * strides[d]) * sizeof(float);
  }
  int dst = Define(op.output, out);
  AddStep(dnnl::primitive(), {{DNNL_ARG_DST, dst, out}}, Desc(),
          std::make_shared<Fill>(g_.tensor(op.output).numel, static_cast<float>(a.Float("pad_value"))));
  Desc middle = Strided(DimsOf(xs), memory::data_type::f32, strides);
  int src = As(op.inputs[0], Plain(xs));
  dnnl::reorder::primitive_desc pd(Engine(), Plain(xs), Engine(), middle, UserScratchpad());
  AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, src, Plain(xs)}, {DNNL_ARG_TO, dst, middle, offset}}, pd.scratchpad_desc());
}

// One result of relax.split (attrs["result_index"], see byoc/graph.py): a part along the axis.
void Builder::Split(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  if (xs.empty() || xs.size() != ys.size()) Fail(op.where + ": split of a scalar or into another rank");
  size_t axis = static_cast<size_t>(NormAxis(a.Int("axis"), xs.size(), op.where));
  int64_t index = a.Int("result_index"), begin = 0, end = 0;
  if (a.IsInts("indices_or_sections")) {
    std::vector<int64_t> cuts = a.Ints("indices_or_sections");
    if (index < 0 || index > static_cast<int64_t>(cuts.size())) Fail(op.where + ": result index out of range");
    begin = index == 0 ? 0 : cuts[index - 1];
    end = index == static_cast<int64_t>(cuts.size()) ? xs[axis] : cuts[index];
  } else {
    int64_t sections = a.Int("indices_or_sections");
    if (sections < 1 || xs[axis] % sections != 0 || index < 0 || index >= sections)
      Fail(op.where + ": " + std::to_string(sections) + " equal sections of " + std::to_string(xs[axis]));
    begin = index * (xs[axis] / sections);
    end = begin + xs[axis] / sections;
  }
  begin = std::min(std::max(begin, int64_t{0}), xs[axis]);
  end = std::min(std::max(end, begin), xs[axis]);
  for (size_t d = 0; d < xs.size(); ++d)
    if (ys[d] != (d == axis ? end - begin : xs[d]))
      Fail(op.where + ": result " + std::to_string(index) + " of " + ShapeStr(xs) + " is not " + ShapeStr(ys));
  Dims offsets(xs.size(), 0);
  offsets[axis] = begin;
  CopyPart(op, offsets, Dims(xs.size(), 1));
}

// The output of `op` is the part of its (plain) input that starts at `offsets` and
// takes every step-th element: one reorder from a strided view that starts inside
// the input's buffer.
void Builder::CopyPart(const BodyOp& op, const Dims& offsets, const Dims& step) {
  const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
  if (step == Dims(xs.size(), 1) && CopyBlockedPart(op, offsets)) return;
  Desc plain = Plain(xs);
  Dims strides = plain.get_strides();
  size_t offset = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    offset += static_cast<size_t>(offsets[d] * strides[d]) * sizeof(float);
    strides[d] *= step[d];
  }
  Desc view = Strided(DimsOf(ys), memory::data_type::f32, strides);
  int src = As(op.inputs[0], plain);
  if (view == Plain(ys) && values_.StorageOf(src) != Storage::kConst) {
    // A contiguous part (the rows of one step of an unrolled LSTM's input projection): those bytes, no copy.
    values_.Bind(op.output, values_.View(src, view, offset));
    return;
  }
  int dst = Define(op.output, Plain(ys));
  dnnl::reorder::primitive_desc pd(Engine(), view, Engine(), Plain(ys), UserScratchpad());
  AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, src, view, offset}, {DNNL_ARG_TO, dst, Plain(ys)}},
          pd.scratchpad_desc());
}

}  // namespace dnnl_runtime
}  // namespace byoc
