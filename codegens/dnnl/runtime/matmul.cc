// matmul.cc -- matmuls; one-row matmuls by constant weights that read the same row run side by side; a few rows by
// a constant weight as byoc's GEMV (gemv.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <sstream>

#include "builder.h"
#include "gemv.h"
#include "kernels.h"

namespace byoc {
namespace dnnl_runtime {

bool ByocGemvRuns() {
  static const bool avx512 = CpuHasAvx512() && OnednnRuns(dnnl::cpu_isa::avx512_core);
  return avx512;
}

namespace {

// How gemv.h reads a float32 weight [K, N] held in layout `d`: plain rows, or oneDNN's blocks of nb columns (and of
// kb rows inside them, the rows of a block nb floats apart); nothing for any other layout, or N not a multiple of 16.
std::optional<gemv::Layout> GemvLayout(const Desc& d) {
  const Dims dims = d.get_dims();
  if (d.get_data_type() != memory::data_type::f32 || dims.size() != 2 || dims[1] % 16 ||
      d.get_format_kind() != memory::format_kind::blocked)
    return std::nullopt;
  const int64_t k = dims[0], n = dims[1];
  const Dims strides = d.get_strides(), blocks = d.get_inner_blks(), which = d.get_inner_idxs();
  const int nblocks = d.get_inner_nblks();
  auto columns_ok = [](int64_t nb) { return nb % 16 == 0 && nb <= 64; };
  if (nblocks == 0 && strides[1] == 1) return gemv::Layout{k, n, k, 64, 0, 64, strides[0]};
  if (nblocks == 1 && which[0] == 1 && columns_ok(blocks[0]))
    return gemv::Layout{k, n, k, blocks[0], 0, strides[1], strides[0]};
  if (nblocks == 2 && which[0] == 0 && which[1] == 1 && columns_ok(blocks[1]))
    return gemv::Layout{k, n, blocks[0], blocks[1], strides[0], strides[1], blocks[1]};
  return std::nullopt;
}

class GemvKernel : public Kernel {
 public:
  GemvKernel(gemv::Layout layout, int64_t rows, bool bias) : layout_(layout), rows_(rows), bias_(bias) {}
  const char* Name() const override { return "gemv"; }
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    const float* w = Data<const float>(args, DNNL_ARG_WEIGHTS);
    const float* bias = bias_ ? Data<const float>(args, DNNL_ARG_BIAS) : nullptr;
    float* y = Data<float>(args, DNNL_ARG_DST);
    // Whole column blocks per thread, contiguous ranges: each thread streams its panels once.
    SplitAcrossTeamIfLarge(layout_.blocks(), layout_.k * layout_.n, [&](int64_t b0, int64_t b1) {
      gemv::Blocks(layout_, x, rows_, w, bias, y, b0, b1);
    });
  }

