// elementwise.cc -- element-wise ops: eltwise primitives and binary ops (with a scalar, an outer product, broadcasts).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

#include "builder.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

void Builder::Eltwise(const BodyOp& op, int x, algorithm alg, float alpha, float beta, int output) {
  if (g_.Shape(x) != g_.Shape(output))
    Fail(op.where + ": output shape " + ShapeStr(g_.Shape(output)) + " differs from " + ShapeStr(g_.Shape(x)));
  bool exp_based = alg == algorithm::eltwise_gelu_tanh || alg == algorithm::eltwise_logistic;
  if (exp_based && !OnednnRuns(dnnl::cpu_isa::avx512_core)) {  // byoc's kernel (kernels.h: oneDNN's AVX2 ones gather from tables)
    // in the source's own layout when it is dense (a blocked conv output: no reorder either way), else plain
    Desc desc = values_.DescOf(x);
    if (desc.get_size() != static_cast<size_t>(g_.tensor(x).numel) * sizeof(float)) desc = Plain(g_.Shape(x));
    int from = As(x, desc);
    auto f = alg == algorithm::eltwise_logistic ? exp_activation::Function::kLogistic
                                                : exp_activation::Function::kGeluTanh;
    AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, from, desc}, {DNNL_ARG_DST, Define(output, desc), desc}}, Desc(),
            std::make_shared<ExpActivation>(f, static_cast<int64_t>(desc.get_size() / sizeof(float))));
    return;
  }
  int src = values_.of(x);
  Desc desc = values_[src].desc;
  dnnl::eltwise_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, alg, desc, desc, alpha, beta,
                                           UserScratchpad());
  int dst = Define(output, pd.dst_desc());
  AddStep(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, src, desc}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
          pd.scratchpad_desc());
}

// relax.erf, relax.sin, relax.cos: the byoc PerElement kernel over the source in a dense plain layout.
void Builder::PerElementOp(const BodyOp& op) {
  struct Function {
    float (*f)(float);
    const char* name;
  };
  static const std::map<std::string, Function> functions = {
      {"relax.erf", {[](float x) { return std::erf(x); }, "erf"}},
      {"relax.sin", {[](float x) { return std::sin(x); }, "sin"}},
      {"relax.cos", {[](float x) { return std::cos(x); }, "cos"}}};
  Arity(op, 1);
  SameShape(op, op.inputs[0]);
  auto found = functions.find(op.kernel);
  if (found == functions.end()) Fail(op.where + ": no per-element kernel for " + op.kernel);
  Desc desc = Plain(g_.Shape(op.inputs[0]));
  int from = As(op.inputs[0], desc);
  AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, from, desc}, {DNNL_ARG_DST, Define(op.output, desc), desc}}, Desc(),
          std::make_shared<PerElement>(static_cast<int64_t>(desc.get_size() / sizeof(float)), found->second.f,
                                       found->second.name));
}

// byoc.nan_to {value}: the byoc NanTo kernel over the source in a dense plain layout.
void Builder::NanToOp(const BodyOp& op) {
  Arity(op, 1);
  SameShape(op, op.inputs[0]);
  Desc desc = Plain(g_.Shape(op.inputs[0]));
  int from = As(op.inputs[0], desc);
  float value = static_cast<float>(Attrs(op.attrs, op.where).Float("value"));
  AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, from, desc}, {DNNL_ARG_DST, Define(op.output, desc), desc}}, Desc(),
          std::make_shared<NanTo>(static_cast<int64_t>(desc.get_size() / sizeof(float)), value));
}

// byoc.rotary: x * cos + rotate_half(x) * sin over the last axis (of even width), byoc's Rotary kernel over plain
// layouts, cos and sin broadcast (BroadcastStrides) to x's dims (codegens/dnnl/rotary.py makes the op).
void Builder::RotaryOp(const BodyOp& op) {
  Arity(op, 3);
  SameShape(op, op.inputs[0]);
  const auto& ys = g_.Shape(op.output);
  if (ys.empty() || ys.back() % 2) Fail(op.where + ": a rotary embedding over an axis of odd width");
  Desc out = Plain(ys);
  int x = As(op.inputs[0], out);
  int cos = As(op.inputs[1], Plain(g_.Shape(op.inputs[1])));
  int sin = As(op.inputs[2], Plain(g_.Shape(op.inputs[2])));
  AddStep(dnnl::primitive(),
          {{DNNL_ARG_SRC_0, x, out}, {DNNL_ARG_SRC_1, cos, values_[cos].desc}, {DNNL_ARG_SRC_2, sin, values_[sin].desc},
           {DNNL_ARG_DST, Define(op.output, out), out}},
          Desc(), std::make_shared<Rotary>(ys, BroadcastStrides(g_.Shape(op.inputs[1]), ys),
                                           BroadcastStrides(g_.Shape(op.inputs[2]), ys)));
}

