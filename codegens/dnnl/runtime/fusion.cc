// fusion.cc -- ops folded into a primitive: scalar operands as linear post-ops, and post-op chains.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "builder.h"

namespace byoc {
namespace dnnl_runtime {

// A scalar constant operand of `op` other than `x`, or NaN.
float Builder::ScalarOperand(const BodyOp& op, int x, bool* x_first) const {
  if (op.inputs.size() != 2) return NAN;
  int other = op.inputs[0] == x ? op.inputs[1] : op.inputs[1] == x ? op.inputs[0] : -1;
  if (other < 0 || g_.tensor(other).kind != Kind::kConst || g_.tensor(other).numel != 1) return NAN;
  *x_first = op.inputs[0] == x;
  return g_.const_data(other)[0];
}

// `x op c` (or `c op x` when !x_first) with a scalar c as alpha * x + beta, for add, subtract,
// multiply and x / c (as x * (1/c)); false for anything else, or when c is NaN (no scalar).
bool Builder::LinearOf(const std::string& kernel, float c, bool x_first, float* alpha, float* beta) {
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

// The post-ops with each full-shape binary operand read in layout `full` (the
// primitive's dst layout, once known), broadcast ones plain and rank-padded.
post_ops Builder::BuildPostOps(const Fused& f, const std::vector<int64_t>& shape, const Desc* full) const {
  post_ops ops;
  for (const PostOp& p : f.post) {
    if (p.tensor < 0) ops.append_eltwise(p.alg, p.alpha, p.beta);
    else ops.append_binary(p.alg, BinaryDesc(p.tensor, shape, full));
  }
  return ops;
}

// Whether tensor `id` holds as many values as `shape` in other dims: a full-shape operand of a matmul computed
// as rows (Builder::Matmul), [.., M, N] read as [rows, N].
bool Builder::RowsOf(int id, const std::vector<int64_t>& shape) const {
  const TensorInfo& t = g_.tensor(id);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  return t.shape != shape && t.numel == count;
}

// How a binary post-op reads tensor `id`, in its own data type: of the full `shape`, in layout `full` (or its
// own layout); as rows, plain; broadcast, plain and seen with `shape`'s rank.
Desc Builder::BinaryDesc(int id, const std::vector<int64_t>& shape, const Desc* full) const {
  const TensorInfo& t = g_.tensor(id);
  if (t.shape == shape && !full) return values_.DescOf(id);
  if (t.shape == shape) return DataType(t) == full->get_data_type() ? *full : Retyped(*full, t);
  if (RowsOf(id, shape)) return Plain(shape, DataType(t));
  return Plain(Padded(t.shape, std::max<size_t>(shape.size(), 1)), DataType(t));
}

void Builder::AddBinaryArgs(const Fused& f, std::vector<Arg>* args, const std::vector<int64_t>& shape,
                            const Desc& dst) {
  for (size_t i = 0; i < f.post.size(); ++i) {
    int t = f.post[i].tensor;
    if (t < 0) continue;
    Desc desc = BinaryDesc(t, shape, &dst);
    int v = g_.Shape(t) == shape ? As(t, desc) : As(t, Plain(g_.Shape(t), DataType(g_.tensor(t))));
    if (RowsOf(t, shape)) v = values_.View(v, desc);
    args->push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1, v, desc});
  }
}

}  // namespace dnnl_runtime
}  // namespace byoc
