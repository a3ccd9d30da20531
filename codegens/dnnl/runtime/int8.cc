// int8.cc -- int8 units: quantized convs, matmuls and adds, quantize/dequantize, and fake-quantized element-wise units.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "builder.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

// What a qnn.conv*/qnn.matmul weight is quantized by on its way to s8: nothing for the s8 bytes the codegen sends
// ("w_shape"), or for an artifact built before that, "w_scale" when it was sent in real units ("weight_real").
std::vector<double> Builder::WeightScales(const Attrs& a) {
  return a.Has("weight_real") && a.Bool("weight_real") ? a.Floats("w_scale") : std::vector<double>{};
}

// A qnn.conv*/qnn.matmul weight seen as `desc` (its dims and strides): the s8 values over the packed bytes
// ("w_shape"), or the float32 constant an artifact built before sent.
int Builder::QuantizedWeightView(const BodyOp& op, const Attrs& a, const Desc& desc) {
  int w = op.inputs[1];
  if (!a.Has("w_shape")) return values_.ConstView(values_.of(w), desc);
  return PackedConst(w, Desc(desc.get_dims(), memory::data_type::s8, desc.get_strides()), op.where);
}

// byoc.dequantize_constant: an 8-bit constant sent packed (its bytes in a float32 constant a quarter as long:
// codegens/dnnl/quantized.py) dequantized at load into a plain float32 constant of "shape": (q - zero_point) *
// scale, per index of "axis" when there are several scales, in double and rounded once (the float32 the codegen
// computed when it sent the reals, and ONNX's float32 product for 8-bit values). The weight of a unit run as its
// float definition (without VNNI, a grouped conv, a deconvolution): the programs of the module share it, and the
// reorders made from it.
void Builder::DequantizeConstant(const BodyOp& op, const Attrs& a) {
  Arity(op, 1);
  const std::vector<int64_t> shape = a.Ints("shape");
  if (shape != g_.Shape(op.output)) Fail(op.where + ": shape " + ShapeStr(shape) + " is not its output's");
  std::string dtype = a.Str("dtype");
  if (dtype != "int8" && dtype != "uint8") Fail(op.where + ": dtype " + dtype + " (int8 or uint8 only)");
  std::vector<double> scale = a.Floats("scale");
  std::vector<int64_t> zero_point = a.Ints("zero_point");
  int64_t axis = a.Int("axis"), channels = 1, inner = 1;
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size())) Fail(op.where + ": axis out of range");
  if (scale.size() > 1) {
    channels = shape[axis];
    for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  }
  if (static_cast<int64_t>(scale.size()) != channels ||
      (zero_point.size() != 1 && static_cast<int64_t>(zero_point.size()) != channels))
    Fail(op.where + ": " + std::to_string(scale.size()) + " scales and " + std::to_string(zero_point.size()) +
         " zero points for " + std::to_string(channels) + " channels");
  int packed = op.inputs[0];
  PackedConst(packed, Plain(shape, memory::data_type::s8), op.where);  // checks the bytes are there
  int64_t count = g_.tensor(op.output).numel;
  std::ostringstream key;
  key << values_.GivenKey(values_.of(packed)) << "/dequantized/" << dtype << '/' << axis << std::hexfloat;
  for (double s : scale) key << ',' << s;
  key << '/';
  for (int64_t z : zero_point) key << z << ',';
  int v = values_.KeepShared(key.str(), [&] {
    memory real(Plain(shape), Engine());
    auto* out = static_cast<float*>(real.get_data_handle());
    const auto* bytes = reinterpret_cast<const uint8_t*>(g_.const_data(packed).data());
    bool is_signed = dtype == "int8";
    for (int64_t i = 0; i < count; ++i) {
      size_t c = channels == 1 ? 0 : static_cast<size_t>((i / inner) % channels);
      double q = is_signed ? static_cast<int8_t>(bytes[i]) : bytes[i];
      double z = static_cast<double>(zero_point[zero_point.size() == 1 ? 0 : c]);
      out[i] = static_cast<float>((q - z) * scale[c]);
    }
    return real;
  });
  values_.Bind(op.output, v);
}

// The s8 weights of a qnn.conv*/qnn.matmul in layout `desc` (WeightScales along `mask`).
int Builder::QuantizedWeights(int v, const Desc& desc, const Attrs& a, int mask) {
  return values_.ReorderConst(v, desc, WeightScales(a), mask);
}