 private:
  gemv::Layout layout_;
  int64_t rows_;
  bool bias_;
};

// How byoc's GEMV runs the matmul `pd` (its result plain as `dst`), or nothing where it does not: not here
// (ByocGemvRuns), more than a few rows, a source or result that is not plain rows, a weight layout gemv.h does not
// read.
std::optional<gemv::Layout> GemvFor(const dnnl::matmul::primitive_desc& pd, const Desc& dst) {
  const Desc src_desc = pd.src_desc();
  const Dims src_dims = src_desc.get_dims(), dst_dims = dst.get_dims();
  if (!ByocGemvRuns() || src_dims.size() != 2 || src_dims[0] > gemv::kMaxGemmRows || src_desc != Plain(src_dims) ||
      dst != Plain(dst_dims) || pd.dst_desc() != dst)
    return std::nullopt;
  const std::optional<gemv::Layout> layout = GemvLayout(pd.weights_desc());
  if (!layout || layout->k != src_dims[1]) return std::nullopt;
  return layout;
}

}  // namespace

bool Builder::Gemv(const Fused& f, const dnnl::matmul::primitive_desc& pd, std::vector<Arg> args, const Desc& dst,
                   const Desc& dst_write) {
  const std::optional<gemv::Layout> layout = GemvFor(pd, dst);
  if (!layout) return false;
  const Dims src_dims = pd.src_desc().get_dims(), dst_dims = dst.get_dims();
  // The post-ops, as a primitive on y in place: the first one as an eltwise or binary primitive, the others as its
  // own post-ops. Only where oneDNN has a generated kernel for that.
  const std::vector<int64_t> shape(dst_dims.begin(), dst_dims.end());
  dnnl::primitive post;
  Desc post_scratchpad;
  std::vector<Arg> post_args;
  if (!f.post.empty()) {
    const PostOp& first = f.post[0];
    Fused rest = f;
    rest.post.erase(rest.post.begin());
    const primitive_attr attr = UserScratchpad(BuildPostOps(rest, shape, &dst));
    if (first.tensor < 0) {
      dnnl::eltwise_forward::primitive_desc epd(Engine(), dnnl::prop_kind::forward_inference, first.alg, dst, dst,
                                                first.alpha, first.beta, attr);
      if (!IsJit(epd)) return false;
      post = dnnl::eltwise_forward(epd), post_scratchpad = epd.scratchpad_desc();
    } else {
      dnnl::binary::primitive_desc bpd(Engine(), first.alg, dst, BinaryDesc(first.tensor, shape, &dst), dst, attr);
      if (!IsJit(bpd)) return false;
      Fused head = f;
      head.post = {first};
      AddBinaryArgs(head, &post_args, shape, dst);
      post_args.back().key = DNNL_ARG_SRC_1;
      post = dnnl::binary(bpd), post_scratchpad = bpd.scratchpad_desc();
    }
    AddBinaryArgs(rest, &post_args, shape, dst);
  }
  const int y = Define(f.last, dst_write);
  args.push_back({DNNL_ARG_DST, y, dst});
  AddStep(dnnl::primitive(), std::move(args), Desc(), std::make_shared<GemvKernel>(*layout, src_dims[0], f.bias >= 0));
  if (f.post.empty()) return true;
  const bool binary = f.post[0].tensor >= 0;
  post_args.push_back({binary ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC, y, dst});
  post_args.push_back({DNNL_ARG_DST, y, dst});
  // A few rows' post-ops on the calling thread: waking the team for them cost more than they do (4-8 us each).
  const int threads = plan_.threads();
  plan_.set_threads(1);
  AddStep(post, std::move(post_args), post_scratchpad);
  plan_.set_threads(threads);
  return true;
}

// The matmuls of one row vector by constant 2-D weights of the same depth, each alone in its group (no
// post-ops), as one matmul by the weights side by side, each result a view of its columns: an unrolled LSTM's
// per-gate products H·R_gᵀ. Each reads its whole weight to make one row, so one call instead of four saves
// the calls' overhead: ddddocr's OCR model ran 248 1x512x512 matmuls at 16 us each. Returns k + 1, or 0
// when op k has no such sibling.
size_t Builder::SideBySide(size_t k) {
  const std::vector<BodyOp>& ops = g_.ops();
  int a = ops[k].inputs.empty() ? -1 : ops[k].inputs[0];
  auto alone = [&](size_t j) {
    return (j == 0 || ops[j - 1].node != ops[j].node) && (j + 1 == ops.size() || ops[j + 1].node != ops[j].node);
  };
  auto mergeable = [&](size_t j) {
    const BodyOp& o = ops[j];
    if (o.kernel != "relax.matmul" || o.inputs.size() != 2 || o.inputs[0] != a || merged_.count(j) || !alone(j))
      return false;
    const TensorInfo& w = g_.tensor(o.inputs[1]);
    return IsConstant(o.inputs[1]) && w.shape.size() == 2 && DataType(w) == memory::data_type::f32 &&
           DataType(g_.tensor(o.output)) == memory::data_type::f32 && g_.Shape(o.output).size() == 2;
  };
  // Siblings all read `a`: a row read once has none, and the scan of the later ops is skipped.
  if (a < 0 || g_.uses(a) < 2 || g_.Shape(a).size() != 2 || g_.Shape(a)[0] != 1 || !mergeable(k)) return 0;
  std::vector<size_t> siblings{k};
  for (size_t j = k + 1; j < ops.size(); ++j)
    if (mergeable(j)) siblings.push_back(j);
  if (siblings.size() < 2) return 0;
  int64_t depth = g_.Shape(a)[1], width = 0;
  std::vector<int> parts;
  for (size_t j : siblings) {
    parts.push_back(ops[j].inputs[1]);
    width += g_.Shape(ops[j].inputs[1])[1];
  }
  Desc src = Plain({1, depth}), dst = Plain({1, width});
  dnnl::matmul::primitive_desc pd(Engine(), src, Any({depth, width}), dst, UserScratchpad());
  auto [joined, fresh] = joined_weights_.try_emplace(parts, -1);
  if (fresh) {  // every step of the recurrence reads the same weights: joined once
    memory plain(Plain({depth, width}), Engine());
    auto* out = static_cast<float*>(plain.get_data_handle());
    int64_t column = 0;
    for (int w : parts) {
      int64_t n = g_.Shape(w)[1];
      const float* data = ConstFloats(w);
      for (int64_t r = 0; r < depth; ++r) std::copy_n(data + r * n, n, out + r * width + column);
      column += n;
    }
    joined->second = values_.KeepConst(ValueTable::Reordered(plain, pd.weights_desc()));
  }
  int weights = joined->second;
  int result = NewTemp(dst);
  std::vector<Arg> args = {{DNNL_ARG_SRC, As(a, src), src}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()},
                           {DNNL_ARG_DST, result, dst}};
  if (const std::optional<gemv::Layout> layout = GemvFor(pd, dst)) {  // on AVX-512: byoc's GEMV (gemv.h)
    AddStep(dnnl::primitive(), std::move(args), Desc(), std::make_shared<GemvKernel>(*layout, 1, false));
  } else {
    AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
  }
  int64_t column = 0;
  for (size_t j : siblings) {
    int64_t n = g_.Shape(ops[j].inputs[1])[1];
    values_.Bind(ops[j].output, values_.View(result, Plain({1, n}), static_cast<size_t>(column) * sizeof(float)));
    column += n;
    if (j != k) merged_.insert(j);
  }
  return k + 1;
}