// relax.where: byoc's Select kernel over the mask's bytes and the operands in plain layouts, each broadcast
// (BroadcastStrides) to the output's dims.
void Builder::WhereOp(const BodyOp& op) {
  Arity(op, 3);
  const auto& ys = g_.Shape(op.output);
  int cond = As(op.inputs[0], Plain(g_.Shape(op.inputs[0]), memory::data_type::u8));
  int x = As(op.inputs[1], Plain(g_.Shape(op.inputs[1])));
  int y = As(op.inputs[2], Plain(g_.Shape(op.inputs[2])));
  Desc out = Plain(ys);
  auto strides = [&](int id) { return BroadcastStrides(g_.Shape(id), ys); };
  AddStep(dnnl::primitive(),
          {{DNNL_ARG_SRC_0, cond, values_[cond].desc}, {DNNL_ARG_SRC_1, x, values_[x].desc},
           {DNNL_ARG_SRC_2, y, values_[y].desc}, {DNNL_ARG_DST, Define(op.output, out), out}},
          Desc(), std::make_shared<Select>(ys, strides(op.inputs[0]), strides(op.inputs[1]), strides(op.inputs[2])));
}

// relax.nn.prelu {axis}: x where x >= 0, slope * x elsewhere, with one slope (a leaky relu) or one per index of
// `axis` (a constant): oneDNN's PReLU primitive, the slope seen as [1, .., C, .., 1].
void Builder::Prelu(const BodyOp& op, const Attrs& a) {
  Arity(op, 2);
  int x = op.inputs[0], slope = op.inputs[1];
  SameShape(op, x);
  const std::vector<int64_t>& shape = g_.Shape(x);
  int64_t axis = a.Int("axis"), count = g_.tensor(slope).numel;
  if (axis < 0) axis += static_cast<int64_t>(shape.size());
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size())) Fail(op.where + ": axis out of range");
  if (g_.tensor(slope).kind != Kind::kConst || (count != 1 && count != shape[axis]))
    Fail(op.where + ": the slope must be a constant of 1 or " + std::to_string(shape[axis]) + " values");
  if (count == 1) {  // one slope: a leaky relu (oneDNN's PReLU runs its reference kernel for a single weight)
    Eltwise(op, x, algorithm::eltwise_relu, g_.const_data(slope)[0], 0.0f, op.output);
    return;
  }
  Dims weights(shape.size(), 1);
  weights[axis] = count;
  Desc wdesc = Plain(std::vector<int64_t>(weights.begin(), weights.end()));
  int src = values_.of(x);
  if (src < 0) Fail("tensor " + g_.tensor(x).name + " is read before it is computed");
  // The source's own layout, unless oneDNN has only its reference kernel there: a channel-blocked layout whose
  // channels do not fill the blocks (MTCNN P-net's first conv: 10 channels in nChw8c, 2.3 ms against 0.02 ms).
  // Then channels last, or plain.
  Desc desc = values_[src].desc;
  auto make = [&](const Desc& d) {
    return dnnl::prelu_forward::primitive_desc(Engine(), prop_kind::forward_inference, d, wdesc, d, UserScratchpad());
  };
  auto pd = make(desc);
  for (const Desc& other : {shape.size() >= 3 && shape.size() <= 5 ? ChannelsLast(shape, memory::data_type::f32)
                                                                    : Plain(shape),
                            Plain(shape)}) {
    if (!IsReference(pd)) break;
    desc = other;
    pd = make(desc);
  }
  src = As(x, desc);
  AddStep(dnnl::prelu_forward(pd), {{DNNL_ARG_SRC, src, desc},
                                    {DNNL_ARG_WEIGHTS, values_.ConstView(values_.of(slope), wdesc), wdesc},
                                    {DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()}},
          pd.scratchpad_desc());
}

