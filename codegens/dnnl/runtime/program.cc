// program.cc -- the builder: a partition's ops compiled into steps on values (the op table is CompileOp's).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include <chrono>
#include <optional>

#include "program.h"

namespace byoc {
namespace dnnl_runtime {

Program::Program(const ParsedGraph& graph, int max_threads, std::shared_ptr<SharedConsts> shared)
      : g_(graph), value_of_(graph.tensors().size(), -1), shared_(std::move(shared)),
        winograd_(graph.BoolOption("winograd", true)) {
  for (size_t slot = 0; slot < g_.inputs().size(); ++slot) {
    int id = g_.inputs()[slot];
    value_of_[id] = NewValue(Plain(g_.Shape(id), DataType(g_.tensor(id))), Storage::kInput, static_cast<int>(slot));
  }
  for (size_t id = 0; id < g_.tensors().size(); ++id) {
    if (g_.tensor(id).kind == Kind::kConst) {
      const std::vector<float>& data = g_.const_data(static_cast<int>(id));
      if (data.empty()) Fail("constant " + g_.tensor(id).name + " is empty (zero-sized tensors are not supported)");
      Desc desc = Plain(g_.Shape(id));
      consts_.push_back(memory(desc, Engine(), const_cast<float*>(data.data())));
      value_of_[id] = NewValue(desc, Storage::kConst, static_cast<int>(consts_.size() - 1));
    }
  }
  given_values_ = static_cast<int>(values_.size());
  const std::vector<BodyOp>& ops = g_.ops();
  OmpThreads omp;  // oneDNN sizes each primitive's work split for the team size current at creation
  double total_us = 0;
  for (const BodyOp& op : ops) total_us += WorkUs(op);
  for (size_t k = 0; k < ops.size();) {
    double op_us = WorkUs(ops[k]);
    threads_ = op_us >= kParallelOpUs && (total_us >= kParallelModuleUs || op_us >= kParallelAloneUs) ? max_threads : 1;
    omp.Set(threads_);
    try {
      k = CompileOp(k);
    } catch (const dnnl::error& err) {
      Fail(ops[k].where + ": oneDNN cannot run this op (" + err.what() + ")");
    }
  }
  BindOutputs();
  PlanArena();
  step_times_ = std::make_unique<StepTime[]>(steps_.size());
  parallel_ = std::any_of(steps_.begin(), steps_.end(), [](const Step& step) { return step.threads > 1; });
}

void Program::Run(float* const* in, float* const* out) const {
  std::unique_ptr<Workspace> ws = Take();
  for (Bound& b : ws->inputs) b.mem.set_data_handle(reinterpret_cast<char*>(in[b.slot]) + b.offset);
  for (Bound& b : ws->outputs) b.mem.set_data_handle(reinterpret_cast<char*>(out[b.slot]) + b.offset);
  {
    std::optional<HeldOnPlace> held;
    if (parallel_) held.emplace();
    OmpThreads omp;
    bool timed = g_step_timing.load(std::memory_order_relaxed);
    for (size_t i = 0; i < steps_.size(); ++i) {
      omp.Set(steps_[i].threads);
      auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
      if (steps_[i].kernel) {
        steps_[i].kernel->Run(ws->args[i]);
        g_kernel_runs.fetch_add(1, std::memory_order_relaxed);
      } else {
        steps_[i].primitive.execute(ws->stream, ws->args[i]);
      }
      if (timed) {
        ws->stream.wait();
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
        step_times_[i].calls.fetch_add(1, std::memory_order_relaxed);
        step_times_[i].ns.fetch_add(ns.count(), std::memory_order_relaxed);
      }
    }
    ws->stream.wait();
  }
  Give(std::move(ws));
}

// -- values and steps ----------------------------------------------------------------
int Program::NewValue(const Desc& desc, Storage storage, int slot) {
  values_.push_back({desc, storage, slot});
  return static_cast<int>(values_.size() - 1);
}

// The buffer of `v` seen as `desc` (same bytes: a reshape), or the part of it `offset` bytes in.
int Program::NewView(int v, const Desc& desc, size_t offset) {
  values_.push_back({desc, Storage::kTemp, -1, Root(v), values_[v].offset + offset});
  return static_cast<int>(values_.size() - 1);
}

// Whether `id` is not a partition output and every op that reads it is a matmul, or a permute_dims that only
// matmuls read in turn (K transposed twice: heads split off, then K^T).
bool Program::OnlyMatmulsRead(int id) const {
  const std::vector<int>& outputs = g_.outputs();
  if (g_.uses(id) == 0 || std::find(outputs.begin(), outputs.end(), id) != outputs.end()) return false;
  for (const BodyOp& op : g_.ops()) {
    if (std::find(op.inputs.begin(), op.inputs.end(), id) == op.inputs.end() || op.kernel == "relax.matmul") continue;
    if (op.kernel != "relax.permute_dims" || !OnlyMatmulsRead(op.output)) return false;
  }
  return true;
}

// The one op that reads graph tensor `id` (which is no partition output), or null.
const BodyOp* Program::OnlyReader(int id) const {
  const std::vector<int>& outputs = g_.outputs();
  if (g_.uses(id) != 1 || std::find(outputs.begin(), outputs.end(), id) != outputs.end()) return nullptr;
  for (const BodyOp& op : g_.ops())
    if (std::find(op.inputs.begin(), op.inputs.end(), id) != op.inputs.end()) return &op;
  return nullptr;
}

// Where a primitive writes graph tensor `id` of `dims` when a permute_dims alone reads it: through strides that
// make the permuted tensor plain, so the permute_dims is a view with no step (Program::Transpose). Plain otherwise.
Desc Program::TransposedDst(int id, const Dims& dims) const {
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
  return Desc(dims, type, strides);
}

// The value holding graph tensor `id` in layout `desc`, reordering once if needed.
int Program::As(int id, const Desc& desc) {
  int v = value_of_[id];
  if (v < 0) Fail("tensor " + g_.tensor(id).name + " is read before it is computed");
  if (values_[v].desc == desc) return v;
  auto key = std::make_pair(id, DescKey(desc));
  auto cached = reorders_.find(key);
  if (cached != reorders_.end()) return cached->second;
  int target;
  if (StorageOf(v) == Storage::kConst) {
    target = ReorderConst(v, desc);
  } else {
    target = NewTemp(desc);
    AddReorder(v, target);
  }
  reorders_[key] = target;
  return target;
}

std::string Program::DescKey(const Desc& d) {
  std::ostringstream os;
  for (auto x : d.get_dims()) os << x << ',';
  os << '|' << static_cast<int>(d.get_data_type()) << '|' << static_cast<int>(d.get_format_kind()) << '|';
  if (d.get_format_kind() == memory::format_kind::blocked) {
    for (auto x : d.get_strides()) os << x << ',';
    os << '|';
    for (auto x : d.get_inner_blks()) os << x << ',';
    os << '|';
    for (auto x : d.get_inner_idxs()) os << x << ',';
  }
  return os.str();
}

void Program::AddReorder(int from, int to) {
  dnnl::reorder::primitive_desc pd(Engine(), values_[from].desc, Engine(), values_[to].desc, UserScratchpad());
  AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, from, values_[from].desc}, {DNNL_ARG_TO, to, values_[to].desc}},
          pd.scratchpad_desc());
}

