// builder.h -- the builder (Builder): a partition's ops lowered into a program's values (values.h) and steps
// (step_plan.h). An op table maps each kernel to its lowering (builder.cc); the lowerings live in one file per
// op family, named beside each group of declarations below. A lowering reads the graph, the values and their
// layouts (values_), and adds steps and temps to the plan (plan_): it sees neither the arena, the workspaces
// nor the run.
#ifndef BYOC_DNNL_BUILDER_H_
#define BYOC_DNNL_BUILDER_H_

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.h"
#include "step_plan.h"
#include "values.h"

namespace byoc {
namespace dnnl_runtime {

// Whether byoc's GEMV (gemv.h) may run here: AVX-512 by cpuid, and oneDNN not held below it (ONEDNN_MAX_CPU_ISA
// holds byoc's kernels to a class too). matmul.cc.
bool ByocGemvRuns();

// Lowers the ops of `graph` into `values` and `plan`, each op's steps for the team size its work earns.
class Builder {
 public:
  Builder(const ParsedGraph& graph, ValueTable* values, StepPlan* plan);
  // Lowers every op; the steps of a primitive big enough (WorkUs) run on teams of `max_threads`.
  // `omp` is the caller's: the team size the last op leaves current must hold until the plan's own primitives
  // (the output reorders StepPlan::Finish creates) are made, as oneDNN sizes a primitive's work at creation.
  void Build(int max_threads, OmpThreads& omp);

