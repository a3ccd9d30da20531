// builder.cc -- the builder (Builder): what every lowering builds with (a tensor in a layout, a tensor defined),
// the op table, and the loop that lowers a partition's ops, each for the team size its work earns.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "builder.h"
#include "gemv.h"

namespace byoc {
namespace dnnl_runtime {

Builder::Builder(const ParsedGraph& graph, ValueTable* values, StepPlan* plan)
    : g_(graph), values_(*values), plan_(*plan), winograd_(graph.BoolOption("winograd", true)) {}

void Builder::Build(int max_threads, OmpThreads& omp) {  // omp: see builder.h
  const std::vector<BodyOp>& ops = g_.ops();
  // each op's estimate, and whether it is a token's GEMV that may earn a team with the others (StreamsWeights)
  std::vector<double> work(ops.size());
  std::vector<bool> streaming(ops.size());
  double total_us = 0, streamed_us = 0;
  for (size_t k = 0; k < ops.size(); ++k) {
    work[k] = WorkUs(ops[k]);
    streaming[k] = work[k] >= kStreamOpUs && StreamsWeights(ops[k]);
    total_us += work[k];
    if (streaming[k]) streamed_us += work[k];
  }
  FindDecodeAttentions();
  for (size_t k = 0; k < ops.size();) {
    const double op_us = work[k];
    const bool streams = streamed_us >= kStreamModuleUs && streaming[k];
    const bool team = op_us >= kParallelOpUs &&
                      (total_us >= kParallelModuleUs || op_us >= kParallelAloneUs || streams);
    int threads = team ? max_threads : 1;
    plan_.set_threads(threads);
    omp.Set(threads);
    try {
      k = CompileOp(k);
    } catch (const dnnl::error& err) {
      Fail(ops[k].where + ": oneDNN cannot run this op (" + err.what() + ")");
    }
  }
}

// -- what every lowering builds with ------------------------------------------------------
// Whether `id` is not a partition output and every op that reads it is a matmul, or a permute_dims that only
// matmuls read in turn (K transposed twice: heads split off, then K^T).
bool Builder::OnlyMatmulsRead(int id) const {
  const std::vector<int>& outputs = g_.outputs();
  if (g_.uses(id) == 0 || std::find(outputs.begin(), outputs.end(), id) != outputs.end()) return false;
  for (const BodyOp& op : g_.ops()) {
    if (std::find(op.inputs.begin(), op.inputs.end(), id) == op.inputs.end() || op.kernel == "relax.matmul") continue;
    if (op.kernel != "relax.permute_dims" || !OnlyMatmulsRead(op.output)) return false;
  }
  return true;
}

// The one op that reads graph tensor `id` (which is no partition output), or null.
const BodyOp* Builder::OnlyReader(int id) const {
  const std::vector<int>& outputs = g_.outputs();
  if (g_.uses(id) != 1 || std::find(outputs.begin(), outputs.end(), id) != outputs.end()) return nullptr;
  for (const BodyOp& op : g_.ops())
    if (std::find(op.inputs.begin(), op.inputs.end(), id) != op.inputs.end()) return &op;
  return nullptr;
}

// Where a primitive writes graph tensor `id` of `dims` when a permute_dims alone reads it: through strides that
// make the permuted tensor plain, so the permute_dims is a view with no step (Builder::Transpose). Plain otherwise.
Desc Builder::TransposedDst(int id, const Dims& dims) const {
  const BodyOp* reader = OnlyReader(id);
  memory::data_type type = DataType(g_.tensor(id));
  if (!reader || reader->kernel != "relax.permute_dims" || g_.Shape(id).size() != dims.size()) return Plain(dims, type);
  std::vector<int64_t> perm = Permutation(*reader, Attrs(reader->attrs, reader->where));
  const std::vector<int64_t>& ys = g_.Shape(reader->output);
  Dims strides(dims.size());
  int64_t stride = 1;
  for (size_t i = ys.size(); i-- > 0;) {  // the permuted tensor's plain strides, given to the axes they come from
    strides[perm[i]] = stride;
    stride *= ys[i];
  }
  return Strided(dims, type, strides);
}

// The value holding graph tensor `id` in layout `desc`, reordering once if needed.
int Builder::As(int id, const Desc& desc) {
  int v = values_.of(id);
  if (v < 0) Fail("tensor " + g_.tensor(id).name + " is read before it is computed");
  if (values_[v].desc == desc) return v;
  auto key = std::make_pair(id, DescKey(desc));
  auto cached = reorders_.find(key);
  if (cached != reorders_.end()) return cached->second;
  int target;
  if (values_.StorageOf(v) == Storage::kConst) {
    target = values_.ReorderConst(v, desc);
  } else {
    target = NewTemp(desc);
    plan_.AddReorder(v, target);
  }
  reorders_[key] = target;
  return target;
}

bool Builder::IsConstant(int id) const {
  if (g_.tensor(id).kind == Kind::kConst) return true;
  int v = values_.of(id);
  return g_.tensor(id).kind == Kind::kOp && v >= 0 && values_.StorageOf(v) == Storage::kConst;
}

const float* Builder::ConstFloats(int id) const {
  if (g_.tensor(id).kind == Kind::kConst) return g_.const_data(id).data();
  int v = values_.of(id);
  if (!IsConstant(id) || values_[v].desc != Plain(g_.Shape(id)))
    Fail("tensor " + g_.tensor(id).name + " is not a plain float32 constant");
  return static_cast<const float*>(values_.ConstData(values_[values_.Root(v)].slot));
}

std::vector<int64_t> Builder::WeightShape(const BodyOp& op) const {
  Attrs a(op.attrs, op.where);
  if (a.Has("w_shape")) return a.Ints("w_shape");
  return op.inputs.size() > 1 ? g_.Shape(op.inputs[1]) : std::vector<int64_t>{};
}

int Builder::PackedConst(int w, const Desc& desc, const std::string& where) {
  const TensorInfo& t = g_.tensor(w);
  if (t.kind != Kind::kConst || static_cast<size_t>(t.numel) * sizeof(float) < desc.get_size())
    Fail(where + ": the weight must be a constant holding the bytes of " + ShapeStr(std::vector<int64_t>(
         desc.get_dims().begin(), desc.get_dims().end())) + " 8-bit values");
  return values_.ConstView(values_.of(w), desc);
}

// Estimated single-thread time of op `op` (the head of the primitive it starts), in microseconds.
double Builder::WorkUs(const BodyOp& op) const {
  auto numel = [this](int id) {
    double n = 1;
    for (int64_t d : g_.Shape(id)) n *= static_cast<double>(d);
    return n;
  };
  double out = numel(op.output), macs = 0, elements = out;
  bool conv = op.kernel == "relax.nn.conv2d" || op.kernel == "relax.nn.conv1d" || op.kernel == "qnn.conv2d" ||
              op.kernel == "qnn.conv1d" || op.kernel == "byoc.dynamic_int8_conv2d";
  if ((conv || op.kernel == "relax.nn.conv2d_transpose") && op.inputs.size() > 1) {
    const std::vector<int64_t> w = WeightShape(op);  // OIHW (IOHW): work per output (input) element
    double per = 1;
    for (size_t i = 1; i < w.size(); ++i) per *= static_cast<double>(w[i]);
    macs = (conv ? out : numel(op.inputs[0])) * per;
  } else if ((op.kernel == "relax.matmul" || op.kernel == "qnn.matmul" || op.kernel == "byoc.dynamic_int8_matmul" ||
              op.kernel == "byoc.matmul_nbits") &&
             !op.inputs.empty() &&
             !g_.Shape(op.inputs[0]).empty()) {
    macs = out * static_cast<double>(g_.Shape(op.inputs[0]).back());
  }
  for (int x : op.inputs)
    if (x >= 0) elements += numel(x);
  return macs / kMacsPerUs + elements / kElementsPerUs;
}

// Whether op `op` multiplies a few rows of x (a decoder's token) by a constant weight in a kernel of byoc's:
// MatMulNBits, or on AVX-512 a matmul that byoc's GEMV may take (gemv.h; on AVX2 oneDNN's matmul, whose threads
// split the columns evenly and wait for each other). Such a kernel streams the weight, and its threads take the
// weight's columns as they come free, so a late thread costs the join, not a share of the work: on a team, a token
// runs faster even where the module's total is too small for a team of oneDNN primitives (kParallelModuleUs), as long
// as its GEMVs together pay for the team's entry into each call (kStreamOpUs, kStreamModuleUs). A chain of ten int4
// GEMVs [1,512]x[512,1408] and back ran in 0.13 ms on two threads and in 0.18 ms on one (AMD EPYC, AVX-512 VNNI); a
// Qwen2-style int4 token in 0.29 ms against 0.33; one such GEMV alone in 22 us against 21.
bool Builder::StreamsWeights(const BodyOp& op) const {
  if ((op.kernel != "byoc.matmul_nbits" && op.kernel != "relax.matmul") || op.inputs.size() < 2) return false;
  const std::vector<int64_t>& x = g_.Shape(op.inputs[0]);
  if (x.empty() || x.back() <= 0) return false;
  const int64_t numel = g_.tensor(op.inputs[0]).numel;
  return numel > 0 && numel / x.back() <= gemv::kMaxRows &&
         (op.kernel == "byoc.matmul_nbits" || (ByocGemvRuns() && IsConstant(op.inputs[1])));
}

// The output of op `id` becomes a temp value in the layout the primitive chose.
int Builder::Define(int id, const Desc& desc) {
  int v = NewTemp(desc);
  values_.Bind(id, v);
  return v;
}

// -- ops -----------------------------------------------------------------------------
// The op table: what each kernel compiles to. An entry compiles the op at `k` (and the ops after it that it
// fuses: a conv's bias and activations, ...) and returns the index of the first op after them.
const std::unordered_map<std::string, Builder::OpCompiler>& Builder::OpTable() {
  static const std::unordered_map<std::string, OpCompiler> table = {
      {"relax.nn.conv2d", Fusing<&Builder::Conv>},
      {"relax.nn.conv1d", Fusing<&Builder::Conv>},
      {"relax.nn.conv2d_transpose", Fusing<&Builder::Deconv2d>},
      {"relax.matmul", Fusing<&Builder::Matmul>},
      {"qnn.conv2d", Fusing<&Builder::QuantizedConv>},
      {"qnn.conv1d", Fusing<&Builder::QuantizedConv>},
      {"qnn.matmul", Fusing<&Builder::QuantizedMatmul>},
      {"byoc.dynamic_int8_matmul", Fusing<&Builder::DynamicInt8Matmul>},
      {"byoc.dynamic_int8_conv2d", Fusing<&Builder::DynamicInt8Conv2d>},
      {"qnn.add", Alone<&Builder::QuantizedAdd>},
      {"byoc.matmul_nbits", Alone<&Builder::MatmulNBits>},
      {"relax.quantize", Alone<&Builder::Quantize>},
      {"relax.dequantize", Alone<&Builder::Dequantize>},
      {"byoc.dequantize_constant", Alone<&Builder::DequantizeConstant>},
      {"relax.reshape", Alone<&Builder::Reshape>},
      {"relax.squeeze", Alone<&Builder::Reshape>},
      {"relax.expand_dims", Alone<&Builder::Reshape>},
      {"relax.flatten", Alone<&Builder::Reshape>},
      {"relax.broadcast_to", Alone<&Builder::BroadcastTo>},
      {"relax.permute_dims", Alone<&Builder::Transpose>},
      {"relax.nn.max_pool2d", Alone<&Builder::Pool>},
      {"relax.nn.avg_pool2d", Alone<&Builder::Pool>},
      {"relax.stack", Alone<&Builder::Stack>},
      {"relax.nn.softmax", Alone<&Builder::Softmax>},
      {"relax.nn.layer_norm", Alone<&Builder::LayerNorm>},
      {"byoc.rms_norm", Alone<&Builder::RmsNormOp>},
      {"relax.nn.group_norm", Alone<&Builder::GroupNorm>},
      {"relax.concat", Alone<&Builder::Concat>},
      {"relax.image.resize2d", Alone<&Builder::Resize>},
      {"relax.strided_slice", Alone<&Builder::StridedSlice>},
      {"relax.nn.pad", Alone<&Builder::Pad>},
      {"relax.split", Alone<&Builder::Split>},
      {"relax.nn.batch_norm", Alone<&Builder::BatchNorm>},
      {"byoc.lrn", Alone<&Builder::Lrn>},
      {"byoc.byte_table", Alone<&Builder::ByteTableOp>},
      {"relax.erf", Alone<&Builder::PerElementOp>},
      {"relax.sin", Alone<&Builder::PerElementOp>},
      {"relax.cos", Alone<&Builder::PerElementOp>},
      {"byoc.nan_to", Alone<&Builder::NanToOp>},
      {"byoc.rotary", Alone<&Builder::RotaryOp>},
      {"relax.where", Alone<&Builder::WhereOp>},
      {"relax.gather_elements", Alone<&Builder::GatherElementsOp>},
      {"relax.scatter_elements", Alone<&Builder::ScatterElementsOp>},
      {"relax.nn.prelu", Alone<&Builder::Prelu>},
  };
  return table;
}

size_t Builder::CompileOp(size_t k) {
  if (merged_.count(k)) return k + 1;  // computed with an earlier matmul (SideBySide)
  if (deferred_attention_.count(k)) {
    BlockedAttention(k);
    return k + 1;
  }
  if (deferred_decode_.count(k)) {
    DecodeAttentionStep(k);
    return k + 1;
  }
  if (in_decode_attention_.count(k)) return k + 1;  // computed by the decode attention at its context matmul
  if (size_t next = DeferAttentionAt(k)) return next;
  const BodyOp& op = g_.ops()[k];
  // Units that span ops: an int8 element-wise unit (dequantize, element-wise ops, quantize) and a channel
  // shuffle (reshape, transpose, reshape), each starting with a kernel the table does not fuse ops after; each
  // returns how many ops it took, 0 if none. The activations spelled as several ops arrive as one op
  // (codegens/dnnl/activations.py).
  for (size_t (Builder::*form)(size_t) : {&Builder::FakeQuantizedAt, &Builder::ChannelShuffleAt})
    if (size_t n = (this->*form)(k)) return k + n;
  Attrs a(op.attrs, op.where);
  auto entry = OpTable().find(op.kernel);
  if (entry != OpTable().end()) return entry->second(*this, k, op, a);
  // The families with an algorithm per kernel: reductions, binary ops, and element-wise functions.
  if (const algorithm* reduction = ReductionOf(op.kernel)) {
    Reduce(op, a, *reduction);
  } else if (const algorithm* alg = BinaryAlgorithm(op.kernel)) {
    Binary(op, *alg, Commutes(op.kernel));
  } else {
    PostOp p;
    if (!EltwiseOf(op, &p)) Fail(op.where + ": no oneDNN primitive for " + op.kernel);
    Arity(op, op.kernel == "relax.power" ? 2 : 1);
    Eltwise(op, op.inputs[0], p.alg, p.alpha, p.beta, op.output);
  }
  return k + 1;
}

void Builder::Arity(const BodyOp& op, size_t n) const {
  if (op.inputs.size() != n) Fail(op.where + " takes " + std::to_string(n) + " inputs, got " + std::to_string(op.inputs.size()));
}

void Builder::SameShape(const BodyOp& op, int input) const {
  if (g_.Shape(input) != g_.Shape(op.output))
    Fail(op.where + ": output shape " + ShapeStr(g_.Shape(op.output)) + " differs from " + ShapeStr(g_.Shape(input)));
}

}  // namespace dnnl_runtime
}  // namespace byoc