void Program::AddStep(dnnl::primitive primitive, std::vector<Arg> args, const Desc& scratchpad,
                      std::shared_ptr<const Kernel> kernel) {
  for (const Arg& a : args) {
    if (StorageOf(a.value) != Storage::kTemp) continue;
    int step = static_cast<int>(steps_.size());
    auto& life = lifetimes_.at(Root(a.value));
    if (life.first < 0 || life.first > step) life.first = step;
    life.second = std::max(life.second, step);
  }
  std::string implementation = kernel ? std::string("kernel byoc:") + kernel->Name() : ImplementationOf(primitive);
  steps_.push_back({std::move(primitive), std::move(args), scratchpad, threads_, std::move(kernel), implementation});
}

// "<primitive kind> <implementation>" as oneDNN's verbose log names them ("binary jit:uni").
std::string Program::ImplementationOf(const dnnl::primitive& primitive) {
  const_dnnl_primitive_desc_t pd = primitive.get_primitive_desc();
  const char* impl = nullptr;
  dnnl_primitive_kind_t kind = dnnl_undefined_primitive;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind);
  return std::string(dnnl_prim_kind2str(kind)) + " " + (impl ? impl : "?");
}

std::vector<std::pair<int64_t, int64_t>> Program::StepTimes() const {
  std::vector<std::pair<int64_t, int64_t>> all;
  for (size_t i = 0; i < steps_.size(); ++i) all.emplace_back(step_times_[i].calls.load(), step_times_[i].ns.load());
  return all;
}

std::vector<std::string> Program::Implementations() const {
  std::vector<std::string> all;
  for (const Step& s : steps_) all.push_back(s.implementation);
  return all;
}

// Estimated single-thread time of op `op` (the head of the primitive it starts), in microseconds.
double Program::WorkUs(const BodyOp& op) const {
  auto numel = [this](int id) {
    double n = 1;
    for (int64_t d : g_.Shape(id)) n *= static_cast<double>(d);
    return n;
  };
  double out = numel(op.output), macs = 0, elements = out;
  bool conv = op.kernel == "relax.nn.conv2d" || op.kernel == "relax.nn.conv1d" || op.kernel == "qnn.conv2d" ||
              op.kernel == "qnn.conv1d";
  if ((conv || op.kernel == "relax.nn.conv2d_transpose") && op.inputs.size() > 1) {
    const std::vector<int64_t>& w = g_.Shape(op.inputs[1]);  // OIHW (IOHW): work per output (input) element
    double per = 1;
    for (size_t i = 1; i < w.size(); ++i) per *= static_cast<double>(w[i]);
    macs = (conv ? out : numel(op.inputs[0])) * per;
  } else if ((op.kernel == "relax.matmul" || op.kernel == "qnn.matmul") && !op.inputs.empty() &&
             !g_.Shape(op.inputs[0]).empty()) {
    macs = out * static_cast<double>(g_.Shape(op.inputs[0]).back());
  }
  for (int x : op.inputs)
    if (x >= 0) elements += numel(x);
  return macs / kMacsPerUs + elements / kElementsPerUs;
}