 private:
  // A conv1d/conv2d's checked geometry in oneDNN's terms: the weight's dims with the group axis,
  // dilation counted from 0, padding split into its two sides.
  struct ConvDims {
    int64_t groups;
    Dims weights, strides, dilation, pad_l, pad_r;
  };
  std::vector<memory::format_tag> DepthwiseBlocks(int x, const ConvDims& c, const Dims& src_dims) const;
  static std::vector<int64_t> GroupsToMerge(const ConvDims& c, const std::string& impl);
  static ConvDims GroupsMerged(const ConvDims& c, int64_t merge);
  int BlockDiagonalWeights(int plain, const ConvDims& c, int64_t merge);
  static bool Commutes(const std::string& kernel) {
    return kernel == "relax.add" || kernel == "relax.multiply" || kernel == "relax.maximum" ||
           kernel == "relax.minimum";
  }
  // Folds the ops after the head at `k` (single reader, same shape) into post-ops: those of the same node, and
  // with `later` those of the nodes after it too: all of them (kAll: an attention's mask add and a residual add,
  // each a node of its own, after a matmul), or those whose other operands are constants (kConstants: a per-channel
  // add or multiply after a conv, which onnxruntime folds into the conv's bias and weights; as post-ops they add no
  // pass over the output). `bias_ok(tensor)` says whether a constant added first can be the primitive's bias.
  enum class Later { kNone, kConstants, kAll };
  template <class BiasOk>
  Fused FusePostOps(size_t k, BiasOk bias_ok, Later later = Later::kNone) const {
    const std::vector<BodyOp>& ops = g_.ops();
    Fused f;
    f.last = ops[k].output;
    f.next = k + 1;
    const std::vector<int64_t>& shape = g_.Shape(f.last);
    auto joins = [&](const BodyOp& op) {
      if (later == Later::kAll || op.node == ops[k].node) return true;
      return later == Later::kConstants && std::all_of(op.inputs.begin(), op.inputs.end(), [&](int i) {
               return i == f.last || (i >= 0 && g_.tensor(i).kind == Kind::kConst);
             });
    };
    // an op a decoder's attention computes (FindDecodeAttention) is no post-op of another
    while (f.next < ops.size() && joins(ops[f.next]) && !in_decode_attention_.count(f.next)) {
      const BodyOp& op = ops[f.next];
      int x = f.last;
      if (g_.uses(x) != 1 || op.inputs.empty() || op.inputs[0] < 0 || g_.Shape(op.output) != shape) {
        break;
      } else if (std::any_of(op.inputs.begin(), op.inputs.end(), [&](int i) {
                   return i < 0 || (i != x && g_.tensor(i).kind == Kind::kOp && values_.of(i) < 0);
                 })) {
        break;  // an operand not computed as a value of its own (a stack only its reduction reads)
      } else if (PostOp p; EltwiseOf(op, &p)) {
        if (op.inputs[0] != x) break;
        f.post.push_back(p);
      } else if (op.inputs.size() == 2 && (op.inputs[0] == x || op.inputs[1] == x)) {
        bool x_first = false;
        float c = ScalarOperand(op, x, &x_first);
        int other = op.inputs[0] == x ? op.inputs[1] : op.inputs[0];
        const std::string& kernel = op.kernel;
        if (kernel == "relax.add" && f.post.empty() && f.bias < 0 && bias_ok(other)) {
          f.bias = other;
        } else if (PostOp p{algorithm::eltwise_linear}; LinearOf(kernel, c, x_first, &p.alpha, &p.beta)) {
          f.post.push_back(p);
        } else if (BinaryAlgorithm(kernel) && (op.inputs[0] == x || Commutes(kernel)) &&
                   Broadcasts(g_.Shape(other), shape)) {
          PostOp p;
          p.alg = *BinaryAlgorithm(kernel);
          p.tensor = other;
          f.post.push_back(p);
        } else {
          break;
        }
      } else {
        break;
      }
      f.last = op.output;
      ++f.next;
    }
    return f;
  }
  // Creates the primitive desc, then again if a full-shape binary operand's layout
  // differs from the dst layout oneDNN chose (the operand is then reordered to it).
  template <class MakePd>
  auto CreateWithPostOps(const Fused& f, const std::vector<int64_t>& shape, MakePd make) const {
    auto pd = make(UserScratchpad(BuildPostOps(f, shape, nullptr)));
    Desc dst = pd.dst_desc();
    for (const PostOp& p : f.post) {
      if (p.tensor >= 0 && g_.Shape(p.tensor) == shape && values_.DescOf(p.tensor) != dst)
        return make(UserScratchpad(BuildPostOps(f, shape, &dst)));
    }
    return pd;
  }
  // Whether oneDNN chose its reference (scalar C++) implementation for `pd`.
  template <class Pd>
  static bool IsReference(const Pd& pd) {
    return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
  }
  // A generated kernel ("jit:...", "brg..."), not a reference or plain-C one ("ref:any", "simple_nchw:any").
  template <class Pd>
  static bool IsJit(const Pd& pd) {
    std::string impl = pd.impl_info_str();
    return impl.find("jit") != std::string::npos || impl.rfind("brg", 0) == 0;
  }
  // The primitive desc `make` gives for sources `ids` (a sum or a concat) in the layouts their
  // producers chose, when oneDNN has a fast kernel for that mix. Otherwise all in the layout of
  // one of them (reordering the others is a jit reorder, where oneDNN's sum or concat of a mix
  // is its reference kernel: measured on ShuffleNet, 13 sums of nhwc + nChw8c terms took 0.93
  // ms of its 6.2 ms), and all plain when nothing else can be made.
  template <class Make>
  auto WithSourceLayouts(const std::vector<int>& ids, Make make) const {
    auto in_layout = [&](int layout_of) {
      std::vector<Desc> srcs;
      for (int id : ids) {
        const Desc& own = values_.DescOf(id);
        if (g_.tensor(id).kind == Kind::kConst) {
          srcs.push_back(Plain(g_.Shape(id)));
        } else if (layout_of < 0) {
          srcs.push_back(own);
        } else {
          auto tag = TagOf(values_.DescOf(layout_of));
          srcs.push_back(tag == memory::format_tag::undef ? own : Desc(own.get_dims(), own.get_data_type(), tag));
        }
      }
      return make(srcs);
    };
    try {
      auto pd = in_layout(-1);
      if (!IsReference(pd)) return pd;
      for (int id : ids) {
        if (g_.tensor(id).kind == Kind::kConst || TagOf(values_.DescOf(id)) == memory::format_tag::undef)
          continue;
        try {
          auto uniform = in_layout(id);
          if (!IsReference(uniform)) return uniform;
        } catch (const dnnl::error&) {  // that layout does not fit every source (a block cut by the axis)
        }
      }
      return pd;
    } catch (const dnnl::error&) {  // a mix of layouts oneDNN cannot combine at all
      std::vector<Desc> plain;
      for (int id : ids) plain.push_back(Plain(g_.Shape(id)));
      return make(plain);
    }
  }