size_t Builder::Matmul(size_t k) {
  if (size_t next = SideBySide(k)) return next;
  const BodyOp& op = g_.ops()[k];
  Arity(op, 2);
  int a = op.inputs[0], b = op.inputs[1];
  const auto &as = g_.Shape(a), &bs = g_.Shape(b), &ys = g_.Shape(op.output);
  if (as.size() < 2 || bs.size() < 2) Fail(op.where + ": matmul of a vector is not supported (rank >= 2 only)");
  if (as.back() != bs[bs.size() - 2] || ys.size() != std::max(as.size(), bs.size()) ||
      ys[ys.size() - 2] != as[as.size() - 2] || ys.back() != bs.back())
    Fail(op.where + ": shapes " + ShapeStr(as) + " x " + ShapeStr(bs) + " -> " + ShapeStr(ys) + " do not match");
  size_t rank = ys.size();
  int64_t n = ys.back();
  auto bias_ok = [&](int bias) {
    const TensorInfo& t = g_.tensor(bias);
    if (t.kind != Kind::kConst || t.shape.empty() || t.shape.back() != n || t.shape.size() > rank) return false;
    for (size_t i = 0; i + 1 < t.shape.size(); ++i)
      if (t.shape[i] != 1) return false;
    return true;
  };
  // The element-wise ops after the matmul's own node are post-ops too (an attention's mask add, a residual add):
  // oneDNN's binary primitive took 4-5% of RoBERTa's and T5's encoder time writing and reading scores again.
  // Unless the post-ops they add have no generated matmul kernel, where the node's own post-ops alone are kept.
  Fused f = FusePostOps(k, bias_ok, Later::kAll);
  if (Fused own = FusePostOps(k, bias_ok); own.next != f.next) {
    Desc weights = IsConstant(b) ? Any(Padded(bs, rank)) : Plain(Padded(bs, rank));
    dnnl::matmul::primitive_desc with_later(Engine(), Plain(Padded(as, rank)), weights, Plain(ys),
                                            UserScratchpad(BuildPostOps(f, ys, nullptr)));
    if (!IsJit(with_later)) f = own;
  }
  FakeQuantizeAfter(&f);
  bool const_weights = IsConstant(b);
  Dims weight_dims = Padded(bs, rank);
  // [..., M, K] x [K, N] by a constant weight, as exporters write a Linear on rank-3 and rank-4 activations (torch's
  // dynamo exporter always; the others when the batch is symbolic, which keeps onnxsim from making it a Gemm): one
  // 2-D matmul over the rows of the plain source. For the broadcast weight of the 4-D form oneDNN keeps the weight
  // plain instead of packing it: ConvNeXt-T's matmuls took 51.7 ms, 30.5 ms as rows. Only when the fused post-ops'
  // tensors hold one value per column (a bias, a layer scale) or are of the output's shape (a residual, plain),
  // which read the same as rows.
  bool rows = const_weights && rank > 2 &&
              std::all_of(weight_dims.begin(), weight_dims.end() - 2, [](int64_t d) { return d == 1; });
  for (const PostOp& p : f.post)
    rows = rows && (p.tensor < 0 || (g_.tensor(p.tensor).numel == n && g_.Shape(p.tensor).size() <= 2) ||
                    g_.Shape(p.tensor) == ys);
  Dims src_dims = Padded(as, rank), dst_dims = DimsOf(ys);
  if (rows) {
    int64_t count = 1;
    for (size_t i = 0; i + 1 < rank; ++i) count *= ys[i];
    src_dims = {count, as.back()}, dst_dims = {count, n}, weight_dims = {bs[bs.size() - 2], n};
  }
  const std::vector<int64_t> out_shape(dst_dims.begin(), dst_dims.end());
  Desc src_desc = Plain(src_dims), dst_desc = Plain(dst_dims);
  Desc wanted_weights = const_weights ? Any(weight_dims) : Plain(weight_dims);
  Desc bias_desc = Plain(Padded({n}, dst_dims.size()));
  auto make = [&](const primitive_attr& attr) {
    if (f.bias >= 0) return dnnl::matmul::primitive_desc(Engine(), src_desc, wanted_weights, bias_desc, dst_desc, attr);
    return dnnl::matmul::primitive_desc(Engine(), src_desc, wanted_weights, dst_desc, attr);
  };
  auto pd = CreateWithPostOps(f, out_shape, make);
  // Transposes around a matmul as strides: an operand held as a strided view (a transpose only matmuls read,
  // Builder::Transpose) is read through its strides, and a result that a transpose alone reads is written
  // through strides that make the transposed tensor plain. Only where oneDNN has a generated kernel for that;
  // otherwise the operands are copied plain first and the transpose is a copy after.
  Desc a_read = Plain(as), b_read = Plain(bs), dst_write = Plain(ys);  // how the operands are read, the result written
  Desc a_view = values_.DescOf(a), b_view = values_.DescOf(b);
  Desc dst_view = rows ? dst_desc : TransposedDst(f.last, dst_dims);
  // Only with the innermost dim contiguous: a row stride oneDNN's brgemm takes as it is. A weight read along its
  // columns (K^T seen through K's strides) made a 6-head attention over 1500 frames 14.2 ms where the copy and a
  // plain weight took 10.2 ms (Whisper's encoder).
  auto rows_contiguous = [](const Desc& d) { return d.get_strides().back() == 1; };
  bool a_strided = !rows && as.size() == rank && IsStrided(a_view) && a_view != a_read && rows_contiguous(a_view);
  bool b_strided = !const_weights && bs.size() == rank && IsStrided(b_view) && b_view != b_read &&
                   rows_contiguous(b_view);
  bool dst_strided = dst_view != dst_desc && rows_contiguous(dst_view);
  if (a_strided || b_strided || dst_strided) {
    Desc plain_src = src_desc, plain_weights = wanted_weights, plain_dst = dst_desc;
    if (a_strided) src_desc = a_view;
    if (b_strided) wanted_weights = b_view;
    if (dst_strided) dst_desc = dst_view;
    auto viewed = CreateWithPostOps(f, out_shape, make);
    if (IsJit(viewed)) {
      pd = viewed;
      if (a_strided) a_read = a_view;
      if (b_strided) b_read = b_view;
      if (dst_strided) dst_write = dst_view;
    } else {
      src_desc = plain_src, wanted_weights = plain_weights, dst_desc = plain_dst;
    }
  }
  if (const_weights && n % 256 == 0 && pd.weights_desc() == Plain(weight_dims)) {
    // A plain constant weight whose rows are a multiple of 1 kB is stored with rows 64 bytes longer: such rows
    // make oneDNN's gemm thrash the cache (4k aliasing). Measured on AVX2, [128, 768] x [768, 3072]: 8.4 ms,
    // 4.3 ms padded (BERT's feed-forward); 3-10% faster for N = 768 and 2304.
    size_t wrank = weight_dims.size();
    Dims strides(wrank, 1);
    strides[wrank - 2] = n + 16;
    for (size_t i = wrank - 2; i-- > 0;) strides[i] = strides[i + 1] * weight_dims[i + 1];
    wanted_weights = Desc(weight_dims, memory::data_type::f32, strides);
    auto padded = CreateWithPostOps(f, out_shape, make);
    if (std::string(padded.impl_info_str()) == pd.impl_info_str()) pd = padded;
  }
  int src = As(a, a_read);
  int weights = const_weights ? values_.ReorderConst(values_.ConstView(values_.of(b), Plain(weight_dims)), pd.weights_desc())
                              : As(b, b_read);
  std::vector<Arg> args = {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()}};
  if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, values_.of(f.bias), bias_desc});
  if (const_weights && dst_write == Plain(ys) && Gemv(f, pd, args, dst_desc, dst_write)) return f.next;
  AddBinaryArgs(f, &args, out_shape, dst_desc);
  args.push_back({DNNL_ARG_DST, Define(f.last, dst_write), dst_desc});
  AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
  return f.next;
}

}  // namespace dnnl_runtime
}  // namespace byoc
