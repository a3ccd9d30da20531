// attention.cc -- scaled dot-product attention whose scores outgrow the caches, a block of query rows at a time.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "builder.h"

namespace byoc {
namespace dnnl_runtime {

// The bytes of a core's L2 cache (Linux's sysfs; 1 MB where it does not say): a block of scores this size stays
// in the caches of the team computing it between the matmul that writes it, the softmax and the matmul that
// reads it.
static int64_t L2Bytes() {
  static const int64_t bytes = [] {
    for (int index = 0; index < 8; ++index) {
      std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
      std::ifstream level(dir + "level"), size(dir + "size");
      int n = 0;
      std::string text;
      if (!(level >> n) || n != 2 || !(size >> text) || text.empty()) continue;
      int64_t value = std::atoll(text.c_str());
      char unit = text.back();
      return value * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1);
    }
    return int64_t{1} << 20;
  }();
  return bytes;
}

// At the matmul k: softmax(Q K^T [post-ops]) V, where the scores (Q K^T with the element-wise ops after it: a
// scale, a mask, a position bias) and the probabilities are read once each, over the last axis, with no
// broadcast between the operands, and the scores fill at least 16 blocks of an L2 cache's size. Whisper's
// encoder (6 heads x 1500 x 1500 frames: 54 MB of scores) wrote its scores to memory, read them back for the
// softmax, wrote the probabilities and read them again for the second matmul: the first matmul, bound by those
// writes, took twice the second's time for the same products; blocked, the encoder took 125 ms, not 160
// (AVX-512 VNNI, 2 MB L2; blocks of 1 MB: 141 ms, 4 MB: 129 ms). The scores' ops and the
// softmax are then not compiled here: BlockedAttention computes them with the second matmul, whose operand V
// may be made by the ops in between (a transpose). Returns the index after the softmax, or 0 (nothing
// deferred).
size_t Builder::DeferAttentionAt(size_t k) {
  const std::vector<BodyOp>& ops = g_.ops();
  // Post-ops keep the product's shape, so the product alone says whether the scores are big enough: every
  // other matmul returns here, before its post-ops are looked for.
  if (ops[k].kernel != "relax.matmul" || ops[k].inputs.size() != 2) return 0;
  const TensorInfo& product = g_.tensor(ops[k].output);
  size_t rank = product.shape.size();
  if (rank < 2 || DataType(product) != memory::data_type::f32 || product.numel * 4 < 16 * L2Bytes()) return 0;
  Fused scores = FusePostOps(k, [](int) { return false; }, Later::kAll);
  if (scores.next >= ops.size()) return 0;
  const BodyOp& softmax = ops[scores.next];
  if (softmax.kernel != "relax.nn.softmax" || softmax.inputs != std::vector<int>{scores.last} ||
      g_.uses(scores.last) != 1 || g_.uses(softmax.output) != 1 ||
      NormAxis(Attrs(softmax.attrs, softmax.where).Int("axis"), rank, softmax.where) != static_cast<int64_t>(rank - 1))
    return 0;
  size_t j = scores.next + 1;
  while (j < ops.size() && std::find(ops[j].inputs.begin(), ops[j].inputs.end(), softmax.output) == ops[j].inputs.end())
    ++j;
  if (j == ops.size() || ops[j].kernel != "relax.matmul" || ops[j].inputs.size() != 2 ||
      ops[j].inputs[0] != softmax.output || (j + 1 < ops.size() && ops[j + 1].node == ops[j].node))
    return 0;  // the second matmul with post-ops of its own node is left to Matmul
  for (int id : {ops[k].inputs[0], ops[k].inputs[1], ops[j].inputs[1], ops[j].output})
    if (g_.Shape(id).size() != rank) return 0;  // operands broadcast against each other
  // A post-op operand (of at most the scores' rank: FusePostOps took it as broadcasting to them) is read a block
  // of rows at a time, or whole, as float32.
  for (const PostOp& p : scores.post)
    if (p.tensor >= 0 && DataType(g_.tensor(p.tensor)) != memory::data_type::f32) return 0;
  deferred_attention_[j] = {k, scores};
  return scores.next + 1;
}

// The attention DeferAttentionAt found, at its second matmul j: for each block of query rows, the scores'
// matmul with their post-ops into a scratch block the size of a cache, the softmax in place, and the second
// matmul into those rows of the output.
void Builder::BlockedAttention(size_t j) {
  const std::vector<BodyOp>& ops = g_.ops();
  const DeferredAttention& d = deferred_attention_.at(j);
  int q = ops[d.scores_matmul].inputs[0], kt = ops[d.scores_matmul].inputs[1], v = ops[j].inputs[1];
  int o = ops[j].output;
  const std::vector<int64_t>& ss = g_.Shape(d.scores.last);
  size_t rank = ss.size(), rows_axis = rank - 2;
  int64_t m = ss[rows_axis], t = ss[rank - 1], batch = 1;
  for (size_t i = 0; i < rows_axis; ++i) batch *= ss[i];
  int64_t block = std::clamp<int64_t>(L2Bytes() / (batch * t * 4), 1, m);
  if (block >= 16) block -= block % 16;
  // Each operand as a matmul reads it: a strided view with contiguous rows as it is (heads split off a Linear's
  // rows), else plain; the output through the strides that make a transpose after it plain.
  auto read = [&](int id) {
    const Desc& view = values_.DescOf(id);
    return IsStrided(view) && view.get_strides().back() == 1 ? view : Plain(g_.Shape(id));
  };
  Desc q_desc = read(q), kt_desc = read(kt), v_desc = read(v);
  Desc o_desc = TransposedDst(o, DimsOf(g_.Shape(o)));
  if (o_desc.get_strides().back() != 1) o_desc = Plain(g_.Shape(o));
  int q_value = As(q, q_desc), kt_value = As(kt, kt_desc), v_value = As(v, v_desc), o_value = Define(o, o_desc);
  std::vector<int> operands;  // each binary post-op's operand, plain and seen with the scores' rank
  for (const PostOp& p : d.scores.post)
    operands.push_back(p.tensor < 0 ? -1 : values_.View(As(p.tensor, Plain(g_.Shape(p.tensor))), Plain(Padded(g_.Shape(p.tensor), rank))));
  auto rows = [&](const Desc& full, int64_t n) {  // the first n rows of `full`, in its strides
    Dims dims = full.get_dims();
    dims[rows_axis] = n;
    return Strided(dims, full.get_data_type(), full.get_strides());
  };
  auto row_bytes = [&](const Desc& full) { return static_cast<size_t>(full.get_strides()[rows_axis]) * 4; };
  Dims block_dims(ss.begin(), ss.end());
  block_dims[rows_axis] = block;
  int scratch = NewTemp(Plain(block_dims));
  for (int64_t r0 = 0; r0 < m; r0 += block) {
    int64_t n = std::min(block, m - r0);
    Dims dims = block_dims;
    dims[rows_axis] = n;
    Desc s_desc = Plain(dims);
    int s = n == block ? scratch : values_.View(scratch, s_desc);
    post_ops post;
    std::vector<Arg> args = {{DNNL_ARG_SRC, q_value, rows(q_desc, n), r0 * row_bytes(q_desc)},
                             {DNNL_ARG_WEIGHTS, kt_value, kt_desc},
                             {DNNL_ARG_DST, s, s_desc}};
    for (size_t i = 0; i < d.scores.post.size(); ++i) {
      const PostOp& p = d.scores.post[i];
      if (p.tensor < 0) {
        post.append_eltwise(p.alg, p.alpha, p.beta);
        continue;
      }
      const Desc& full = values_[operands[i]].desc;
      bool per_row = full.get_dims()[rows_axis] == m && m > 1;  // else one row for all (a padding mask)
      Desc desc = per_row ? rows(full, n) : full;
      post.append_binary(p.alg, desc);
      args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1, operands[i], desc,
                      per_row ? r0 * row_bytes(full) : 0});
    }
    dnnl::matmul::primitive_desc scores_pd(Engine(), rows(q_desc, n), kt_desc, s_desc, UserScratchpad(post));
    AddStep(dnnl::matmul(scores_pd), std::move(args), scores_pd.scratchpad_desc());
    dnnl::softmax_forward::primitive_desc softmax_pd(Engine(), prop_kind::forward_inference, algorithm::softmax_accurate,
                                                     s_desc, s_desc, static_cast<int>(rank - 1), UserScratchpad());
    AddStep(dnnl::softmax_forward(softmax_pd), {{DNNL_ARG_SRC, s, s_desc}, {DNNL_ARG_DST, s, s_desc}},
            softmax_pd.scratchpad_desc());
    dnnl::matmul::primitive_desc context_pd(Engine(), s_desc, v_desc, rows(o_desc, n), UserScratchpad());
    AddStep(dnnl::matmul(context_pd),
            {{DNNL_ARG_SRC, s, s_desc}, {DNNL_ARG_WEIGHTS, v_value, v_desc},
             {DNNL_ARG_DST, o_value, rows(o_desc, n), r0 * row_bytes(o_desc)}},
            context_pd.scratchpad_desc());
  }
}

}  // namespace dnnl_runtime
}  // namespace byoc