  // builder.cc: what every lowering builds with, and the op table (CompileOp's)
  int As(int id, const Desc& desc);
  int Define(int id, const Desc& desc);
  int NewTemp(const Desc& desc) { return plan_.NewTemp(desc); }
  void AddStep(dnnl::primitive primitive, std::vector<Arg> args, const Desc& scratchpad,
               std::shared_ptr<const Kernel> kernel = nullptr) {
    plan_.Add(std::move(primitive), std::move(args), scratchpad, std::move(kernel));
  }
  bool OnlyMatmulsRead(int id) const;
  double WorkUs(const BodyOp& op) const;
  bool StreamsWeights(const BodyOp& op) const;
  using OpCompiler = size_t (*)(Builder& p, size_t k, const BodyOp& op, const Attrs& a);
  static const std::unordered_map<std::string, OpCompiler>& OpTable();
  // Op-table entries. Alone: a lowering of the one op at k (of the op, or of the op and its attributes), after
  // which the next op comes. Fusing: a lowering from op k (of k, or of k and the op's attributes) that may take
  // the ops after it too (a bias, post-ops) and returns the index after them.
  template <auto Lower>
  static size_t Alone(Builder& p, size_t k, const BodyOp& op, const Attrs& a) {
    if constexpr (std::is_invocable_v<decltype(Lower), Builder&, const BodyOp&, const Attrs&>)
      (p.*Lower)(op, a);
    else
      (p.*Lower)(op);
    return k + 1;
  }
  template <auto Lower>
  static size_t Fusing(Builder& p, size_t k, const BodyOp&, const Attrs& a) {
    if constexpr (std::is_invocable_v<decltype(Lower), Builder&, size_t, const Attrs&>)
      return (p.*Lower)(k, a);
    else
      return (p.*Lower)(k);
  }
  size_t CompileOp(size_t k);
  void Arity(const BodyOp& op, size_t n) const;
  // Whether graph tensor `id` is a constant: the graph's, or one computed at load (byoc.dequantize_constant).
  bool IsConstant(int id) const;
  // The float32 values of constant `id` (plain, row-major), as IsConstant counts constants.
  const float* ConstFloats(int id) const;
  // The shape of op's weight (input 1): "w_shape" where it travels packed at 8 bits, else its tensor's.
  std::vector<int64_t> WeightShape(const BodyOp& op) const;
  // Constant `w`, an 8-bit weight sent packed (its bytes in a float32 constant a quarter as long:
  // codegens/dnnl/dynamic.py packed_bytes), seen as `desc` (s8/u8, as many elements as the bytes hold).
  int PackedConst(int w, const Desc& desc, const std::string& where);
  void SameShape(const BodyOp& op, int input) const;

  // fusion.cc: ops folded into a primitive: scalar operands as linear post-ops, and post-op chains
  float ScalarOperand(const BodyOp& op, int x, bool* x_first) const;
  static bool LinearOf(const std::string& kernel, float c, bool x_first, float* alpha, float* beta);
  post_ops BuildPostOps(const Fused& f, const std::vector<int64_t>& shape, const Desc* full) const;
  bool RowsOf(int id, const std::vector<int64_t>& shape) const;
  Desc BinaryDesc(int id, const std::vector<int64_t>& shape, const Desc* full) const;
  void AddBinaryArgs(const Fused& f, std::vector<Arg>* args, const std::vector<int64_t>& shape, const Desc& dst);