// Arguments and attribute masks of one scale (per tensor, or per index of `mask`'s axes).
void Builder::Scales(primitive_attr* attr, std::vector<Arg>* args, int arg, const std::vector<double>& scales,
                     int mask) {
  attr->set_scales_mask(arg, scales.size() > 1 ? mask : 0);
  int v = values_.OwnedConst(std::vector<float>(scales.begin(), scales.end()), memory::data_type::f32);
  args->push_back({DNNL_ARG_ATTR_SCALES | arg, v, values_[v].desc});
}

void Builder::ZeroPoint(primitive_attr* attr, std::vector<Arg>* args, int arg, int64_t zero_point) {
  if (zero_point == 0) return;
  attr->set_zero_points_mask(arg, 0);
  int v = values_.OwnedConst(std::vector<int32_t>{static_cast<int32_t>(zero_point)}, memory::data_type::s32);
  args->push_back({DNNL_ARG_ATTR_ZERO_POINTS | arg, v, values_[v].desc});
}

// A folded relu or clip: the output range narrower than the type's, as a clip in real units
// (post-ops run before the output scale).
post_ops Builder::OutputRange(const Attrs& a, memory::data_type type) const {
  post_ops ops;
  int64_t lo = a.Int("out_min"), hi = a.Int("out_max");
  int64_t type_lo = type == memory::data_type::u8 ? 0 : -128, type_hi = type == memory::data_type::u8 ? 255 : 127;
  if (lo > type_lo || hi < type_hi) {
    double scale = a.Float("y_scale"), zp = static_cast<double>(a.Int("y_zero_point"));
    ops.append_eltwise(algorithm::eltwise_clip, static_cast<float>((lo - zp) * scale),
                       static_cast<float>((hi - zp) * scale));
  }
  return ops;
}

// `desc`'s layout for tensor `t` (its dtype) when it is a strided one (an int8 conv's NHWC): a quantize
// feeding the next int8 conv, or a dequantize feeding a float op, moves no data twice. A channel-blocked
// one (a float conv's nChw8c) becomes channels last, the layout oneDNN's 8-bit kernels take: a u8 max pool
// over NCHW is its reference kernel (26 ms of a ResNet-50 whose first conv ran in float32; 0.1 ms NHWC).
Desc Builder::Retyped(const Desc& desc, const TensorInfo& t) {
  if (IsStrided(desc)) return Desc(desc.get_dims(), DataType(t), desc.get_strides());
  if (desc.get_format_kind() == memory::format_kind::blocked && t.shape.size() >= 3 && t.shape.size() <= 5)
    return ChannelsLast(t.shape, DataType(t));
  return Plain(t.shape, DataType(t));
}

// NWC / NHWC / NDHWC for a 3- to 5-D tensor.
Desc Builder::ChannelsLast(const std::vector<int64_t>& shape, memory::data_type type) {
  static const memory::format_tag tags[] = {memory::format_tag::nwc, memory::format_tag::nhwc,
                                            memory::format_tag::ndhwc};
  return Desc(DimsOf(shape), type, tags[shape.size() - 3]);
}

// qnn.add of two 8-bit tensors of one shape as one binary: scale_a * a + scale_b * b in f32,
// then a linear post-op to the output's quantized units (1 / y_scale, the zero points folded
// into the offset), clipped to the output range, rounded and saturated on the store.
void Builder::QuantizedAdd(const BodyOp& op, const Attrs& a) {
  Arity(op, 2);
  int x = op.inputs[0], y = op.inputs[1];
  if (g_.Shape(x) != g_.Shape(op.output) || g_.Shape(y) != g_.Shape(op.output))
    Fail(op.where + ": operands of one shape only");
  int from = values_.of(x);
  if (from < 0) Fail("tensor " + g_.tensor(x).name + " is read before it is computed");
  Desc src0 = values_[from].desc, src1 = Retyped(src0, g_.tensor(y)), dst = Retyped(src0, g_.tensor(op.output));
  double sa = a.Float("a_scale"), sb = a.Float("b_scale"), sy = a.Float("y_scale");
  double offset = static_cast<double>(a.Int("y_zero_point")) -
                  (static_cast<double>(a.Int("a_zero_point")) * sa + static_cast<double>(a.Int("b_zero_point")) * sb) / sy;
  post_ops ops;
  ops.append_eltwise(algorithm::eltwise_linear, static_cast<float>(1.0 / sy), static_cast<float>(offset));
  ops.append_eltwise(algorithm::eltwise_clip, static_cast<float>(a.Int("out_min")), static_cast<float>(a.Int("out_max")));
  primitive_attr attr = UserScratchpad(ops);
  std::vector<Arg> args;
  Scales(&attr, &args, DNNL_ARG_SRC_0, {sa}, 0);
  Scales(&attr, &args, DNNL_ARG_SRC_1, {sb}, 0);
  dnnl::binary::primitive_desc pd(Engine(), algorithm::binary_add, src0, src1, dst, attr);
  args.push_back({DNNL_ARG_SRC_0, As(x, src0), src0});
  args.push_back({DNNL_ARG_SRC_1, As(y, src1), src1});
  args.push_back({DNNL_ARG_DST, Define(op.output, dst), dst});
  AddStep(dnnl::binary(pd), std::move(args), pd.scratchpad_desc());
}