// A one-input element-wise op (or a power with a scalar constant exponent) as a oneDNN
// eltwise algorithm in `p`; false for any other op.
bool Builder::EltwiseOf(const BodyOp& op, PostOp* p) const {
  p->alpha = p->beta = 0.0f;
  if (op.kernel == "byoc.eltwise") return ActivationOf(op, p);
  if (op.kernel == "relax.nn.relu") p->alg = algorithm::eltwise_relu;
  else if (op.kernel == "relax.sigmoid") p->alg = algorithm::eltwise_logistic;
  else if (op.kernel == "relax.tanh") p->alg = algorithm::eltwise_tanh;
  else if (op.kernel == "relax.nn.gelu") p->alg = algorithm::eltwise_gelu_erf;
  else if (op.kernel == "relax.nn.gelu_tanh") p->alg = algorithm::eltwise_gelu_tanh;
  else if (op.kernel == "relax.nn.silu") {
    p->alg = algorithm::eltwise_swish;
    p->alpha = 1.0f;
  }
  else if (op.kernel == "relax.sqrt") p->alg = algorithm::eltwise_sqrt;
  else if (op.kernel == "relax.exp") p->alg = algorithm::eltwise_exp;
  else if (op.kernel == "relax.negative") {  // rotary embeddings' rotate_half: -1 * x + 0
    p->alg = algorithm::eltwise_linear;
    p->alpha = -1.0f;
  }
  else if (op.kernel == "relax.nn.leakyrelu") {
    p->alg = algorithm::eltwise_relu;
    p->alpha = static_cast<float>(Attrs(op.attrs, op.where).Float("alpha"));
  } else if (op.kernel == "relax.power") {  // x ** c for a scalar constant c: alpha * x^beta
    bool x_first = false;
    float c = op.inputs.size() == 2 ? ScalarOperand(op, op.inputs[0], &x_first) : NAN;
    if (std::isnan(c) || !x_first || op.inputs[0] == op.inputs[1]) return false;
    p->alg = algorithm::eltwise_pow;
    p->alpha = 1.0f;
    p->beta = c;
  } else if (op.kernel == "relax.clip") {
    Attrs a(op.attrs, op.where);
    p->alpha = static_cast<float>(a.Float("min"));
    p->beta = static_cast<float>(a.Float("max"));
    p->alg = algorithm::eltwise_clip_v2;
  } else {
    return false;
  }
  return true;
}

// A byoc.eltwise op: an activation the dnnl codegen found spelled as several ops (codegens/dnnl/activations.py),
// as oneDNN's eltwise algorithm of that name with its alpha and beta.
bool Builder::ActivationOf(const BodyOp& op, PostOp* p) const {
  static const std::map<std::string, algorithm> table = {{"gelu_erf", algorithm::eltwise_gelu_erf},
                                                         {"gelu_tanh", algorithm::eltwise_gelu_tanh},
                                                         {"swish", algorithm::eltwise_swish},
                                                         {"hardswish", algorithm::eltwise_hardswish},
                                                         {"hardsigmoid", algorithm::eltwise_hardsigmoid},
                                                         {"linear", algorithm::eltwise_linear}};
  Attrs a(op.attrs, op.where);
  const algorithm* alg = Find(table, a.Str("algorithm"));
  if (alg == nullptr) Fail(op.where + ": no oneDNN eltwise algorithm " + a.Str("algorithm"));
  p->alg = *alg;
  p->alpha = static_cast<float>(a.Float("alpha"));
  p->beta = static_cast<float>(a.Float("beta"));
  return true;
}

// The algorithm `table` maps `kernel` to, or nullptr.
const algorithm* Builder::Find(const std::map<std::string, algorithm>& table, const std::string& kernel) {
  auto it = table.find(kernel);
  return it == table.end() ? nullptr : &it->second;
}

const algorithm* Builder::BinaryAlgorithm(const std::string& kernel) {
  static const std::map<std::string, algorithm> table = {{"relax.add", algorithm::binary_add},
                                                         {"relax.multiply", algorithm::binary_mul},
                                                         {"relax.subtract", algorithm::binary_sub},
                                                         {"relax.divide", algorithm::binary_div},
                                                         {"relax.maximum", algorithm::binary_max},
                                                         {"relax.minimum", algorithm::binary_min}};
  return Find(table, kernel);
}

bool Builder::Broadcasts(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return false;
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t d = from[from.size() - 1 - i];
    if (d != 1 && d != to[to.size() - 1 - i]) return false;
  }
  return true;
}