  // elementwise.cc: element-wise ops: eltwise primitives and binary ops (with a scalar, an outer product, broadcasts)
  void Eltwise(const BodyOp& op, int x, algorithm alg, float alpha, float beta, int output);
  bool EltwiseOf(const BodyOp& op, PostOp* p) const;
  bool ActivationOf(const BodyOp& op, PostOp* p) const;
  static const algorithm* Find(const std::map<std::string, algorithm>& table, const std::string& kernel);
  static const algorithm* BinaryAlgorithm(const std::string& kernel);
  static bool Broadcasts(const std::vector<int64_t>& from, const std::vector<int64_t>& to);
  void Binary(const BodyOp& op, algorithm alg, bool commutes);
  bool WithScalar(const BodyOp& op);
  bool OuterProduct(const BodyOp& op);
  bool BinaryWithoutReference(algorithm alg, int full, int other, int output);

  // conv.cc: convolutions: conv1d/conv2d (direct, or Winograd: winograd.cc) and the transposed conv2d
  ConvDims ConvShape(const BodyOp& op, const Attrs& a) const;
  static dnnl::convolution_forward::primitive_desc ConvPd(const ConvDims& c, const Desc& src, const Desc& weights,
                                                          const Desc* bias, const Desc& dst,
                                                          const primitive_attr& attr);
  size_t Conv(size_t k, const Attrs& a);
  static size_t UnitSpatialAxis(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                                const std::vector<int64_t>& ys, const ConvDims& c);
  static void DropSpatialAxis(ConvDims* c, size_t d);
  bool ChannelBias(int b, int64_t channels, size_t rank) const;
  size_t Deconv2d(size_t k, const Attrs& a);

  // winograd.cc: big 3x3 stride-1 convolutions as Winograd F(4x4, 3x3) around one batched matmul
  size_t WinogradConv(size_t k, const ConvDims& c, const Fused& f);

  // matmul.cc: matmuls, and one-row matmuls by constant weights that read the same row run side by side
  size_t SideBySide(size_t k);
  size_t Matmul(size_t k);
  // A matmul of a few rows by a constant weight as byoc's GEMV on the matmul's `args` (source, weights held as pd's,
  // bias), its post-ops as a primitive after it; false (nothing added) where the GEMV or that primitive does not
  // apply. `dst` is how the steps see the plain result, `dst_write` how the graph's tensor is defined (one buffer).
  bool Gemv(const Fused& f, const dnnl::matmul::primitive_desc& pd, std::vector<Arg> args, const Desc& dst,
            const Desc& dst_write);

  // nbits.cc: weight-only int4/int8 matmuls on the packed weight (onnxruntime's MatMulNBits)
  void MatmulNBits(const BodyOp& op, const Attrs& a);

  // int8.cc: int8 units: quantized convs, matmuls and adds, quantize/dequantize, and fake-quantized element-wise units
  static std::vector<double> WeightScales(const Attrs& a);
  int QuantizedWeightView(const BodyOp& op, const Attrs& a, const Desc& desc);
  int QuantizedWeights(int v, const Desc& desc, const Attrs& a, int mask);
  void DequantizeConstant(const BodyOp& op, const Attrs& a);
  void Scales(primitive_attr* attr, std::vector<Arg>* args, int arg, const std::vector<double>& scales, int mask);
  void ZeroPoint(primitive_attr* attr, std::vector<Arg>* args, int arg, int64_t zero_point);
  post_ops OutputRange(const Attrs& a, memory::data_type type) const;
  static Desc Retyped(const Desc& desc, const TensorInfo& t);
  static Desc ChannelsLast(const std::vector<int64_t>& shape, memory::data_type type);
  void QuantizedAdd(const BodyOp& op, const Attrs& a);
  size_t FakeQuantizedAt(size_t k);
  static bool PerTensor(const BodyOp& op);
  void QuantizeReorder(const BodyOp& op, const Attrs& a, bool quantize);
  void Quantize(const BodyOp& op, const Attrs& a) { QuantizeReorder(op, a, true); }
  void Dequantize(const BodyOp& op, const Attrs& a) {
    Arity(op, 1);
    auto computed = fake_quantized_.find(op.inputs[0]);
    if (computed != fake_quantized_.end()) return values_.Bind(op.output, values_.of(computed->second));
    QuantizeReorder(op, a, false);
  }
  bool FakeQuantizeAfter(Fused* f);
  primitive_attr QuantizedAttr(const Attrs& a, memory::data_type out, int weight_mask, std::vector<Arg>* args);
  size_t QuantizedConv(size_t k, const Attrs& a);
  bool WindowsAsMatmul(const BodyOp& op, const Attrs& a, const ConvDims& c);
  size_t QuantizedMatmul(size_t k, const Attrs& a);
  bool RowsAsConv(const BodyOp& op, const Attrs& a);
  // dynamic.cc: quantize_dynamic's matmuls: x quantized per call as ONNX's DynamicQuantizeLinear, a u8 x s8 matmul
  size_t DynamicInt8Matmul(size_t k, const Attrs& a);
  size_t DynamicInt8Conv2d(size_t k, const Attrs& a);
  struct DynamicQuantized;
  const DynamicQuantized& DynamicallyQuantized(int x, const Desc& layout);
  bool DynamicRowsAsConv(const BodyOp& op, const std::vector<int64_t>& ws, const DynamicQuantized& q,
                         const std::vector<double>& w_scale);