// DQ(x) [, DQ(y)] -> element-wise ops -> Q: a QDQ unit that runs as its float definition (the
// add of hard-swish, a sigmoid, the multiply of squeeze-excitation), or lone DQ and Q around
// float ops between them. One binary primitive on the 8-bit x, x + 0, whose post-ops
// dequantize it (linear), run the element-wise ops (eltwise; binary with their other operand),
// quantize (linear), and it stores 8-bit (rounded to nearest even and saturated, as qnn.add).
// It replaces the reorders that dequantize and quantize, the float primitives, and their float
// intermediates (measured: such reorders took 1.85 ms of PP-OCR cls's 4.0 ms int8 run). A
// second 8-bit operand of a multiply with zero point 0 is read as it is (its scale is one more
// linear post-op); any other is dequantized first. Per-tensor quantization only. Returns how
// many ops it took (those dequantizes included), or 0 (having added nothing). A pooling on the
// 8-bit tensor with the same post-ops (DQ -> global mean -> Q) is oneDNN's reference kernel on
// AVX2 (0.3-0.7 ms each in PP-OCR cls), so those units keep their reorders.
size_t Builder::FakeQuantizedAt(size_t k) {
  const std::vector<BodyOp>& ops = g_.ops();
  size_t j = k;
  while (j < ops.size() && j < k + 2 && ops[j].kernel == "relax.dequantize" && PerTensor(ops[j]) &&
         !fake_quantized_.count(ops[j].inputs[0]))  // already dequantized (FakeQuantizeAfter)
    ++j;
  if (j == k || j >= ops.size()) return 0;
  std::vector<size_t> dqs;
  for (size_t i = k; i < j; ++i) dqs.push_back(i);
  auto dq_of = [&](int t) -> int {  // which leading dequantize writes t, or -1
    for (size_t i : dqs)
      if (ops[i].output == t) return static_cast<int>(i);
    return -1;
  };
  // The main operand: a dequantized tensor the first op reads, of its shape.
  int x = -1;
  for (int t : ops[j].inputs)
    if (x < 0 && dq_of(t) >= 0 && g_.Shape(t) == g_.Shape(ops[j].output)) x = t;
  if (x < 0) return 0;
  int main_dq = dq_of(x);
  const std::vector<int64_t>& shape = g_.Shape(x);
  std::vector<PostOp> chain;
  std::vector<int> others;  // per chain entry: the leading dequantize a binary reads, or -1
  while (j < ops.size() && ops[j].kernel != "relax.quantize") {
    const BodyOp& op = ops[j];
    PostOp p;
    int other_dq = -1;
    size_t n = 0;
    if (g_.uses(x) != 1) return 0;
    if (op.inputs.size() == 1 && op.inputs[0] == x && EltwiseOf(op, &p)) n = 1;
    bool x_first = false;
    float c = ScalarOperand(op, x, &x_first);  // before LinearOf reads x_first: argument order is unspecified
    if (n == 0 && LinearOf(op.kernel, c, x_first, &p.alpha, &p.beta)) {
      p.alg = algorithm::eltwise_linear;
      n = 1;
    }
    if (n == 0 && BinaryAlgorithm(op.kernel) && op.inputs.size() == 2 && op.inputs[0] != op.inputs[1] &&
        (op.inputs[0] == x || (op.inputs[1] == x && Commutes(op.kernel))) && g_.Shape(op.output) == shape) {
      int other = op.inputs[0] == x ? op.inputs[1] : op.inputs[0];
      other_dq = dq_of(other);
      if (Broadcasts(g_.Shape(other), shape) && (other_dq >= 0 || values_.of(other) >= 0)) {
        p = PostOp{*BinaryAlgorithm(op.kernel), 0.0f, 0.0f, other};
        n = 1;
      }
    }
    if (n == 0) return 0;
    chain.push_back(p);
    others.push_back(n == 1 && p.tensor >= 0 ? other_dq : -1);
    x = ops[j + n - 1].output;
    j += n;
  }
  if (chain.empty() || j >= ops.size() || ops[j].kernel != "relax.quantize" ||
      ops[j].inputs != std::vector<int>{x} || g_.uses(x) != 1 || !PerTensor(ops[j]))
    return 0;
  // Every leading dequantize feeds this chain: the main one (the loop counted its reads), or
  // one binary's operand, once.
  const BodyOp& q = ops[j];
  for (size_t i : dqs) {
    bool operand = std::find(others.begin(), others.end(), static_cast<int>(i)) != others.end();
    if (static_cast<int>(i) != main_dq && (!operand || g_.uses(ops[i].output) != 1)) return 0;
  }
  // A multiply reads a zero-point-0 operand as it is, then scales; other operands are dequantized.
  std::vector<int> dequantized_first;
  for (size_t c = 0; c < chain.size(); ++c) {
    if (others[c] < 0) continue;
    const BodyOp& dq = ops[static_cast<size_t>(others[c])];
    Attrs da(dq.attrs, dq.where);
    if (chain[c].alg == algorithm::binary_mul && da.Ints("zero_point")[0] == 0) {
      chain[c].tensor = dq.inputs[0];
      chain.insert(chain.begin() + static_cast<std::ptrdiff_t>(c) + 1,
                   PostOp{algorithm::eltwise_linear, static_cast<float>(da.Floats("scale")[0]), 0.0f, -1});
      others.insert(others.begin() + static_cast<std::ptrdiff_t>(c) + 1, -1);
    } else {
      dequantized_first.push_back(others[c]);
    }
  }
  const BodyOp& dq = ops[static_cast<size_t>(main_dq)];
  int from = values_.of(dq.inputs[0]);
  if (from < 0) Fail("tensor " + g_.tensor(dq.inputs[0]).name + " is read before it is computed");
  Attrs da(dq.attrs, dq.where), qa(q.attrs, q.where);
  double si = da.Floats("scale")[0], so = qa.Floats("scale")[0];
  double zi = static_cast<double>(da.Ints("zero_point")[0]), zo = static_cast<double>(qa.Ints("zero_point")[0]);
  Desc src = values_[from].desc;
  Desc dst = Retyped(src, g_.tensor(q.output));
  // Dequantize, the chain, quantize: all post-ops of one x + 0 on the 8-bit tensor.
  PostOp dequantize{algorithm::eltwise_linear, static_cast<float>(si), static_cast<float>(-zi * si)};
  Fused f{{dequantize}, -1, q.output, j + 1};
  f.post.insert(f.post.end(), chain.begin(), chain.end());
  f.post.push_back(PostOp{algorithm::eltwise_linear, static_cast<float>(1.0 / so), static_cast<float>(zo)});
  Desc zero_desc = Plain(Dims(shape.size(), 1));
  dnnl::binary::primitive_desc pd;
  try {
    pd = dnnl::binary::primitive_desc(Engine(), algorithm::binary_add, src, zero_desc, dst,
                                      UserScratchpad(BuildPostOps(f, shape, &dst)));
  } catch (const dnnl::error&) {  // oneDNN has no such kernel: the ops run one by one
    return 0;
  }
  if (IsReference(pd)) return 0;
  // What each tensor a post-op may read holds for the 256 codes of the unit's source: the source and byte
  // tables of it as they are, and the leading dequantizations of those ((x - zero point) * scale in float32,
  // as ONNX's DequantizeLinear).
  int source = dq.inputs[0];
  std::map<int, memory> operands;
  for (const PostOp& p : f.post)
    if (p.tensor >= 0)
      if (memory bytes = BytesOf(p.tensor, source)) operands[p.tensor] = bytes;
  for (size_t i : dqs) {
    memory bytes = BytesOf(ops[i].inputs[0], source);
    if (!bytes) continue;
    Attrs a(ops[i].attrs, ops[i].where);
    float scale = static_cast<float>(a.Floats("scale")[0]);
    int64_t zero_point = a.Ints("zero_point")[0];
    bool is_signed = DataType(g_.tensor(ops[i].inputs[0])) == memory::data_type::s8;
    memory values(Desc(Dims{256}, memory::data_type::f32, memory::format_tag::a), Engine());
    const auto* b = static_cast<const uint8_t*>(bytes.get_data_handle());
    auto* v = static_cast<float*>(values.get_data_handle());
    for (int c = 0; c < 256; ++c)
      v[c] = static_cast<float>((is_signed ? static_cast<int8_t>(b[c]) : b[c]) - zero_point) * scale;
    operands[ops[i].output] = values;
  }
  if (std::vector<uint8_t> table = LookupTableOf(f, src, dst, operands); !table.empty()) {
    DropComposedTables(f, dqs);
    // A source that is itself a byte table read by nothing else: one table of its source instead (hard-swish
    // as onnxruntime's quantizer writes it is three units, each a table of the one before).
    if (std::optional<ByteTable> upstream = TakeLastTable(source)) {
      std::vector<uint8_t> composed(256);
      for (int b = 0; b < 256; ++b) composed[b] = table[upstream->table[b]];
      table = std::move(composed);
      source = upstream->source;
      from = values_.of(source);
      src = values_[from].desc;
    }
    int64_t count = static_cast<int64_t>(src.get_size());
    byte_tables_[q.output] = {source, table, plan_.size()};
    AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, from, src}, {DNNL_ARG_DST, Define(q.output, dst), dst}}, Desc(),
            std::make_shared<LookupTable>(std::move(table), count));
    return j - k + 1;
  }
  for (int i : dequantized_first) {
    const BodyOp& other = ops[static_cast<size_t>(i)];
    QuantizeReorder(other, Attrs(other.attrs, other.where), false);
  }
  std::vector<Arg> args;
  AddBinaryArgs(f, &args, shape, dst);
  memory zero(zero_desc, Engine());
  *static_cast<float*>(zero.get_data_handle()) = 0.0f;
  args.push_back({DNNL_ARG_SRC_0, from, src});
  args.push_back({DNNL_ARG_SRC_1, values_.KeepConst(zero), zero_desc});
  args.push_back({DNNL_ARG_DST, Define(q.output, dst), dst});
  AddStep(dnnl::binary(pd), std::move(args), pd.scratchpad_desc());
  return j - k + 1;
}