void Builder::Binary(const BodyOp& op, algorithm alg, bool commutes) {
  Arity(op, 2);
  if (WithScalar(op) || OuterProduct(op)) return;
  const auto& ys = g_.Shape(op.output);
  int full = op.inputs[0], other = op.inputs[1];
  if (g_.Shape(full) != ys && commutes) std::swap(full, other);
  if (g_.Shape(full) != ys || !Broadcasts(g_.Shape(other), ys))
    Fail(op.where + ": the first operand must have the output shape " + ShapeStr(ys) + " (oneDNN broadcasts the second only)");
  Desc src0 = values_.DescOf(full);
  if (g_.tensor(full).kind == Kind::kConst) src0 = Plain(ys);
  size_t rank = std::max<size_t>(ys.size(), 1);
  Desc src1 = g_.Shape(other) == ys ? src0 : Plain(Padded(g_.Shape(other), rank));
  int b = -1;
  // A per-channel constant over a channel-blocked tensor (nChw8c/16c) in the same blocking: with
  // a plain one oneDNN runs its reference kernel (measured on the light zoo's DenseNet-121:
  // 15 such ops 538 ms of its 620 ms).
  auto blocks = src0.get_inner_blks();
  auto idxs = src0.get_inner_idxs();
  if (src1 != src0 && g_.tensor(other).kind == Kind::kConst && rank == 4 && blocks.size() == 1 && idxs[0] == 1 &&
      (blocks[0] == 8 || blocks[0] == 16) && Padded(g_.Shape(other), 4) == Dims{1, ys[1], 1, 1}) {
    src1 = Desc(Dims{1, ys[1], 1, 1}, memory::data_type::f32,
                blocks[0] == 8 ? memory::format_tag::aBcd8b : memory::format_tag::aBcd16b);
    b = values_.ReorderConst(values_.ConstView(values_.of(other), Plain(Dims{1, ys[1], 1, 1})), src1);
  }
  dnnl::binary::primitive_desc pd(Engine(), alg, src0, src1, src0, UserScratchpad());
  if (b < 0 && IsReference(pd) && BinaryWithoutReference(alg, full, other, op.output)) return;
  int a = As(full, src0);
  if (b < 0) b = As(other, g_.Shape(other) == ys ? src1 : Plain(g_.Shape(other)));
  int dst = Define(op.output, pd.dst_desc());
  AddStep(dnnl::binary(pd), {{DNNL_ARG_SRC_0, a, src0}, {DNNL_ARG_SRC_1, b, src1}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
          pd.scratchpad_desc());
}

// oneDNN runs a binary op on its scalar reference kernel (ref:any) when it has no jit kernel for the
// operands' layouts or broadcast: measured 16x onnxruntime for a squeeze-and-excitation multiply over a
// channel-blocked conv output by a plain [1, C, 1, 1] scale, 40-56x for Swin's window-mask add, which
// broadcasts a middle dim. The same op in a form that has one, cheapest first: the second operand in
// the first one's blocked layout (a reorder of the small operand); both plain with the dims merged
// where they broadcast alike ([1, nW, H, T, T] + [1, nW, 1, T, T] is [nW, H, T*T] + [nW, 1, T*T]);
// the first one in channels-last. False, having added nothing, when every form is a reference kernel.
bool Builder::BinaryWithoutReference(algorithm alg, int full, int other, int output) {
  const Dims ys = DimsOf(g_.Shape(output));
  const Dims os = Padded(g_.Shape(other), ys.size());
  const Desc own = values_.DescOf(full);  // a copy: other_as and Define grow the value table under a reference
  auto fast = [&](const Desc& d0, const Desc& d1) -> std::optional<dnnl::binary::primitive_desc> {
    try {
      dnnl::binary::primitive_desc pd(Engine(), alg, d0, d1, d0, UserScratchpad());
      if (!IsReference(pd)) return pd;
    } catch (const dnnl::error&) {  // a layout this shape cannot take
    }
    return std::nullopt;
  };
  // The small operand, of dims `os`, in layout `desc`: a view of its plain bytes, reordered.
  auto other_as = [&](const Desc& desc) {
    int plain = values_.View(As(other, Plain(g_.Shape(other))), Plain(os));
    if (desc == Plain(os)) return plain;
    if (values_.StorageOf(plain) == Storage::kConst) return values_.ReorderConst(plain, desc);
    int target = NewTemp(desc);
    plan_.AddReorder(plain, target);
    return target;
  };
  auto emit = [&](const dnnl::binary::primitive_desc& pd, int a, const Desc& d0, int b, const Desc& d1, int dst,
                  const Desc& dd) {
    AddStep(dnnl::binary(pd), {{DNNL_ARG_SRC_0, a, d0}, {DNNL_ARG_SRC_1, b, d1}, {DNNL_ARG_DST, dst, dd}},
            pd.scratchpad_desc());
  };
  memory::format_tag tag = TagOf(own);
  if (tag != memory::format_tag::undef && own != Plain(ys)) {
    Desc d1(os, memory::data_type::f32, tag);
    if (auto pd = fast(own, d1)) {
      int b = other_as(d1);
      emit(*pd, As(full, own), own, b, d1, Define(output, own), own);
      return true;
    }
  }
  Dims merged0, merged1;  // dims of size 1 in the output dropped, runs that broadcast alike merged
  int run = -1;           // whether the run being merged broadcasts (1) or not (0)
  for (size_t i = 0; i < ys.size(); ++i) {
    if (ys[i] == 1) continue;
    int broadcasts = os[i] == 1 ? 1 : 0;
    if (broadcasts != run) {
      merged0.push_back(1);
      merged1.push_back(1);
      run = broadcasts;
    }
    merged0.back() *= ys[i];
    if (!broadcasts) merged1.back() *= ys[i];
  }
  if (merged0.empty()) merged0 = merged1 = {1};
  if (auto pd = fast(Plain(merged0), Plain(merged1))) {
    int a = As(full, Plain(ys)), b = As(other, Plain(g_.Shape(other)));
    emit(*pd, a, Plain(merged0), b, Plain(merged1), Define(output, Plain(ys)), Plain(merged0));
    return true;
  }
  if (ys.size() >= 3) {
    Desc last = ChannelsLast(ys, memory::data_type::f32);
    if (auto pd = fast(last, Plain(os))) {
      emit(*pd, As(full, last), last, As(other, Plain(g_.Shape(other))), Plain(os), Define(output, last), last);
      return true;
    }
  }
  return false;
}

// x + c, x - c, c - x, x * c and x / c with a scalar constant c as one eltwise_linear, which
// reads any layout with a jit kernel: oneDNN's binary broadcasting a plain scalar over a
// blocked tensor is its reference kernel (measured: 1.6-1.8 ms each for 18 k elements in
// PP-OCR cls's hard-swish, 75% of the model's time); and c / x (ONNX Reciprocal) as
// eltwise_pow, c * x^-1. False, having added nothing, for any other operands.
bool Builder::WithScalar(const BodyOp& op) {
  for (int x : op.inputs) {
    bool x_first = false;
    float c = ScalarOperand(op, x, &x_first), alpha, beta;
    if (g_.Shape(x) != g_.Shape(op.output) || values_.of(x) < 0) continue;
    if (LinearOf(op.kernel, c, x_first, &alpha, &beta)) {
      Eltwise(op, x, algorithm::eltwise_linear, alpha, beta, op.output);
      return true;
    }
    if (op.kernel == "relax.divide" && !x_first && !std::isnan(c)) {
      Eltwise(op, x, algorithm::eltwise_pow, c, -1.0f, op.output);
      return true;
    }
  }
  return false;
}

// x * y where one is [..., M, 1] and the other [..., 1, N] over the same leading dims (both
// broadcast, which oneDNN's binary cannot): each output is one product, a matmul with K = 1.
// False, having added nothing, for other shapes.
bool Builder::OuterProduct(const BodyOp& op) {
  const auto& ys = g_.Shape(op.output);
  size_t rank = ys.size();
  if (op.kernel != "relax.multiply" || rank < 2 || g_.Shape(op.inputs[0]) == ys || g_.Shape(op.inputs[1]) == ys)
    return false;
  int column = op.inputs[0], row = op.inputs[1];
  if (Padded(g_.Shape(column), rank)[rank - 1] != 1) std::swap(column, row);
  Dims cs = Padded(g_.Shape(column), rank), rs = Padded(g_.Shape(row), rank);
  if (cs[rank - 1] != 1 || rs[rank - 2] != 1 || cs[rank - 2] != ys[rank - 2] || rs[rank - 1] != ys[rank - 1])
    return false;
  for (size_t i = 0; i + 2 < rank; ++i)
    if (cs[i] != ys[i] || rs[i] != ys[i]) return false;
  dnnl::matmul::primitive_desc pd(Engine(), Plain(cs), Plain(rs), Plain(DimsOf(ys)), UserScratchpad());
  AddStep(dnnl::matmul(pd), {{DNNL_ARG_SRC, As(column, Plain(g_.Shape(column))), Plain(cs)},
                             {DNNL_ARG_WEIGHTS, As(row, Plain(g_.Shape(row))), Plain(rs)},
                             {DNNL_ARG_DST, Define(op.output, Plain(ys)), Plain(DimsOf(ys))}},
          pd.scratchpad_desc());
  return true;
}

}  // namespace dnnl_runtime
}  // namespace byoc