  // byte_tables.cc: 8-bit element-wise units run as 256-entry byte tables, composed and chained
  std::vector<uint8_t> LookupTableOf(const Fused& f, const Desc& src, const Desc& dst,
                                     const std::map<int, memory>& operands) const;
  static memory SourceCodes(memory::data_type type);
  memory BytesOf(int id, int source) const;
  void DropComposedTables(const Fused& f, const std::vector<size_t>& dqs);
  std::optional<ByteTable> TakeLastTable(int id);

  // layout.cc: data movement kept in its source's layout: reshape, transpose, channel shuffle, concat, stack,
  // slices, split, resize
  void Reshape(const BodyOp& op);
  void BroadcastTo(const BodyOp& op);
  void Transpose(const BodyOp& op, const Attrs& a);
  std::vector<int64_t> Permutation(const BodyOp& op, const Attrs& a) const;
  const BodyOp* OnlyReader(int id) const;
  Desc TransposedDst(int id, const Dims& dims) const;
  size_t ChannelShuffleAt(size_t k);
  void Concat(const BodyOp& op, const Attrs& a);
  void Stack(const BodyOp& op, const Attrs& a);
  bool CopyBlockedPart(const BodyOp& op, const Dims& offsets);
  static std::string ResizeUnsupported(const std::string& method, const std::string& ctm, const std::string& rounding,
                                       const std::vector<int64_t>& xs, const std::vector<int64_t>& ys);
  void Resize(const BodyOp& op, const Attrs& a);
  void StridedSlice(const BodyOp& op, const Attrs& a);
  void GatherElementsOp(const BodyOp& op, const Attrs& a);
  void ScatterElementsOp(const BodyOp& op, const Attrs& a);
  bool WritableInPlace(int id, int v) const;
  void Pad(const BodyOp& op, const Attrs& a);
  void Split(const BodyOp& op, const Attrs& a);
  void CopyPart(const BodyOp& op, const Dims& offsets, const Dims& step);
  void CopySteppedPieces(const BodyOp& op, const Dims& offsets, const Dims& step);

  // reduce.cc: pooling and reductions
  void Pool(const BodyOp& op, const Attrs& a);
  static const algorithm* ReductionOf(const std::string& kernel);
  void Reduce(const BodyOp& op, const Attrs& a, algorithm alg);
  void ExtremeOf(const BodyOp& op, const std::vector<int>& terms, algorithm alg);
  bool ReduceByMatmul(const BodyOp& op, const Dims& kept, bool mean);
  void GlobalPool(const BodyOp& op, int src, const Dims& kept, algorithm alg);
  bool ReducedOverOnly(int id, size_t axis) const;
  void SumOf(const BodyOp& op, const std::vector<int>& terms, bool mean);

  // attention.cc: softmax(Q K^T) V whose scores outgrow the caches, a block of query rows at a time
  size_t DeferAttentionAt(size_t k);
  void BlockedAttention(size_t j);