// A float conv or matmul whose result a QDQ unit quantizes (relax.quantize ends the unit's float definition,
// which runs without VNNI) for readers that all dequantize it again with the same scale and zero point (the next
// units' float definitions): the 8-bit tensor is never made. The primitive puts its result on the quantization's
// grid itself, as post-ops: times 1 / s (as oneDNN's quantizing reorder computes x / s), clipped to the 8-bit
// type's range less the zero point, rounded to nearest even, times s. That is ONNX's DequantizeLinear of the
// QuantizeLinear, (q - zp) * s with q - zp an integer, and those dequantizes read the primitive's float32 output
// (Dequantize binds them to it). It replaces a quantizing reorder and a dequantizing one, and a layout change
// between them: ResNet-50 QDQ spent 8.3 of 52 ms in reorders on AVX2, 3.4 after. Returns whether it took the quantize into `f`.
bool Builder::FakeQuantizeAfter(Fused* f) {
  const std::vector<BodyOp>& ops = g_.ops();
  if (f->next >= ops.size()) return false;
  const BodyOp& q = ops[f->next];
  if (q.kernel != "relax.quantize" || q.inputs != std::vector<int>{f->last} || g_.uses(f->last) != 1 ||
      !PerTensor(q))
    return false;
  Attrs qa(q.attrs, q.where);
  double scale = qa.Floats("scale")[0];
  int64_t zero_point = qa.Ints("zero_point")[0];
  int readers = 0;
  for (size_t i = f->next + 1; i < ops.size(); ++i) {
    const BodyOp& r = ops[i];
    if (std::find(r.inputs.begin(), r.inputs.end(), q.output) == r.inputs.end()) continue;
    if (r.kernel != "relax.dequantize" || !PerTensor(r)) return false;
    Attrs ra(r.attrs, r.where);
    if (ra.Floats("scale")[0] != scale || ra.Ints("zero_point")[0] != zero_point) return false;
    ++readers;
  }
  if (readers == 0 || readers != g_.uses(q.output)) return false;  // a partition output is a use too
  bool is_signed = DataType(g_.tensor(q.output)) == memory::data_type::s8;
  double lo = (is_signed ? -128.0 : 0.0) - static_cast<double>(zero_point);
  double hi = (is_signed ? 127.0 : 255.0) - static_cast<double>(zero_point);
  // Clipped first (to integer bounds: the same as after rounding), then rounded by adding and taking away
  // 1.5 * 2^23, which leaves no fraction in float32 for |v| < 2^22: round to nearest even, as the FPU's default
  // mode does. oneDNN's eltwise_round post-op would do the same, but its generated conv and matmul kernels lack it
  // (the gemm matmul has no kernel with it; the 1x1 brgconv fell back to a slower one).
  constexpr float kRoundingShift = 12582912.0f;
  f->post.push_back(PostOp{algorithm::eltwise_linear, static_cast<float>(1.0 / scale), 0.0f});
  f->post.push_back(PostOp{algorithm::eltwise_clip_v2, static_cast<float>(lo), static_cast<float>(hi)});
  f->post.push_back(PostOp{algorithm::eltwise_linear, 1.0f, kRoundingShift});
  f->post.push_back(PostOp{algorithm::eltwise_linear, 1.0f, -kRoundingShift});
  f->post.push_back(PostOp{algorithm::eltwise_linear, static_cast<float>(scale), 0.0f});
  fake_quantized_[q.output] = f->last;  // the primitive writes f->last (float32): the dequantizes read it
  ++f->next;
  return true;
}

