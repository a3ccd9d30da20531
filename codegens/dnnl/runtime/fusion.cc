// fusion.cc -- ops folded into a primitive: post-op chains, and the activations spelled as several ops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "program.h"

namespace byoc {
namespace dnnl_runtime {

// A scalar constant operand of `op` other than `x`, or NaN.
float Program::ScalarOperand(const BodyOp& op, int x, bool* x_first) const {
  if (op.inputs.size() != 2) return NAN;
  int other = op.inputs[0] == x ? op.inputs[1] : op.inputs[1] == x ? op.inputs[0] : -1;
  if (other < 0 || g_.tensor(other).kind != Kind::kConst || g_.tensor(other).numel != 1) return NAN;
  *x_first = op.inputs[0] == x;
  return g_.const_data(other)[0];
}

// `x op c` (or `c op x` when !x_first) with a scalar c as alpha * x + beta, for add, subtract,
// multiply and x / c (as x * (1/c)); false for anything else, or when c is NaN (no scalar).
bool Program::LinearOf(const std::string& kernel, float c, bool x_first, float* alpha, float* beta) {
  if (std::isnan(c)) return false;
  if (kernel == "relax.multiply") {
    *alpha = c, *beta = 0.0f;
  } else if (kernel == "relax.divide" && x_first) {
    *alpha = 1.0f / c, *beta = 0.0f;
  } else if (kernel == "relax.add") {
    *alpha = 1.0f, *beta = c;
  } else if (kernel == "relax.subtract") {
    *alpha = x_first ? 1.0f : -1.0f, *beta = x_first ? -c : c;
  } else {
    return false;
  }
  return true;
}

// x*0.5*(1+erf(x/sqrt(2))) spelled as five ops (the ONNX export of GELU): length of the match at j, or 0.
size_t Program::GeluAt(size_t j, int x) const {
  const std::vector<BodyOp>& ops = g_.ops();
  if (j + 5 > ops.size() || ops[j + 4].node != ops[j].node) return 0;
  const BodyOp &div = ops[j], &erf = ops[j + 1], &add = ops[j + 2], &mul = ops[j + 3], &half = ops[j + 4];
  bool first = false;
  if (div.kernel != "relax.divide" || !Near(ScalarOperand(div, x, &first), std::sqrt(2.0)) || !first) return 0;
  if (erf.kernel != "relax.erf" || erf.inputs != std::vector<int>{div.output}) return 0;
  if (add.kernel != "relax.add" || !Near(ScalarOperand(add, erf.output, &first), 1.0)) return 0;
  if (mul.kernel != "relax.multiply" || mul.inputs.size() != 2) return 0;
  if (!((mul.inputs[0] == x && mul.inputs[1] == add.output) || (mul.inputs[1] == x && mul.inputs[0] == add.output)))
    return 0;
  if (half.kernel != "relax.multiply" || !Near(ScalarOperand(half, mul.output, &first), 0.5)) return 0;
  for (int t : {div.output, erf.output, add.output, mul.output})
    if (g_.uses(t) != 1) return 0;
  return 5;
}

// The tanh form of GELU, 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), as the ops j.. spell it, in any
// order and grouping an exporter writes it (Keras/tf2onnx: c*x*x*x; PyTorch: pow(x, 3); x*0.5 first or
// last) and across rule matches: the length of the shortest window of element-wise ops on x and scalar
// constants whose intermediates nothing else reads and whose last result equals GELU's on sample points,
// or 0. Sets *x_reads. (Magika: nine primitives twice per run, 0.45 ms; one eltwise_gelu_tanh.)
size_t Program::GeluTanhAt(size_t j, int x, int* x_reads) const {
  static const std::map<std::string, int> arity = {{"relax.multiply", 2}, {"relax.add", 2}, {"relax.subtract", 2},
                                                   {"relax.divide", 2}, {"relax.power", 2}, {"relax.tanh", 1}};
  const std::vector<BodyOp>& ops = g_.ops();
  static const double samples[] = {-4.0, -1.7, -0.6, -0.05, 0.3, 0.9, 2.1, 3.6};
  std::map<int, std::vector<double>> value;  // tensor -> its value at each sample
  value[x] = std::vector<double>(std::begin(samples), std::end(samples));
  std::map<int, int> reads;  // tensor -> reads inside the window
  bool has_tanh = false;
  for (size_t n = 1; n <= 12 && j + n <= ops.size(); ++n) {
    const BodyOp& op = ops[j + n - 1];
    auto it = arity.find(op.kernel);
    if (it == arity.end() || static_cast<int>(op.inputs.size()) != it->second || g_.Shape(op.output) != g_.Shape(x))
      return 0;
    std::vector<const std::vector<double>*> args;
    std::vector<double> scalars(op.inputs.size());
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      int t = op.inputs[i];
      const TensorInfo& info = g_.tensor(t);
      if (value.count(t)) {
        args.push_back(&value[t]);
        ++reads[t];
      } else if (info.kind == Kind::kConst && info.numel == 1) {
        scalars[i] = g_.const_data(t)[0];
        args.push_back(nullptr);
      } else {
        return 0;  // reads something computed outside the window
      }
    }
    has_tanh |= op.kernel == "relax.tanh";
    std::vector<double> out(std::size(samples));
    for (size_t s = 0; s < out.size(); ++s) {
      double a = args[0] ? (*args[0])[s] : scalars[0];
      double b = args.size() > 1 ? (args[1] ? (*args[1])[s] : scalars[1]) : 0.0;
      out[s] = op.kernel == "relax.multiply" ? a * b : op.kernel == "relax.add" ? a + b
               : op.kernel == "relax.subtract" ? a - b : op.kernel == "relax.divide" ? a / b
               : op.kernel == "relax.power" ? std::pow(a, b) : std::tanh(a);
    }
    value[op.output] = out;
    bool gelu = has_tanh;
    for (size_t s = 0; gelu && s < out.size(); ++s) {
      double t = samples[s], want = 0.5 * t * (1.0 + std::tanh(0.7978845608028654 * (t + 0.044715 * t * t * t)));
      gelu = std::fabs(out[s] - want) <= 1e-5 * std::fabs(want) + 1e-6;
    }
    if (!gelu) continue;
    for (const auto& [t, count] : reads)  // every intermediate is read in the window only
      if (t != x && g_.uses(t) != count) return 0;
    *x_reads = reads[x];
    return n;
  }
  return 0;
}

// An activation that TVM imports as several ops, starting at op j on tensor x and
// inside one node (the tanh form of GELU: across nodes too): GELU (erf form), swish x*sigmoid(x), hard-sigmoid
// clip(a*x + b, 0, 1), hard-swish x*clip(a*x + b, 0, 1) or x*clip(x + 3, 0, 6)/6.
// Sets `p` and `*x_reads` (how many of its ops read x, so a caller folding it
// into a producer knows x has no other reader); returns its length, or 0.
size_t Program::ActivationAt(size_t j, int x, PostOp* p, int* x_reads) const {
  const std::vector<BodyOp>& ops = g_.ops();
  *p = PostOp();
  auto at = [&](size_t i, const char* kernel) {
    return j + i < ops.size() && ops[j + i].node == ops[j].node && ops[j + i].kernel == kernel;
  };
  auto once = [&](size_t i) { return g_.uses(ops[j + i].output) == 1; };
  auto reads_x_and = [&](size_t i, int t) {
    const std::vector<int>& in = ops[j + i].inputs;
    return in.size() == 2 && ((in[0] == x && in[1] == t) || (in[0] == t && in[1] == x));
  };
  auto only = [&](size_t i, int t) { return ops[j + i].inputs == std::vector<int>{t}; };
  auto clip = [&](size_t i, double lo, double hi) {
    Attrs a(ops[j + i].attrs, ops[j + i].where);
    return Near(static_cast<float>(a.Float("min")), lo) && Near(static_cast<float>(a.Float("max")), hi);
  };
  auto done = [&](size_t n, algorithm alg, float alpha, float beta, int reads) -> size_t {
    if (g_.Shape(ops[j + n - 1].output) != g_.Shape(x)) return 0;  // a scalar of higher rank broadcast x
    p->alg = alg;
    p->alpha = alpha;
    p->beta = beta;
    *x_reads = reads;
    return n;
  };
  bool first = false;
  if (size_t n = GeluAt(j, x)) return done(n, algorithm::eltwise_gelu_erf, 0.0f, 0.0f, 2);
  int gelu_reads = 0;
  if (size_t n = GeluTanhAt(j, x, &gelu_reads)) return done(n, algorithm::eltwise_gelu_tanh, 0.0f, 0.0f, gelu_reads);
  if (at(0, "relax.sigmoid") && only(0, x) && once(0) && at(1, "relax.multiply") && reads_x_and(1, ops[j].output))
    return done(2, algorithm::eltwise_swish, 1.0f, 0.0f, 2);
  if (at(0, "relax.add") && Near(ScalarOperand(ops[j], x, &first), 3.0) && once(0) && at(1, "relax.clip") &&
      only(1, ops[j].output) && clip(1, 0.0, 6.0) && once(1) && at(2, "relax.divide") &&
      Near(ScalarOperand(ops[j + 2], ops[j + 1].output, &first), 6.0) && first && once(2) &&
      at(3, "relax.multiply") && reads_x_and(3, ops[j + 2].output))
    return done(4, algorithm::eltwise_hardswish, 1.0f / 6.0f, 0.5f, 2);
  float alpha = at(0, "relax.multiply") ? ScalarOperand(ops[j], x, &first) : NAN;
  float beta = at(1, "relax.add") && once(0) ? ScalarOperand(ops[j + 1], ops[j].output, &first) : NAN;
  if (std::isnan(alpha) || std::isnan(beta) || !once(1) || !at(2, "relax.clip") || !only(2, ops[j + 1].output) ||
      !clip(2, 0.0, 1.0))
    return 0;
  if (once(2) && at(3, "relax.multiply") && reads_x_and(3, ops[j + 2].output))
    return done(4, algorithm::eltwise_hardswish, alpha, beta, 2);
  return done(3, algorithm::eltwise_hardsigmoid, alpha, beta, 1);
}

// The post-ops with each full-shape binary operand read in layout `full` (the
// primitive's dst layout, once known), broadcast ones plain and rank-padded.
post_ops Program::BuildPostOps(const Fused& f, const std::vector<int64_t>& shape, const Desc* full) const {
  post_ops ops;
  for (const PostOp& p : f.post) {
    if (p.tensor < 0) ops.append_eltwise(p.alg, p.alpha, p.beta);
    else ops.append_binary(p.alg, BinaryDesc(p.tensor, shape, full));
  }
  return ops;
}

// How a binary post-op reads tensor `id`, in its own data type: of the full `shape`, in layout `full` (or its
// own layout); broadcast, plain and seen with `shape`'s rank.
Desc Program::BinaryDesc(int id, const std::vector<int64_t>& shape, const Desc* full) const {
  const TensorInfo& t = g_.tensor(id);
  if (t.shape == shape && !full) return values_[value_of_[id]].desc;
  if (t.shape == shape) return DataType(t) == full->get_data_type() ? *full : Retyped(*full, t);
  return Plain(Padded(t.shape, std::max<size_t>(shape.size(), 1)), DataType(t));
}

void Program::AddBinaryArgs(const Fused& f, std::vector<Arg>* args, const std::vector<int64_t>& shape,
                            const Desc& dst) {
  for (size_t i = 0; i < f.post.size(); ++i) {
    int t = f.post[i].tensor;
    if (t < 0) continue;
    Desc desc = BinaryDesc(t, shape, &dst);
    int v = g_.Shape(t) == shape ? As(t, desc) : As(t, Plain(g_.Shape(t), DataType(g_.tensor(t))));
    args->push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1, v, desc});
  }
}

}  // namespace dnnl_runtime
}  // namespace byoc