  // decode_attention.cc: softmax(Q K^T) V for a decoder's token, one kernel of byoc's
  // A decoder's attention (FindDecodeAttention): its scores' matmul, the element-wise steps on the scores (each
  // with the scores' dims as its op sees them; a scalar's alpha * s + beta, or a float operand's kernel), the
  // softmax's NaN guard, the matmul by V where the kernel runs, and the tensors it reads K (or K^T) and V from
  struct DecodeChain {
    struct Step {
      std::vector<int64_t> view;
      int operand = -1;  // -1: alpha * s + beta
      std::string kernel;
      float alpha = 1.0f, beta = 0.0f;
    };
    // a tensor read with its heads' axis (the scores' third from last) holding each head for `repeat` of theirs
    struct Operand {
      int tensor = -1;
      int64_t repeat = 1;
    };
    size_t scores_matmul = 0, context_matmul = 0;
    std::vector<size_t> ops;  // the ops after the scores' matmul up to the context's, computed by the kernel
    std::vector<Step> steps;
    bool nan_to = false;
    float nan_value = 0.0f;
    Operand keys, values;      // K^T [.., H, T], or K [.., T, H] where keys_by_row; V [.., T, Hv]
    bool keys_by_row = false;
  };
  size_t SoleReaderOf(int id) const;
  int ProducerOf(int id) const;
  void FindDecodeAttentions();
  bool FindDecodeAttention(size_t k);
  DecodeChain::Operand RepeatedHeads(int operand, std::vector<size_t>* absorbed) const;
  void DecodeAttentionStep(size_t j);

  // norm.cc: normalizations: softmax, layer norm, LRN, batch norm
  void Softmax(const BodyOp& op, const Attrs& a);
  void LayerNorm(const BodyOp& op, const Attrs& a);
  void RmsNormOp(const BodyOp& op, const Attrs& a);
  void GroupNorm(const BodyOp& op, const Attrs& a);
  void Lrn(const BodyOp& op, const Attrs& a);
  void ByteTableOp(const BodyOp& op, const Attrs& a);
  void PerElementOp(const BodyOp& op);
  void NanToOp(const BodyOp& op);
  void RotaryOp(const BodyOp& op);
  void WhereOp(const BodyOp& op);
  void Prelu(const BodyOp& op, const Attrs& a);
  void BatchNorm(const BodyOp& op, const Attrs& a);

  const ParsedGraph& g_;
  ValueTable& values_;  // the values and their layouts (what a graph tensor is, as computed: values_.of)
  StepPlan& plan_;      // the steps so far
  std::map<std::pair<int, std::string>, int> reorders_;  // (tensor, layout) -> value
  std::set<size_t> merged_;  // matmul ops a sibling computed (SideBySide)
  // An attention's second matmul -> its scores' matmul and their post-ops, computed with it (DeferAttentionAt)
  struct DeferredAttention {
    size_t scores_matmul;
    Fused scores;
  };
  std::map<size_t, DeferredAttention> deferred_attention_;
  std::map<size_t, DecodeChain> deferred_decode_;  // context matmul -> its chain
  std::set<size_t> in_decode_attention_;           // the ops each chain computes, but its context matmul
  std::map<std::vector<int>, int> joined_weights_;  // constant weights side by side (SideBySide) -> value
  std::map<int, std::vector<int>> stacked_;  // a stack left unmaterialized -> the tensors it stacks
  std::map<int, ByteTable> byte_tables_;  // graph tensor computed as a byte table -> that table
  // 8-bit tensors never made -> the float32 tensor whose value holds them dequantized (FakeQuantizeAfter)
  std::map<int, int> fake_quantized_;
  bool winograd_;  // the graph's option "winograd" (default on)
  // (graph tensor, layout) -> its u8 values in that layout, scale (f32) and zero point (s32), quantized per call
  // (DynamicInt8Matmul, DynamicInt8Conv2d), once for every dynamic int8 op that reads it so
  struct DynamicQuantized {
    int values, scale, zero_point;
  };
  std::map<std::pair<int, std::string>, DynamicQuantized> dynamic_quantized_;
};

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_BUILDER_H_