// A quantize or dequantize with one scale and one zero point.
bool Builder::PerTensor(const BodyOp& op) {
  Attrs a(op.attrs, op.where);
  return a.Floats("scale").size() == 1 && a.Ints("zero_point").size() == 1;
}

// relax.quantize (f32 -> u8/s8) or relax.dequantize (u8/s8 -> f32): one reorder with scale and
// zero point, from the input in whatever layout it has to a plain output.
void Builder::QuantizeReorder(const BodyOp& op, const Attrs& a, bool quantize) {
  Arity(op, 1);
  int x = op.inputs[0];
  SameShape(op, x);
  std::vector<int64_t> zero_points = a.Ints("zero_point");
  for (int64_t z : zero_points)
    if (z != zero_points[0]) Fail(op.where + ": per-axis zero points are not supported (scales are)");
  int arg = quantize ? DNNL_ARG_DST : DNNL_ARG_SRC;
  int from = values_.of(x);
  if (from < 0) Fail("tensor " + g_.tensor(x).name + " is read before it is computed");
  Desc src = values_[from].desc, dst = Retyped(src, g_.tensor(op.output));
  primitive_attr attr = UserScratchpad();
  std::vector<Arg> args;
  int64_t axis = a.Int("axis");
  Scales(&attr, &args, arg, a.Floats("scale"), 1 << axis);
  ZeroPoint(&attr, &args, arg, zero_points[0]);
  dnnl::reorder::primitive_desc pd(Engine(), src, Engine(), dst, attr);
  args.push_back({DNNL_ARG_FROM, from, src});
  args.push_back({DNNL_ARG_TO, Define(op.output, dst), dst});
  AddStep(dnnl::reorder(pd), std::move(args), pd.scratchpad_desc());
}