int Program::NewTemp(const Desc& desc) {
  int v = NewValue(desc, Storage::kTemp);
  lifetimes_[v] = {-1, -1};
  return v;
}

// The output of op `id` becomes a temp value in the layout the primitive chose.
int Program::Define(int id, const Desc& desc) {
  value_of_[id] = NewTemp(desc);
  return value_of_[id];
}

// -- ops -----------------------------------------------------------------------------
// The op table: what each kernel compiles to. An entry compiles the op at `k` (and the ops after it that it
// fuses: a conv's bias and activations, ...) and returns the index of the first op after them.
const std::unordered_map<std::string, Program::OpCompiler>& Program::OpTable() {
  static const std::unordered_map<std::string, OpCompiler> table = {
      {"relax.nn.conv2d", Fusing<&Program::Conv>},
      {"relax.nn.conv1d", Fusing<&Program::Conv>},
      {"relax.nn.conv2d_transpose", Fusing<&Program::Deconv2d>},
      {"relax.matmul", Fusing<&Program::Matmul>},
      {"qnn.conv2d", Fusing<&Program::QuantizedConv>},
      {"qnn.conv1d", Fusing<&Program::QuantizedConv>},
      {"qnn.matmul", Fusing<&Program::QuantizedMatmul>},
      {"qnn.add", Alone<&Program::QuantizedAdd>},
      {"relax.quantize", Alone<&Program::Quantize>},
      {"relax.dequantize", Alone<&Program::Dequantize>},
      {"relax.reshape", Alone<&Program::Reshape>},
      {"relax.squeeze", Alone<&Program::Reshape>},
      {"relax.expand_dims", Alone<&Program::Reshape>},
      {"relax.flatten", Alone<&Program::Reshape>},
      {"relax.broadcast_to", Alone<&Program::BroadcastTo>},
      {"relax.permute_dims", Alone<&Program::Transpose>},
      {"relax.nn.max_pool2d", Alone<&Program::Pool>},
      {"relax.nn.avg_pool2d", Alone<&Program::Pool>},
      {"relax.stack", Alone<&Program::Stack>},
      {"relax.nn.softmax", Alone<&Program::Softmax>},
      {"relax.nn.layer_norm", Alone<&Program::LayerNorm>},
      {"relax.nn.group_norm", Alone<&Program::GroupNorm>},
      {"relax.concat", Alone<&Program::Concat>},
      {"relax.image.resize2d", Alone<&Program::Resize>},
      {"relax.strided_slice", Alone<&Program::StridedSlice>},
      {"relax.nn.pad", Alone<&Program::Pad>},
      {"relax.split", Alone<&Program::Split>},
      {"relax.nn.batch_norm", Alone<&Program::BatchNorm>},
      {"byoc.lrn", Alone<&Program::Lrn>},
  };
  return table;
}

size_t Program::CompileOp(size_t k) {
  if (merged_.count(k)) return k + 1;  // computed with an earlier matmul (SideBySide)
  if (deferred_attention_.count(k)) {
    BlockedAttention(k);
    return k + 1;
  }
  if (size_t next = DeferAttentionAt(k)) return next;
  const BodyOp& op = g_.ops()[k];
  // Units that span ops: an int8 element-wise unit (dequantize, element-wise ops, quantize) and a channel
  // shuffle (reshape, transpose, reshape), each starting with a kernel the table does not fuse ops after; each
  // returns how many ops it took, 0 if none. The activations spelled as several ops arrive as one op
  // (codegens/dnnl/activations.py).
  for (size_t (Program::*form)(size_t) : {&Program::FakeQuantizedAt, &Program::ChannelShuffleAt})
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

void Program::Arity(const BodyOp& op, size_t n) const {
  if (op.inputs.size() != n) Fail(op.where + " takes " + std::to_string(n) + " inputs, got " + std::to_string(op.inputs.size()));
}

void Program::SameShape(const BodyOp& op, int input) const {
  if (g_.Shape(input) != g_.Shape(op.output))
    Fail(op.where + ": output shape " + ShapeStr(g_.Shape(op.output)) + " differs from " + ShapeStr(g_.Shape(input)));
}

}  // namespace dnnl_runtime
}  // namespace byoc