// The scales, zero points and output range of a qnn.conv2d / qnn.matmul.
primitive_attr Builder::QuantizedAttr(const Attrs& a, memory::data_type out, int weight_mask, std::vector<Arg>* args) {
  primitive_attr attr = UserScratchpad(OutputRange(a, out));
  Scales(&attr, args, DNNL_ARG_SRC, {a.Float("x_scale")}, 0);
  Scales(&attr, args, DNNL_ARG_WEIGHTS, a.Floats("w_scale"), weight_mask);
  Scales(&attr, args, DNNL_ARG_DST, {a.Float("y_scale")}, 0);
  ZeroPoint(&attr, args, DNNL_ARG_SRC, a.Int("x_zero_point"));
  ZeroPoint(&attr, args, DNNL_ARG_DST, a.Int("y_zero_point"));
  return attr;
}

// An int8 convolution: u8/s8 source, s8 weights (sent as float32 integers, reordered once),
// an optional f32 bias in real units, u8/s8 destination.
size_t Builder::QuantizedConv(size_t k, const Attrs& a) {
  const BodyOp& op = g_.ops()[k];
  if (op.inputs.size() != 2 && op.inputs.size() != 3) Fail(op.where + " takes 2 or 3 inputs");
  int x = op.inputs[0];
  const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
  const ConvDims c = ConvShape(op, a);
  if (WindowsAsMatmul(op, a, c)) return k + 1;
  memory::data_type out = DataType(g_.tensor(op.output));
  std::vector<Arg> args;
  int weight_mask = c.groups == 1 ? 1 : 3;  // per output channel (of every group)
  primitive_attr attr = QuantizedAttr(a, out, weight_mask, &args);
  Desc bias = Plain({ys[1]});
  auto pd = ConvPd(c, Any(DimsOf(xs), DataType(g_.tensor(x))), Any(c.weights, memory::data_type::s8),
                   op.inputs.size() == 3 ? &bias : nullptr, Any(DimsOf(ys), out), attr);
  args.push_back({DNNL_ARG_SRC, As(x, pd.src_desc()), pd.src_desc()});
  args.push_back({DNNL_ARG_WEIGHTS,
                  QuantizedWeights(QuantizedWeightView(op, a, Plain(c.weights)), pd.weights_desc(), a, weight_mask),
                  pd.weights_desc()});
  if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, values_.of(op.inputs[2]), bias});
  args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
  AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
  return k + 1;
}

// An int8 conv1d (or conv2d over a W = 1 image, kernel width 1) of stride 1, no padding or dilation, one group
// and batch 1 as a window copy (Windows) and
// one int8 matmul [out length, kernel * C] x [kernel * C, K]: oneDNN's int8 direct conv ran Magika's
// 256 -> 512 channel, 5-tap conv at 175 G multiply-adds/s, its int8 matmul of the same products at 410-447
// (AVX-512 VNNI, 2 threads). The weight is laid out [tap][channel][K] once, at load; the matmul writes the
// conv's output in NWC. Exact either way (int32 sums). False, adding nothing, for any other conv.
bool Builder::WindowsAsMatmul(const BodyOp& op, const Attrs& a, const ConvDims& c) {
  int x = op.inputs[0];
  const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
  // a conv2d over a W = 1 image with a kernel of width 1 is the same conv1d (Magika's Conv1D export)
  bool conv2d = op.kernel == "qnn.conv2d" && xs.size() == 4 && xs[3] == 1 && c.weights.size() == 4 && c.weights[3] == 1;
  size_t spatial = conv2d ? 2 : 1;
  if ((op.kernel != "qnn.conv1d" && !conv2d) || c.groups != 1 || xs[0] != 1 || c.weights[2] < 2 ||
      c.strides != Dims(spatial, 1) || c.dilation != Dims(spatial, 0) || c.pad_l != Dims(spatial, 0) ||
      c.pad_r != Dims(spatial, 0))
    return false;
  int64_t channels = xs[1], length = xs[2], taps = c.weights[2], outs = ys[1], rows = ys[2];
  memory::data_type in = DataType(g_.tensor(x)), out = DataType(g_.tensor(op.output));
  std::vector<Arg> args;
  primitive_attr attr = QuantizedAttr(a, out, 2, &args);  // per output column
  Desc windows({rows, taps * channels}, in, memory::format_tag::ab), dst({rows, outs}, out, memory::format_tag::ab);
  Desc w_any({taps * channels, outs}, memory::data_type::s8, memory::format_tag::any), bias({1, outs}, memory::data_type::f32, memory::format_tag::ab);
  auto pd = op.inputs.size() == 3 ? dnnl::matmul::primitive_desc(Engine(), windows, w_any, bias, dst, attr)
                                  : dnnl::matmul::primitive_desc(Engine(), windows, w_any, dst, attr);
  if (IsReference(pd)) return false;
  Desc nwc = conv2d ? Desc({1, channels, length, 1}, in, memory::format_tag::acdb)
                    : Desc({1, channels, length}, in, memory::format_tag::acb);
  int rows_value = NewTemp(windows);
  AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, As(x, nwc), nwc}, {DNNL_ARG_DST, rows_value, windows}}, Desc(),
          std::make_shared<Windows>(rows, taps * channels, channels));
  // [K, C, taps] (OIW) read as [tap][C][K] into plain s8 (quantized per K when sent in real units): the rows
  // of the matmul's weight, then packed (oneDNN has no scaled reorder into the packed layout). Only the packed
  // copy is kept.
  int by_tap = QuantizedWeightView(op, a, Desc({taps, channels, outs}, memory::data_type::f32, Dims{1, taps, channels * taps}));
  memory staged = ValueTable::Reordered(memory(values_[by_tap].desc, Engine(), values_.ConstData(values_[values_.Root(by_tap)].slot)),
                            Plain({taps, channels, outs}, memory::data_type::s8), WeightScales(a), 1 << 2);
  memory rows_of_weight(Plain({taps * channels, outs}, memory::data_type::s8), Engine(), staged.get_data_handle());
  int packed = values_.KeepConst(ValueTable::Reordered(rows_of_weight, pd.weights_desc()));
  args.push_back({DNNL_ARG_SRC, rows_value, windows});
  args.push_back({DNNL_ARG_WEIGHTS, packed, pd.weights_desc()});
  if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, values_.of(op.inputs[2]), bias});
  Desc nwc_out = conv2d ? Desc({1, outs, rows, 1}, out, memory::format_tag::acdb)
                        : Desc({1, outs, rows}, out, memory::format_tag::acb);
  args.push_back({DNNL_ARG_DST, Define(op.output, nwc_out), dst});
  AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
  return true;
}

// An int8 matmul with constant s8 weights (per tensor, or per output column).
size_t Builder::QuantizedMatmul(size_t k, const Attrs& a) {
  const BodyOp& op = g_.ops()[k];
  if (op.inputs.size() != 2 && op.inputs.size() != 3) Fail(op.where + " takes 2 or 3 inputs");
  int x = op.inputs[0], w = op.inputs[1];
  if (g_.tensor(w).kind != Kind::kConst) Fail(op.where + ": the weight must be a constant (it is reordered at load)");
  const std::vector<int64_t> ws = WeightShape(op);
  const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
  if (xs.size() < 2 || ws.size() < 2 || xs.back() != ws[ws.size() - 2] || ys.back() != ws.back() ||
      ys.size() != std::max(xs.size(), ws.size()))
    Fail(op.where + ": shapes " + ShapeStr(xs) + " x " + ShapeStr(ws) + " -> " + ShapeStr(ys) + " do not match");
  if (op.inputs.size() == 3 && g_.tensor(op.inputs[2]).numel != ws.back())
    Fail(op.where + ": the bias must hold one value per output column (" + std::to_string(ws.back()) + ")");
  if (ws.size() == 2 && RowsAsConv(op, a)) return k + 1;
  size_t rank = ys.size();
  memory::data_type out = DataType(g_.tensor(op.output));
  std::vector<Arg> args;
  int weight_mask = 1 << (rank - 1);  // per output column
  primitive_attr attr = QuantizedAttr(a, out, weight_mask, &args);
  Desc src = Plain(Padded(xs, rank), DataType(g_.tensor(x))), dst = Plain(DimsOf(ys), out);
  Desc bias = Plain(Padded({ys.back()}, rank));
  Desc w_any = Any(Padded(ws, rank), memory::data_type::s8);
  auto pd = op.inputs.size() == 3 ? dnnl::matmul::primitive_desc(Engine(), src, w_any, bias, dst, attr)
                                  : dnnl::matmul::primitive_desc(Engine(), src, w_any, dst, attr);
  args.push_back({DNNL_ARG_SRC, As(x, Plain(xs, DataType(g_.tensor(x)))), src});
  args.push_back({DNNL_ARG_WEIGHTS,
                  QuantizedWeights(QuantizedWeightView(op, a, Plain(Padded(ws, rank))), pd.weights_desc(), a, weight_mask),
                  pd.weights_desc()});
  if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, values_.of(op.inputs[2]), bias});
  args.push_back({DNNL_ARG_DST, Define(op.output, dst), dst});
  AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
  return k + 1;
}

// An int8 matmul [rows, K] x [K, N] as a 1x1 convolution over a rows x 1 NHWC image: the same bytes in and out,
// and oneDNN's int8 1x1 convolution (weights packed once) runs 2.5-7x faster than its int8 gemm for a few rows
// (a classifier, a token), and no slower for many (measured on AVX2 with 2 threads: [1, 2048] x [2048, 1000]
// 0.04 ms against 0.15 ms). False, adding nothing, when oneDNN offers only its reference kernel.
bool Builder::RowsAsConv(const BodyOp& op, const Attrs& a) {
  int x = op.inputs[0];
  const auto& xs = g_.Shape(x);
  const std::vector<int64_t> ws = WeightShape(op);
  int64_t k = ws[0], n = ws[1], rows = g_.tensor(x).numel / k;
  memory::data_type in = DataType(g_.tensor(x)), out = DataType(g_.tensor(op.output));
  std::vector<Arg> args;
  primitive_attr attr = QuantizedAttr(a, out, 1, &args);  // per output channel
  Desc src({1, k, rows, 1}, in, memory::format_tag::nhwc), dst({1, n, rows, 1}, out, memory::format_tag::nhwc);
  Desc bias = Plain({n});
  ConvDims c{1, {n, k, 1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}};
  auto pd = ConvPd(c, src, Any(c.weights, memory::data_type::s8), op.inputs.size() == 3 ? &bias : nullptr, dst,
                   attr);
  if (IsReference(pd)) return false;
  Desc transposed({n, k, 1, 1}, memory::data_type::f32, Dims{1, n, n * k, n * k});  // the [K, N] constant as OIHW
  args.push_back({DNNL_ARG_SRC, As(x, Plain(xs, in)), src});
  args.push_back({DNNL_ARG_WEIGHTS, QuantizedWeights(QuantizedWeightView(op, a, transposed), pd.weights_desc(), a, 1),
                  pd.weights_desc()});
  if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, values_.of(op.inputs[2]), bias});
  args.push_back({DNNL_ARG_DST, Define(op.output, Plain(g_.Shape(op.output), out)), dst});
  AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
  return true;
}

}  // namespace dnnl_runtime
}  // namespace byoc
