/*
 * dnnl_runtime.cc -- the dnnl vendor's runtime: a partition graph (the JSON of
 * byoc/codegens/json_runtime/serializer.py) executed with oneDNN primitives.
 *
 * Everything is decided once, when the module is created or loaded:
 *  - one primitive per node head (conv2d, matmul, pooling, ...), with the
 *    node's bias, element-wise and residual-add ops folded in as post-ops;
 *  - activation layouts chosen by oneDNN (format "any"), with a reorder only
 *    where a consumer needs another layout or the caller needs a plain one;
 *  - constant weights reordered once into the layout their primitive wants;
 *  - a memory plan that packs intermediates into one arena by lifetime.
 * A call binds the caller's input and output buffers (destination-passing:
 * an output in plain layout is written in place) and executes the steps.
 *
 * Calls are thread safe: a call takes a Workspace (arena, scratchpad, memory
 * objects, stream) from a pool and gives it back; a second thread running at
 * the same time gets its own.
 *
 * Threads: each primitive gets its own OpenMP team size, decided when it is
 * created from the work it does. Small primitives, and every primitive of a
 * module whose whole run is short, run on the calling thread alone: a team of
 * two pays a wake-up and a barrier per primitive, which costs tens of
 * microseconds on an idle machine and a scheduler time slice (milliseconds)
 * when another process holds the other core. Larger ones use up to the process-wide
 * maximum byoc sets (byoc.dnnl.set_max_threads: threads= or the CPUs the
 * process may use), else OpenMP's own default. oneDNN fixes a primitive's
 * work split when it is created, so the maximum applies to modules created
 * after it is set; a call restores the caller's OpenMP setting when it ends.
 * On a busy machine a module runs a second program, compiled for one thread,
 * while its team's runs are mostly waiting (see "contention" below).
 */
#include <oneapi/dnnl/dnnl.hpp>

#include <omp.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "byte_table.h"
#include "graph_runtime.h"
#include "winograd.h"

namespace byoc {
namespace graph_runtime {
const char* const kRuntimeName = "dnnl";
}  // namespace graph_runtime

namespace dnnl_runtime {

using namespace byoc::graph_runtime;  // NOLINT: this file is one runtime built on it
using dnnl::algorithm;
using dnnl::memory;
using dnnl::post_ops;
using dnnl::primitive_attr;
using dnnl::prop_kind;
using Desc = dnnl::memory::desc;
using Dims = dnnl::memory::dims;

dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// -- threads -------------------------------------------------------------------------------
std::atomic<int> g_max_threads{0};  // set by byoc (byoc.dnnl.set_max_threads); 0: OpenMP's default

int MaxThreads() {
  int n = g_max_threads.load();
  return n > 0 ? n : omp_get_max_threads();
}

// Steps byoc ran itself (Kernel: Winograd transforms, byte tables) in this process: byoc.dnnl.kernel_runs().
std::atomic<int64_t> g_kernel_runs{0};

// Single-thread work in microseconds, roughly, on AVX2: multiply-adds of a convolution or
// matmul, and elements read and written by anything else.
constexpr double kMacsPerUs = 20000, kElementsPerUs = 2500;
// A primitive below this runs on one thread; so does every primitive of a module whose
// total is below kParallelModuleUs (a whole run shorter than one scheduler time slice
// gains nothing from a team that may wait a time slice for its second thread).
constexpr double kParallelOpUs = 25, kParallelModuleUs = 1000;

// Sets the calling thread's OpenMP team size for its lifetime, then puts the caller's back.
class OmpThreads {
 public:
  OmpThreads() : saved_(omp_get_max_threads()), current_(saved_) {}
  ~OmpThreads() { omp_set_num_threads(saved_); }
  void Set(int n) {
    if (n != current_) omp_set_num_threads(current_ = n);
  }

 private:
  int saved_, current_;
};

constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// oneDNN has no rank-0 tensors: a scalar is a 1-element vector.
Dims DimsOf(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1};
  return Dims(shape.begin(), shape.end());
}

// Row-major (the layout of every tensor the caller and TVM hand over); a
// shape (scalars included) or oneDNN dims.
Desc Plain(const std::vector<int64_t>& shape, memory::data_type type = memory::data_type::f32) {
  Dims dims = DimsOf(shape);
  Dims strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i > 0; --i) {
    strides[i - 1] = stride;
    stride *= dims[i - 1];
  }
  return Desc(dims, type, strides);
}

// The oneDNN type of a graph tensor (8-bit ones are the int8 units' activations).
memory::data_type DataType(const TensorInfo& t) {
  return t.dtype == "uint8" ? memory::data_type::u8 : t.dtype == "int8" ? memory::data_type::s8 : memory::data_type::f32;
}

// `shape` with leading 1s up to `rank` (numpy broadcasting).
Dims Padded(const std::vector<int64_t>& shape, size_t rank) {
  Dims dims(rank, 1);
  for (size_t i = 0; i < shape.size(); ++i) dims[rank - shape.size() + i] = shape[i];
  return dims;
}

Desc Any(const Dims& dims, memory::data_type type = memory::data_type::f32) {
  return Desc(dims, type, memory::format_tag::any);
}

primitive_attr UserScratchpad(const post_ops& ops = post_ops()) {
  primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(ops);
  return attr;
}

enum class Storage { kInput, kOutput, kConst, kTemp };

// A buffer the steps read or write, in one memory layout.
struct Value {
  Desc desc;
  Storage storage;
  int slot;       // input / output index, index into consts_, or arena offset (temps)
  int base = -1;  // a view (reshape) of this value's buffer; storage and slot are the base's
  size_t offset = 0;  // a view's bytes into the base's buffer (a contiguous part of it)
};

struct Arg {
  int key;    // DNNL_ARG_*
  int value;  // index into values_
  Desc desc;  // how the primitive sees the buffer (a value's desc, or a reshaped view of it)
  size_t offset = 0;  // bytes into the buffer where `desc` starts (a strided slice of it)
};

// A step byoc computes itself, between oneDNN primitives, on the memory objects of its arguments.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void Run(const std::unordered_map<int, memory>& args) const = 0;
};

struct Step {
  dnnl::primitive primitive;  // unless `kernel` is set
  std::vector<Arg> args;
  Desc scratchpad;
  int threads;  // the OpenMP team size it was created for
  std::shared_ptr<const Kernel> kernel = nullptr;
};

// `body(t0, t1)` over [0, n) split between the calling thread's OpenMP team (sized by the step).
template <class Body>
void SplitAcrossTeam(int64_t n, Body body) {
#pragma omp parallel
  {
    int64_t parts = omp_get_num_threads(), part = omp_get_thread_num();
    body(n * part / parts, n * (part + 1) / parts);
  }
}

template <class T>
T* Data(const std::unordered_map<int, memory>& args, int key) {
  return static_cast<T*>(args.at(key).get_data_handle());
}

// Winograd F(4x4, 3x3) (winograd.h): the input transform, x (NHWC) -> V.
class WinogradInput : public Kernel {
 public:
  explicit WinogradInput(const winograd::Geometry& g) : g_(g), zeros_(static_cast<size_t>(g.c), 0.0f) {}
  void Run(const std::unordered_map<int, memory>& args) const override {
    const float* x = Data<const float>(args, DNNL_ARG_SRC);
    float* v = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeam(g_.tiles(), [&](int64_t t0, int64_t t1) { winograd::InputTransform(g_, x, zeros_.data(), v, t0, t1); });
  }

 private:
  winograd::Geometry g_;
  std::vector<float> zeros_;
};

// Winograd F(4x4, 3x3): the output transform, M -> y (NHWC), with the bias and the conv's post-ops; a
// post-op's operand is argument DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, as for a primitive.
class WinogradOutput : public Kernel {
 public:
  WinogradOutput(const winograd::Geometry& g, bool bias, std::vector<winograd::Epilogue> epilogue)
      : g_(g), bias_(bias), epilogue_(std::move(epilogue)), zeros_(static_cast<size_t>(g.k), 0.0f) {}
  void Run(const std::unordered_map<int, memory>& args) const override {
    std::vector<winograd::Epilogue> epilogue = epilogue_;
    for (size_t i = 0; i < epilogue.size(); ++i) {
      auto operand = args.find(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1);
      if (operand != args.end()) epilogue[i].data = static_cast<const float*>(operand->second.get_data_handle());
    }
    const float* m = Data<const float>(args, DNNL_ARG_SRC);
    const float* bias = bias_ ? Data<const float>(args, DNNL_ARG_BIAS) : nullptr;
    float* y = Data<float>(args, DNNL_ARG_DST);
    SplitAcrossTeam(g_.tiles(), [&](int64_t t0, int64_t t1) {
      winograd::OutputTransform(g_, m, bias, zeros_.data(), epilogue, y, t0, t1);
    });
  }

 private:
  winograd::Geometry g_;
  bool bias_;
  std::vector<winograd::Epilogue> epilogue_;
  std::vector<float> zeros_;
};

// An 8-bit tensor mapped byte by byte through a 256-entry table: an element-wise unit whose output depends on
// its one 8-bit input alone (dequantize, element-wise ops, quantize). The table is the unit's own primitive
// run once on the 256 possible bytes (Program::LookupTableOf), so a call computes exactly what that primitive
// would, at a fraction of its cost (byte_table.h): oneDNN's binary with a chain of post-ops took 1-2 ns per
// element.
class LookupTable : public Kernel {
 public:
  LookupTable(std::vector<uint8_t> table, int64_t count) : table_(std::move(table)), count_(count) {}
  void Run(const std::unordered_map<int, memory>& args) const override {
    const uint8_t* x = Data<const uint8_t>(args, DNNL_ARG_SRC);
    uint8_t* y = Data<uint8_t>(args, DNNL_ARG_DST);
    const uint8_t* table = table_.data();
    SplitAcrossTeam(count_, [&](int64_t i0, int64_t i1) { byte_table::Map(table, x + i0, y + i0, i1 - i0); });
  }

 private:
  std::vector<uint8_t> table_;
  int64_t count_;
};

// The windows of a stride-1 unpadded conv1d over a batch-1 NWC source, as the rows of a matrix: row t is the
// bytes of x[t .. t + kernel) (contiguous in NWC), so the conv is one matmul of these rows (Program::WindowsAsMatmul).
class Windows : public Kernel {
 public:
  Windows(int64_t rows, int64_t row_bytes, int64_t step_bytes)
      : rows_(rows), row_bytes_(row_bytes), step_bytes_(step_bytes) {}
  void Run(const std::unordered_map<int, memory>& args) const override {
    const char* x = Data<const char>(args, DNNL_ARG_SRC);
    char* rows = Data<char>(args, DNNL_ARG_DST);
    SplitAcrossTeam(rows_, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) std::memcpy(rows + t * row_bytes_, x + t * step_bytes_, row_bytes_);
    });
  }

 private:
  int64_t rows_, row_bytes_, step_bytes_;
};

// One post-op: an element-wise function, or a binary op with a second tensor.
struct PostOp {
  algorithm alg;
  float alpha = 0.0f, beta = 0.0f;
  int tensor = -1;  // graph tensor of a binary post-op's second operand
};

// The ops of a node folded into its conv2d / matmul head.
struct Fused {
  std::vector<PostOp> post;
  int bias = -1;  // graph tensor of a bias added by the primitive itself
  int last;       // graph tensor the fused chain produces
  size_t next;    // first op index after the chain
};

// An 8-bit graph tensor a program computes as a byte table (LookupTable) of another.
struct ByteTable {
  int source;                  // the 8-bit graph tensor it maps
  std::vector<uint8_t> table;  // what it maps each byte of source to
  size_t step;                 // the step that applies it
};

// An on/off setting of the runtime in the environment: on when unset or empty.
bool SwitchOn(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0' || std::string(text) == "on") return true;
  if (std::string(text) == "off") return false;
  Fail(std::string(name) + "=" + text + " is neither on nor off");
}

// BYOC_DNNL_WINOGRAD: "on" (the default) runs eligible 3x3 convs as Winograd F(4x4, 3x3), "off" keeps
// oneDNN's direct kernels (the sums then match onnxruntime's to about 1e-7 of the output rather than 1e-5).
bool WinogradOn() { return SwitchOn("BYOC_DNNL_WINOGRAD"); }

// A partition compiled into oneDNN primitives for teams of at most `max_threads` threads.
class Program {
 public:
  Program(const ParsedGraph& graph, int max_threads)
      : g_(graph), value_of_(graph.tensors().size(), -1), winograd_(WinogradOn()) {
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
    const std::vector<BodyOp>& ops = g_.ops();
    OmpThreads omp;  // oneDNN sizes each primitive's work split for the team size current at creation
    double total_us = 0;
    for (const BodyOp& op : ops) total_us += WorkUs(op);
    for (size_t k = 0; k < ops.size();) {
      threads_ = total_us >= kParallelModuleUs && WorkUs(ops[k]) >= kParallelOpUs ? max_threads : 1;
      omp.Set(threads_);
      try {
        k = CompileOp(k);
      } catch (const dnnl::error& err) {
        Fail(ops[k].where + ": oneDNN cannot run this op (" + err.what() + ")");
      }
    }
    BindOutputs();
    PlanArena();
  }

  // Bytes a call works in (the arena of intermediates and the largest scratchpad), and the
  // bytes of the constants this program made (weights reordered for its primitives).
  size_t WorkspaceBytes() const { return arena_bytes_ + scratch_bytes_; }
  size_t ConstantBytes() const { return owned_const_bytes_; }

  // Whether any primitive runs on a team (else running it serially changes nothing).
  bool parallel() const {
    for (const Step& step : steps_)
      if (step.threads > 1) return true;
    return false;
  }

  void Run(float* const* in, float* const* out) const {
    std::unique_ptr<Workspace> ws = Take();
    for (Bound& b : ws->inputs) b.mem.set_data_handle(reinterpret_cast<char*>(in[b.slot]) + b.offset);
    for (Bound& b : ws->outputs) b.mem.set_data_handle(reinterpret_cast<char*>(out[b.slot]) + b.offset);
    {
      OmpThreads omp;
      for (size_t i = 0; i < steps_.size(); ++i) {
        omp.Set(steps_[i].threads);
        if (steps_[i].kernel) {
          steps_[i].kernel->Run(ws->args[i]);
          g_kernel_runs.fetch_add(1, std::memory_order_relaxed);
        } else
          steps_[i].primitive.execute(ws->stream, ws->args[i]);
      }
      ws->stream.wait();
    }
    Give(std::move(ws));
  }

 private:
  struct Bound {  // a memory object on a caller's buffer, set per call
    int slot;
    memory mem;
    size_t offset;
  };
  struct Workspace {
    std::unique_ptr<char, decltype(&std::free)> arena{nullptr, &std::free};
    std::vector<std::unordered_map<int, memory>> args;  // per step
    std::vector<Bound> inputs, outputs;
    dnnl::stream stream;
  };

  // -- values and steps ----------------------------------------------------------------
  int NewValue(const Desc& desc, Storage storage, int slot = -1) {
    values_.push_back({desc, storage, slot});
    return static_cast<int>(values_.size() - 1);
  }

  // The value that owns the buffer `v` reads: itself, or what it is a view of.
  int Root(int v) const { return values_[v].base >= 0 ? values_[v].base : v; }
  Storage StorageOf(int v) const { return values_[Root(v)].storage; }

  // The buffer of `v` seen as `desc` (same bytes: a reshape), or the part of it `offset` bytes in.
  int NewView(int v, const Desc& desc, size_t offset = 0) {
    values_.push_back({desc, Storage::kTemp, -1, Root(v), values_[v].offset + offset});
    return static_cast<int>(values_.size() - 1);
  }

  // The value holding graph tensor `id` in layout `desc`, reordering once if needed.
  int As(int id, const Desc& desc) {
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

  static std::string DescKey(const Desc& d) {
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

  void AddReorder(int from, int to) {
    dnnl::reorder::primitive_desc pd(Engine(), values_[from].desc, Engine(), values_[to].desc, UserScratchpad());
    AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, from, values_[from].desc}, {DNNL_ARG_TO, to, values_[to].desc}},
            pd.scratchpad_desc());
  }

  void AddStep(dnnl::primitive primitive, std::vector<Arg> args, const Desc& scratchpad,
               std::shared_ptr<const Kernel> kernel = nullptr) {
    for (const Arg& a : args) {
      if (StorageOf(a.value) != Storage::kTemp) continue;
      int step = static_cast<int>(steps_.size());
      auto& life = lifetimes_.at(Root(a.value));
      if (life.first < 0 || life.first > step) life.first = step;
      life.second = std::max(life.second, step);
    }
    steps_.push_back({std::move(primitive), std::move(args), scratchpad, threads_, std::move(kernel)});
  }

  // Estimated single-thread time of op `op` (the head of the primitive it starts), in microseconds.
  double WorkUs(const BodyOp& op) const {
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

  int NewTemp(const Desc& desc) {
    int v = NewValue(desc, Storage::kTemp);
    lifetimes_[v] = {-1, -1};
    return v;
  }

  // The output of op `id` becomes a temp value in the layout the primitive chose.
  int Define(int id, const Desc& desc) {
    value_of_[id] = NewTemp(desc);
    return value_of_[id];
  }

  // -- ops -----------------------------------------------------------------------------
  size_t CompileOp(size_t k) {
    if (merged_.count(k)) return k + 1;  // computed with an earlier matmul (SideBySide)
    const BodyOp& op = g_.ops()[k];
    Attrs a(op.attrs, op.where);
    const std::string& kernel = op.kernel;
    if (kernel == "relax.nn.conv2d" || kernel == "relax.nn.conv1d") return Conv(k, a);
    if (kernel == "relax.matmul") return Matmul(k);
    if (kernel == "qnn.conv2d" || kernel == "qnn.conv1d") return QuantizedConv(k, a);
    if (kernel == "qnn.matmul") return QuantizedMatmul(k, a);
    if (kernel == "qnn.add") {
      QuantizedAdd(op, a);
      return k + 1;
    }
    if (size_t n = FakeQuantizedAt(k)) return k + n;
    if (kernel == "relax.quantize" || kernel == "relax.dequantize") {
      QuantizeReorder(op, a, kernel == "relax.quantize");
      return k + 1;
    }
    if (kernel == "relax.nn.conv2d_transpose") return Deconv2d(k, a);
    if (size_t n = LrnAt(k)) return k + n;
    if (size_t n = ChannelShuffleAt(k)) return k + n;
    for (int x : op.inputs) {  // an activation spelled as several ops (GELU, swish, hard-swish...) on its own
      PostOp p;
      int reads = 0;
      if (x < 0 || g_.tensor(x).kind == Kind::kConst) continue;
      if (size_t n = ActivationAt(k, x, &p, &reads)) {
        Eltwise(op, x, p.alg, p.alpha, p.beta, g_.ops()[k + n - 1].output);
        return k + n;
      }
    }
    if (kernel == "relax.reshape" || kernel == "relax.squeeze" || kernel == "relax.expand_dims" ||
        kernel == "relax.flatten")
      Reshape(op);
    else if (kernel == "relax.permute_dims") Transpose(op, a);
    else if (kernel == "relax.nn.max_pool2d" || kernel == "relax.nn.avg_pool2d") Pool(op, a);
    else if (const algorithm* reduction = ReductionOf(kernel)) Reduce(op, a, *reduction);
    else if (kernel == "relax.stack") Stack(op, a);
    else if (kernel == "relax.broadcast_to") Reshape(op);  // one that repeats no values (the rule checks)
    else if (kernel == "relax.nn.softmax") Softmax(op, a);
    else if (kernel == "relax.nn.layer_norm") LayerNorm(op, a);
    else if (kernel == "relax.concat") Concat(op, a);
    else if (kernel == "relax.image.resize2d") Resize(op, a);
    else if (kernel == "relax.strided_slice") StridedSlice(op, a);
    else if (kernel == "relax.split") Split(op, a);
    else if (kernel == "relax.nn.batch_norm") BatchNorm(op, a);
    else if (const algorithm* alg = BinaryAlgorithm(kernel)) Binary(op, *alg, Commutes(kernel));
    else {
      PostOp p;
      if (!EltwiseOf(op, &p)) Fail(op.where + ": no oneDNN primitive for " + op.kernel);
      Arity(op, op.kernel == "relax.power" ? 2 : 1);
      Eltwise(op, op.inputs[0], p.alg, p.alpha, p.beta, op.output);
    }
    return k + 1;
  }

  void Eltwise(const BodyOp& op, int x, algorithm alg, float alpha, float beta, int output) {
    if (g_.Shape(x) != g_.Shape(output))
      Fail(op.where + ": output shape " + ShapeStr(g_.Shape(output)) + " differs from " + ShapeStr(g_.Shape(x)));
    int src = value_of_[x];
    Desc desc = values_[src].desc;
    dnnl::eltwise_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, alg, desc, desc, alpha, beta,
                                             UserScratchpad());
    int dst = Define(output, pd.dst_desc());
    AddStep(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, src, desc}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
            pd.scratchpad_desc());
  }

  // A one-input element-wise op (or a power with a scalar constant exponent) as a oneDNN
  // eltwise algorithm in `p`; false for any other op.
  bool EltwiseOf(const BodyOp& op, PostOp* p) const {
    p->alpha = p->beta = 0.0f;
    if (op.kernel == "relax.nn.relu") p->alg = algorithm::eltwise_relu;
    else if (op.kernel == "relax.sigmoid") p->alg = algorithm::eltwise_logistic;
    else if (op.kernel == "relax.tanh") p->alg = algorithm::eltwise_tanh;
    else if (op.kernel == "relax.sqrt") p->alg = algorithm::eltwise_sqrt;
    else if (op.kernel == "relax.exp") p->alg = algorithm::eltwise_exp;
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

  static bool Commutes(const std::string& kernel) { return kernel == "relax.add" || kernel == "relax.multiply"; }

  // A scalar constant operand of `op` other than `x`, or NaN.
  float ScalarOperand(const BodyOp& op, int x, bool* x_first) const {
    if (op.inputs.size() != 2) return NAN;
    int other = op.inputs[0] == x ? op.inputs[1] : op.inputs[1] == x ? op.inputs[0] : -1;
    if (other < 0 || g_.tensor(other).kind != Kind::kConst || g_.tensor(other).numel != 1) return NAN;
    *x_first = op.inputs[0] == x;
    return g_.const_data(other)[0];
  }

  // `x op c` (or `c op x` when !x_first) with a scalar c as alpha * x + beta, for add, subtract,
  // multiply and x / c (as x * (1/c)); false for anything else, or when c is NaN (no scalar).
  static bool LinearOf(const std::string& kernel, float c, bool x_first, float* alpha, float* beta) {
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

  static bool Near(float value, double want) { return std::fabs(value - want) <= 1e-6 * std::fabs(want) + 1e-7; }

  // x*0.5*(1+erf(x/sqrt(2))) spelled as five ops (the ONNX export of GELU): length of the match at j, or 0.
  size_t GeluAt(size_t j, int x) const {
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
  size_t GeluTanhAt(size_t j, int x, int* x_reads) const {
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
  size_t ActivationAt(size_t j, int x, PostOp* p, int* x_reads) const {
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

  // Folds the ops after the head at `k` (same node, single reader) into post-ops.
  // `bias_ok(tensor)` says whether a constant added first can be the primitive's bias.
  template <class BiasOk>
  Fused FusePostOps(size_t k, BiasOk bias_ok) const {
    const std::vector<BodyOp>& ops = g_.ops();
    Fused f;
    f.last = ops[k].output;
    f.next = k + 1;
    const std::vector<int64_t>& shape = g_.Shape(f.last);
    while (f.next < ops.size() && ops[f.next].node == ops[k].node) {
      const BodyOp& op = ops[f.next];
      int x = f.last;
      PostOp act;
      int reads = 0;
      size_t length = ActivationAt(f.next, x, &act, &reads);
      bool activation = length > 0 && g_.uses(x) == reads;
      if (!activation) length = 1;
      if (activation) {
        f.post.push_back(act);
      } else if (g_.uses(x) != 1 || op.inputs.empty() || op.inputs[0] < 0 || g_.Shape(op.output) != shape) {
        break;
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
      f.last = ops[f.next + length - 1].output;
      f.next += length;
    }
    return f;
  }

  // The algorithm `table` maps `kernel` to, or nullptr.
  static const algorithm* Find(const std::map<std::string, algorithm>& table, const std::string& kernel) {
    auto it = table.find(kernel);
    return it == table.end() ? nullptr : &it->second;
  }

  static const algorithm* BinaryAlgorithm(const std::string& kernel) {
    static const std::map<std::string, algorithm> table = {{"relax.add", algorithm::binary_add},
                                                           {"relax.multiply", algorithm::binary_mul},
                                                           {"relax.subtract", algorithm::binary_sub},
                                                           {"relax.divide", algorithm::binary_div}};
    return Find(table, kernel);
  }

  // The post-ops with each full-shape binary operand read in layout `full` (the
  // primitive's dst layout, once known), broadcast ones plain and rank-padded.
  post_ops BuildPostOps(const Fused& f, const std::vector<int64_t>& shape, const Desc* full) const {
    post_ops ops;
    for (const PostOp& p : f.post) {
      if (p.tensor < 0) ops.append_eltwise(p.alg, p.alpha, p.beta);
      else ops.append_binary(p.alg, BinaryDesc(p.tensor, shape, full));
    }
    return ops;
  }

  // How a binary post-op reads tensor `id`, in its own data type: of the full `shape`, in layout `full` (or its
  // own layout); broadcast, plain and seen with `shape`'s rank.
  Desc BinaryDesc(int id, const std::vector<int64_t>& shape, const Desc* full) const {
    const TensorInfo& t = g_.tensor(id);
    if (t.shape == shape && !full) return values_[value_of_[id]].desc;
    if (t.shape == shape) return DataType(t) == full->get_data_type() ? *full : Retyped(*full, t);
    return Plain(Padded(t.shape, std::max<size_t>(shape.size(), 1)), DataType(t));
  }

  // Creates the primitive desc, then again if a full-shape binary operand's layout
  // differs from the dst layout oneDNN chose (the operand is then reordered to it).
  template <class MakePd>
  auto CreateWithPostOps(const Fused& f, const std::vector<int64_t>& shape, MakePd make) const {
    auto pd = make(UserScratchpad(BuildPostOps(f, shape, nullptr)));
    Desc dst = pd.dst_desc();
    for (const PostOp& p : f.post) {
      if (p.tensor >= 0 && g_.Shape(p.tensor) == shape && values_[value_of_[p.tensor]].desc != dst)
        return make(UserScratchpad(BuildPostOps(f, shape, &dst)));
    }
    return pd;
  }

  void AddBinaryArgs(const Fused& f, std::vector<Arg>* args, const std::vector<int64_t>& shape, const Desc& dst) {
    for (size_t i = 0; i < f.post.size(); ++i) {
      int t = f.post[i].tensor;
      if (t < 0) continue;
      Desc desc = BinaryDesc(t, shape, &dst);
      int v = g_.Shape(t) == shape ? As(t, desc) : As(t, Plain(g_.Shape(t), DataType(g_.tensor(t))));
      args->push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1, v, desc});
    }
  }

  static bool Broadcasts(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
    if (from.size() > to.size()) return false;
    for (size_t i = 0; i < from.size(); ++i) {
      int64_t d = from[from.size() - 1 - i];
      if (d != 1 && d != to[to.size() - 1 - i]) return false;
    }
    return true;
  }

  // A conv1d/conv2d's checked geometry in oneDNN's terms: the weight's dims with the group axis,
  // dilation counted from 0, padding split into its two sides.
  struct ConvDims {
    int64_t groups;
    Dims weights, strides, dilation, pad_l, pad_r;
  };
  ConvDims ConvShape(const BodyOp& op, const Attrs& a) const {
    int w = op.inputs[1];
    if (g_.tensor(w).kind != Kind::kConst) Fail(op.where + ": the weight must be a constant (it is reordered at load)");
    const auto& ws = g_.Shape(w);
    size_t spatial = op.kernel == "relax.nn.conv1d" || op.kernel == "qnn.conv1d" ? 1 : 2;
    ConvGeometry g = CheckConv(a, g_.Shape(op.inputs[0]), ws, g_.Shape(op.output), spatial, op.where);
    Dims weights(ws.begin(), ws.end());
    if (g.groups != 1) {
      weights[0] /= g.groups;
      weights.insert(weights.begin(), g.groups);
    }
    ConvDims c{g.groups, weights, Dims(g.strides.begin(), g.strides.end()), {}, {}, {}};
    for (size_t d = 0; d < spatial; ++d) {
      c.dilation.push_back(g.dilation[d] - 1);
      c.pad_l.push_back(g.padding[d]);
      c.pad_r.push_back(g.padding[spatial + d]);
    }
    return c;
  }

  // A forward convolution over `c`, with a bias when `bias` is given.
  static dnnl::convolution_forward::primitive_desc ConvPd(const ConvDims& c, const Desc& src, const Desc& weights,
                                                          const Desc* bias, const Desc& dst,
                                                          const primitive_attr& attr) {
    if (bias)
      return dnnl::convolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                       algorithm::convolution_direct, src, weights, *bias, dst,
                                                       c.strides, c.dilation, c.pad_l, c.pad_r, attr);
    return dnnl::convolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                     algorithm::convolution_direct, src, weights, dst, c.strides,
                                                     c.dilation, c.pad_l, c.pad_r, attr);
  }

  size_t Conv(size_t k, const Attrs& a) {
    const BodyOp& op = g_.ops()[k];
    Arity(op, 2);
    int x = op.inputs[0], w = op.inputs[1];
    const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
    ConvDims c = ConvShape(op, a);
    int64_t channels = ys[1];
    Fused f = FusePostOps(k, [&](int b) { return ChannelBias(b, channels, ys.size()); });
    if (size_t next = WinogradConv(k, c, f)) return next;
    Dims src_dims = DimsOf(xs), dst_dims = DimsOf(ys);
    bool binary = std::any_of(f.post.begin(), f.post.end(), [](const PostOp& p) { return p.tensor >= 0; });
    if (size_t unit = binary ? 0 : UnitSpatialAxis(xs, g_.Shape(w), ys, c)) {
      DropSpatialAxis(&c, unit - 2);
      src_dims.erase(src_dims.begin() + static_cast<std::ptrdiff_t>(unit));
      dst_dims.erase(dst_dims.begin() + static_cast<std::ptrdiff_t>(unit));
    }
    Desc bias = Plain(Dims{channels});
    auto pd = CreateWithPostOps(f, ys, [&](const primitive_attr& attr) {
      return ConvPd(c, Any(src_dims), Any(c.weights), f.bias >= 0 ? &bias : nullptr, Any(dst_dims), attr);
    });
    // With a unit axis dropped, the graph's tensors are the same memory seen with it.
    Desc src = pd.src_desc(), dst = pd.dst_desc();
    int src_value = As(x, src_dims.size() == xs.size() ? src : src.reshape(DimsOf(xs)));
    // The weights, viewed with the group dimension, reordered once into the primitive's layout.
    int weights = ReorderConst(ConstView(value_of_[w], Plain(c.weights)), pd.weights_desc());
    std::vector<Arg> args = {{DNNL_ARG_SRC, src_value, src}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()}};
    if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, value_of_[f.bias], bias});
    AddBinaryArgs(f, &args, ys, dst);
    args.push_back({DNNL_ARG_DST, Define(f.last, dst_dims.size() == ys.size() ? dst : dst.reshape(DimsOf(ys))), dst});
    AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
    return f.next;
  }

  // A 3x3 stride-1 conv2d as Winograd F(4x4, 3x3) (winograd.h), where that pays: the input transform, one
  // batched oneDNN matmul of the 36 transformed products, the output transform with the bias and post-ops,
  // all NHWC. Measured on 2 AVX-512 cores, weights not in cache: 1.6-2.3x oneDNN's direct kernel from 14x14
  // tiles up (ResNet's 56x56x64, 28x28x128, 14x14x256), no gain under 25 M multiply-adds or 16 tiles (a
  // 7x7x512 layer: 0.7x) or with fewer than 32 channels in or out (SqueezeNet's 55x55, 16 -> 64: 1.05x, the
  // transforms as costly as the products). Returns the op after the fused chain, or 0 (the direct conv) when it does not apply:
  // another geometry, a post-op it has no epilogue for, or BYOC_DNNL_WINOGRAD=off.
  size_t WinogradConv(size_t k, const ConvDims& c, const Fused& f) {
    const BodyOp& op = g_.ops()[k];
    int x = op.inputs[0], w = op.inputs[1];
    const auto &xs = g_.Shape(x), &ys = g_.Shape(op.output);
    if (!winograd_ || op.kernel != "relax.nn.conv2d" || xs.size() != 4 || c.groups != 1 ||
        c.weights != Dims{ys[1], xs[1], 3, 3} || c.strides != Dims{1, 1} || c.dilation != Dims{0, 0} ||
        DataType(g_.tensor(x)) != memory::data_type::f32)
      return 0;
    for (const Dims* pads : {&c.pad_l, &c.pad_r})
      for (int64_t pad : *pads)
        if (pad < 0 || pad > 2) return 0;
    winograd::Geometry g{xs[0], xs[2], xs[3], xs[1], ys[1], ys[2], ys[3], c.pad_l[0], c.pad_l[1]};
    double macs = 9.0 * static_cast<double>(g.n * g.oh * g.ow) * static_cast<double>(g.c * g.k);
    if (g.c < 32 || g.k < 32 || g.tiles() < 16 || macs < 25e6) return 0;
    std::vector<winograd::Epilogue> epilogue;
    std::vector<std::pair<int, Desc>> operands;  // (post-op index, layout read) per tensor post-op
    Desc out(DimsOf(ys), memory::data_type::f32, memory::format_tag::nhwc);
    for (size_t i = 0; i < f.post.size(); ++i) {
      const PostOp& p = f.post[i];
      winograd::Epilogue e;
      e.alpha = p.alpha, e.beta = p.beta;
      if (p.tensor >= 0) {
        bool full = g_.Shape(p.tensor) == ys;
        bool per_channel = !full && Padded(g_.Shape(p.tensor), 4) == Dims{1, ys[1], 1, 1};
        if ((p.alg != algorithm::binary_add && p.alg != algorithm::binary_mul) || !(full || per_channel)) return 0;
        bool add = p.alg == algorithm::binary_add;
        e.kind = full ? (add ? winograd::Epilogue::kAddTensor : winograd::Epilogue::kMulTensor)
                      : (add ? winograd::Epilogue::kAddChannel : winograd::Epilogue::kMulChannel);
        operands.push_back({static_cast<int>(i), full ? out : Plain(g_.Shape(p.tensor))});
      } else {
        static const std::map<algorithm, winograd::Epilogue::Kind> kinds = {
            {algorithm::eltwise_relu, winograd::Epilogue::kRelu}, {algorithm::eltwise_clip, winograd::Epilogue::kClip},
            {algorithm::eltwise_clip_v2, winograd::Epilogue::kClip},
            {algorithm::eltwise_linear, winograd::Epilogue::kLinear},
            {algorithm::eltwise_swish, winograd::Epilogue::kSwish},
            {algorithm::eltwise_hardswish, winograd::Epilogue::kHardswish},
            {algorithm::eltwise_hardsigmoid, winograd::Epilogue::kHardsigmoid},
            {algorithm::eltwise_logistic, winograd::Epilogue::kLogistic}};
        auto kind = kinds.find(p.alg);
        if (kind == kinds.end()) return 0;
        e.kind = kind->second;
      }
      epilogue.push_back(e);
    }
    // The weights, transformed once, packed for the matmul.
    int64_t tiles = g.tiles();
    Desc v_desc({winograd::kPoints, tiles, g.c}, memory::data_type::f32, memory::format_tag::abc);
    Desc m_desc({winograd::kPoints, tiles, g.k}, memory::data_type::f32, memory::format_tag::abc);
    Desc u_plain({winograd::kPoints, g.c, g.k}, memory::data_type::f32, memory::format_tag::abc);
    dnnl::matmul::primitive_desc pd(Engine(), v_desc, Any(u_plain.get_dims()), m_desc, UserScratchpad());
    std::vector<float> u(static_cast<size_t>(winograd::kPoints * g.c * g.k));
    winograd::TransformWeights(g_.const_data(w).data(), g.k, g.c, u.data());
    memory packed(pd.weights_desc(), Engine()), given(u_plain, Engine(), u.data());
    dnnl::stream stream(Engine());
    dnnl::reorder(given, packed).execute(stream, given, packed);
    stream.wait();
    int u_value = KeepConst(packed);
    Desc nhwc(DimsOf(xs), memory::data_type::f32, memory::format_tag::nhwc);
    int src = As(x, nhwc), v = NewTemp(v_desc), m = NewTemp(m_desc);
    AddStep(dnnl::primitive(), {{DNNL_ARG_SRC, src, nhwc}, {DNNL_ARG_DST, v, v_desc}}, Desc(),
            std::make_shared<WinogradInput>(g));
    AddStep(dnnl::matmul(pd), {{DNNL_ARG_SRC, v, v_desc}, {DNNL_ARG_WEIGHTS, u_value, pd.weights_desc()},
                               {DNNL_ARG_DST, m, m_desc}},
            pd.scratchpad_desc());
    std::vector<Arg> args = {{DNNL_ARG_SRC, m, m_desc}};
    if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, value_of_[f.bias], Plain(Dims{g.k})});
    for (const auto& [i, desc] : operands)
      args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(i) | DNNL_ARG_SRC_1, As(f.post[i].tensor, desc), desc});
    args.push_back({DNNL_ARG_DST, Define(f.last, out), out});
    AddStep(dnnl::primitive(), std::move(args), Desc(), std::make_shared<WinogradOutput>(g, f.bias >= 0, epilogue));
    return f.next;
  }

  // The axis (2 or 3) of a conv2d along which input, kernel and output are all 1 wide, without
  // padding, or 0. The conv is then a conv1d over the other axis, and oneDNN's 1-D kernels run
  // it far faster than its 2-D ones a 1-wide axis (measured: Magika's 5x1 conv over 512x1 with
  // 256 -> 512 channels, 11.7 ms as conv2d, 5.9 ms as conv1d).
  static size_t UnitSpatialAxis(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                                const std::vector<int64_t>& ys, const ConvDims& c) {
    if (xs.size() != 4) return 0;
    for (size_t d = 0; d < 2; ++d)
      if (xs[2 + d] == 1 && ws[2 + d] == 1 && ys[2 + d] == 1 && c.pad_l[d] == 0 && c.pad_r[d] == 0) return 2 + d;
    return 0;
  }

  static void DropSpatialAxis(ConvDims* c, size_t d) {
    auto drop = [](Dims* dims, size_t i) { dims->erase(dims->begin() + static_cast<std::ptrdiff_t>(i)); };
    drop(&c->weights, c->weights.size() - 2 + d);
    for (Dims* dims : {&c->strides, &c->dilation, &c->pad_l, &c->pad_r}) drop(dims, d);
  }

  // A constant the primitive can add as its bias: one value per output channel of NCW/NCHW
  // (shape (1, C, 1...) or (C, 1...) with a 1 per spatial dim of the `rank`-D output).
  bool ChannelBias(int b, int64_t channels, size_t rank) const {
    const TensorInfo& t = g_.tensor(b);
    std::vector<int64_t> per_channel(rank, 1);
    per_channel[1] = channels;
    return t.kind == Kind::kConst &&
           (t.shape == per_channel || t.shape == std::vector<int64_t>(per_channel.begin() + 1, per_channel.end()));
  }

  // The same constant bytes seen with other dims (a group axis, leading 1s).
  int ConstView(int v, const Desc& desc) { return values_[v].desc == desc ? v : NewView(v, desc); }

  // A constant value in layout `desc` (reordered now, once, into memory the module owns). With `scales`, its
  // real values are quantized on the way into desc's integer type: round(x / scale), a scale per index of
  // `mask`'s axes (a unit's weight sent in real units: q * scale / scale is q again, exactly).
  // The same constant seen the same way is reordered once: an unrolled recurrence reads its weights at every
  // step (ddddocr's 32-step bidirectional LSTM made 300 MB of copies of 16 MB).
  int ReorderConst(int v, const Desc& desc, const std::vector<double>& scales = {}, int mask = 0) {
    if (values_[v].desc == desc && scales.empty()) return v;
    std::ostringstream key;
    key << Root(v) << '/' << DescKey(values_[v].desc) << '/' << DescKey(desc) << '/' << mask << std::hexfloat;
    for (double s : scales) key << ',' << s;
    auto [kept, fresh] = const_reorders_.try_emplace(key.str(), -1);
    if (fresh) {
      kept->second = KeepConst(Reordered(
          memory(values_[v].desc, Engine(), consts_[values_[Root(v)].slot].get_data_handle()), desc, scales, mask));
    }
    return kept->second;
  }

  // `source` reordered into new memory of layout `desc`, quantized by `scales` (if any) as for ReorderConst.
  static memory Reordered(memory source, const Desc& desc, const std::vector<double>& scales = {}, int mask = 0) {
    memory converted(desc, Engine());
    dnnl::stream stream(Engine());
    if (scales.empty()) {
      dnnl::reorder(source, converted).execute(stream, source, converted);
    } else {
      primitive_attr attr;
      attr.set_scales_mask(DNNL_ARG_DST, scales.size() > 1 ? mask : 0);
      std::vector<float> values(scales.begin(), scales.end());
      memory scale(Desc({static_cast<int64_t>(values.size())}, memory::data_type::f32, memory::format_tag::a),
                   Engine(), values.data());
      dnnl::reorder::primitive_desc pd(Engine(), source.get_desc(), Engine(), desc, attr);
      dnnl::reorder(pd).execute(stream, {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, converted},
                                         {DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, scale}});
    }
    stream.wait();
    return converted;
  }

  // What a qnn.conv*/qnn.matmul weight is quantized by on its way to s8: "w_scale" when it was sent in real units
  // ("weight_real", with the float definition's weight it shares), nothing when sent as integers in float32.
  static std::vector<double> WeightScales(const Attrs& a) {
    return a.Has("weight_real") && a.Bool("weight_real") ? a.Floats("w_scale") : std::vector<double>{};
  }

  // The s8 weights of a qnn.conv*/qnn.matmul in layout `desc` (WeightScales along `mask`).
  int QuantizedWeights(int v, const Desc& desc, const Attrs& a, int mask) {
    return ReorderConst(v, desc, WeightScales(a), mask);
  }

  // A constant this program made (its memory is owned here, and counted in ConstantBytes).
  int KeepConst(const memory& m) {
    consts_.push_back(m);
    owned_const_bytes_ += m.get_desc().get_size();
    return NewValue(m.get_desc(), Storage::kConst, static_cast<int>(consts_.size() - 1));
  }

  // The matmuls of one row vector by constant 2-D weights of the same depth, each alone in its group (no
  // post-ops), as one matmul by the weights side by side, each result a view of its columns: an unrolled LSTM's
  // per-gate products H·R_gᵀ. Each reads its whole weight to make one row, so one call instead of four saves
  // the calls' overhead: ddddocr's OCR model ran 248 1x512x512 matmuls at 16 us each. Returns k + 1, or 0
  // when op k has no such sibling.
  size_t SideBySide(size_t k) {
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
      return w.kind == Kind::kConst && w.shape.size() == 2 && DataType(w) == memory::data_type::f32 &&
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
        const std::vector<float>& data = g_.const_data(w);
        for (int64_t r = 0; r < depth; ++r) std::copy_n(data.data() + r * n, n, out + r * width + column);
        column += n;
      }
      joined->second = KeepConst(Reordered(plain, pd.weights_desc()));
    }
    int weights = joined->second;
    int result = NewTemp(dst);
    AddStep(dnnl::matmul(pd), {{DNNL_ARG_SRC, As(a, src), src}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()},
                               {DNNL_ARG_DST, result, dst}},
            pd.scratchpad_desc());
    int64_t column = 0;
    for (size_t j : siblings) {
      int64_t n = g_.Shape(ops[j].inputs[1])[1];
      value_of_[ops[j].output] = NewView(result, Plain({1, n}), static_cast<size_t>(column) * sizeof(float));
      column += n;
      if (j != k) merged_.insert(j);
    }
    return k + 1;
  }

  size_t Matmul(size_t k) {
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
    Fused f = FusePostOps(k, [&](int bias) {
      const TensorInfo& t = g_.tensor(bias);
      if (t.kind != Kind::kConst || t.shape.empty() || t.shape.back() != n || t.shape.size() > rank) return false;
      for (size_t i = 0; i + 1 < t.shape.size(); ++i)
        if (t.shape[i] != 1) return false;
      return true;
    });
    Desc src_desc = Plain(Padded(as, rank)), dst_desc = Plain(DimsOf(ys));
    bool const_weights = g_.tensor(b).kind == Kind::kConst;
    Dims weight_dims = Padded(bs, rank);
    Desc wanted_weights = const_weights ? Any(weight_dims) : Plain(weight_dims);
    Desc bias_desc = Plain(Padded({n}, rank));
    auto make = [&](const primitive_attr& attr) {
      if (f.bias >= 0) return dnnl::matmul::primitive_desc(Engine(), src_desc, wanted_weights, bias_desc, dst_desc, attr);
      return dnnl::matmul::primitive_desc(Engine(), src_desc, wanted_weights, dst_desc, attr);
    };
    auto pd = CreateWithPostOps(f, ys, make);
    if (const_weights && n % 256 == 0 && pd.weights_desc() == Plain(weight_dims)) {
      // A plain constant weight whose rows are a multiple of 1 kB is stored with rows 64 bytes longer: such rows
      // make oneDNN's gemm thrash the cache (4k aliasing). Measured on AVX2, [128, 768] x [768, 3072]: 8.4 ms,
      // 4.3 ms padded (BERT's feed-forward); 3-10% faster for N = 768 and 2304.
      Dims strides(rank, 1);
      strides[rank - 2] = n + 16;
      for (size_t i = rank - 2; i-- > 0;) strides[i] = strides[i + 1] * weight_dims[i + 1];
      wanted_weights = Desc(weight_dims, memory::data_type::f32, strides);
      auto padded = CreateWithPostOps(f, ys, make);
      if (std::string(padded.impl_info_str()) == pd.impl_info_str()) pd = padded;
    }
    int src = As(a, Plain(as));
    int weights = const_weights ? ReorderConst(ConstView(value_of_[b], Plain(weight_dims)), pd.weights_desc())
                                : As(b, Plain(bs));
    std::vector<Arg> args = {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()}};
    if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, value_of_[f.bias], bias_desc});
    AddBinaryArgs(f, &args, ys, dst_desc);
    args.push_back({DNNL_ARG_DST, Define(f.last, dst_desc), dst_desc});
    AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
    return f.next;
  }

  // -- int8 (see codegens/dnnl/quantized.py for what the Python side sends) ---------------
  // oneDNN's quantization: real = scale * (q - zero_point). Scales and zero points are
  // execution arguments; the module keeps them as constants.
  template <class T>
  int OwnedConst(const std::vector<T>& values, memory::data_type type) {
    Desc desc({static_cast<int64_t>(values.size())}, type, memory::format_tag::a);
    memory m(desc, Engine());
    std::memcpy(m.get_data_handle(), values.data(), values.size() * sizeof(T));
    return KeepConst(m);
  }

  // Arguments and attribute masks of one scale (per tensor, or per index of `mask`'s axes).
  void Scales(primitive_attr* attr, std::vector<Arg>* args, int arg, const std::vector<double>& scales, int mask) {
    attr->set_scales_mask(arg, scales.size() > 1 ? mask : 0);
    int v = OwnedConst(std::vector<float>(scales.begin(), scales.end()), memory::data_type::f32);
    args->push_back({DNNL_ARG_ATTR_SCALES | arg, v, values_[v].desc});
  }

  void ZeroPoint(primitive_attr* attr, std::vector<Arg>* args, int arg, int64_t zero_point) {
    if (zero_point == 0) return;
    attr->set_zero_points_mask(arg, 0);
    int v = OwnedConst(std::vector<int32_t>{static_cast<int32_t>(zero_point)}, memory::data_type::s32);
    args->push_back({DNNL_ARG_ATTR_ZERO_POINTS | arg, v, values_[v].desc});
  }

  // A folded relu or clip: the output range narrower than the type's, as a clip in real units
  // (post-ops run before the output scale).
  post_ops OutputRange(const Attrs& a, memory::data_type type) const {
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
  static Desc Retyped(const Desc& desc, const TensorInfo& t) {
    if (IsStrided(desc)) return Desc(desc.get_dims(), DataType(t), desc.get_strides());
    if (desc.get_format_kind() == memory::format_kind::blocked && t.shape.size() >= 3 && t.shape.size() <= 5)
      return ChannelsLast(t.shape, DataType(t));
    return Plain(t.shape, DataType(t));
  }

  // NWC / NHWC / NDHWC for a 3- to 5-D tensor.
  static Desc ChannelsLast(const std::vector<int64_t>& shape, memory::data_type type) {
    static const memory::format_tag tags[] = {memory::format_tag::nwc, memory::format_tag::nhwc,
                                              memory::format_tag::ndhwc};
    return Desc(DimsOf(shape), type, tags[shape.size() - 3]);
  }

  // qnn.add of two 8-bit tensors of one shape as one binary: scale_a * a + scale_b * b in f32,
  // then a linear post-op to the output's quantized units (1 / y_scale, the zero points folded
  // into the offset), clipped to the output range, rounded and saturated on the store.
  void QuantizedAdd(const BodyOp& op, const Attrs& a) {
    Arity(op, 2);
    int x = op.inputs[0], y = op.inputs[1];
    if (g_.Shape(x) != g_.Shape(op.output) || g_.Shape(y) != g_.Shape(op.output))
      Fail(op.where + ": operands of one shape only");
    int from = value_of_[x];
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
  size_t FakeQuantizedAt(size_t k) {
    const std::vector<BodyOp>& ops = g_.ops();
    size_t j = k;
    while (j < ops.size() && j < k + 2 && ops[j].kernel == "relax.dequantize" && PerTensor(ops[j])) ++j;
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
      int reads = 0, other_dq = -1;
      size_t n = ActivationAt(j, x, &p, &reads);  // hard-swish reads x twice
      if (n > 0 && g_.uses(x) != reads) n = 0;
      if (n == 0 && g_.uses(x) != 1) return 0;
      if (n == 0 && op.inputs.size() == 1 && op.inputs[0] == x && EltwiseOf(op, &p)) n = 1;
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
        if (Broadcasts(g_.Shape(other), shape) && (other_dq >= 0 || value_of_[other] >= 0)) {
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
    int from = value_of_[dq.inputs[0]];
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
        from = value_of_[source];
        src = values_[from].desc;
      }
      int64_t count = static_cast<int64_t>(src.get_size());
      byte_tables_[q.output] = {source, table, steps_.size()};
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
    args.push_back({DNNL_ARG_SRC_1, KeepConst(zero), zero_desc});
    args.push_back({DNNL_ARG_DST, Define(q.output, dst), dst});
    AddStep(dnnl::binary(pd), std::move(args), pd.scratchpad_desc());
    return j - k + 1;
  }

  // The 256 bytes x + 0 with post-ops `f` writes for the 256 bytes of `src`'s type, when its output depends on
  // each element of its source alone, else empty. That is so when each post-op is element-wise or reads a
  // tensor of `operands`: what that tensor holds for each of the 256 source codes (the source itself, a byte
  // table of it, or either dequantized; SiLU's x * sigmoid(x) reads x twice). src and dst must be dense 8-bit
  // layouts of one order (a byte's position is its element's in both, and no padding must stay zero).
  std::vector<uint8_t> LookupTableOf(const Fused& f, const Desc& src, const Desc& dst,
                                     const std::map<int, memory>& operands) const {
    int64_t numel = 1;
    for (int64_t d : src.get_dims()) numel *= d;
    if (src.get_size() != static_cast<size_t>(numel) || dst.get_size() != static_cast<size_t>(numel) ||
        src.get_strides() != dst.get_strides() || !src.get_inner_blks().empty() || !dst.get_inner_blks().empty())
      return {};
    Desc bytes_out(Dims{256}, dst.get_data_type(), memory::format_tag::a);
    memory out(bytes_out, Engine());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC_0, SourceCodes(src.get_data_type())}, {DNNL_ARG_DST, out}};
    post_ops ops;
    for (size_t i = 0; i < f.post.size(); ++i) {
      const PostOp& p = f.post[i];
      auto operand = operands.find(p.tensor);
      if (p.tensor < 0) {
        ops.append_eltwise(p.alg, p.alpha, p.beta);
      } else if (operand != operands.end()) {
        ops.append_binary(p.alg, operand->second.get_desc());
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1] = operand->second;
      } else {
        return {};
      }
    }
    Desc zero_desc(Dims{1}, memory::data_type::f32, memory::format_tag::a);
    memory zero(zero_desc, Engine());
    *static_cast<float*>(zero.get_data_handle()) = 0.0f;
    args[DNNL_ARG_SRC_1] = zero;
    primitive_attr attr;
    attr.set_post_ops(ops);
    dnnl::stream stream(Engine());
    dnnl::binary(dnnl::binary::primitive_desc(Engine(), algorithm::binary_add, args.at(DNNL_ARG_SRC_0).get_desc(),
                                              zero_desc, bytes_out, attr))
        .execute(stream, args);
    stream.wait();
    const auto* table = static_cast<const uint8_t*>(out.get_data_handle());
    return std::vector<uint8_t>(table, table + 256);
  }

  // The 256 codes of an 8-bit type, in byte order (an s8 byte b is the code int8_t(b)).
  static memory SourceCodes(memory::data_type type) {
    memory codes(Desc(Dims{256}, type, memory::format_tag::a), Engine());
    auto* bytes = static_cast<uint8_t*>(codes.get_data_handle());
    for (int b = 0; b < 256; ++b) bytes[b] = static_cast<uint8_t>(b);
    return codes;
  }

  // What graph tensor `id` (8-bit) holds for each of the 256 codes of `source`, when it is `source` itself or a
  // byte table of it (its table, seen as id's type); a null memory otherwise.
  memory BytesOf(int id, int source) const {
    memory::data_type type = DataType(g_.tensor(id));
    if (id == source) return SourceCodes(type);
    auto table = byte_tables_.find(id);
    if (table == byte_tables_.end() || table->second.source != source) return memory();
    memory bytes(Desc(Dims{256}, type, memory::format_tag::a), Engine());
    std::copy(table->second.table.begin(), table->second.table.end(), static_cast<uint8_t*>(bytes.get_data_handle()));
    return bytes;
  }

  // The byte tables the post-ops of `f` read, as they are or through one of the leading dequantizations
  // `dqs` (their composition is in the new table), are not computed when nothing else reads them.
  void DropComposedTables(const Fused& f, const std::vector<size_t>& dqs) {
    const std::vector<BodyOp>& ops = g_.ops();
    for (const PostOp& p : f.post) {
      if (p.tensor < 0) continue;
      int read = p.tensor;
      for (size_t i : dqs)
        if (ops[i].output == p.tensor) read = ops[i].inputs[0];
      TakeLastTable(read);
    }
  }

  // Graph tensor `id`'s byte table, taken out of the program (its step, its buffer) when nothing else reads
  // `id` and its step is the last one (a later step's reads are fixed); nullopt, changing nothing, otherwise.
  std::optional<ByteTable> TakeLastTable(int id) {
    auto table = byte_tables_.find(id);
    if (table == byte_tables_.end() || g_.uses(id) != 1 || table->second.step + 1 != steps_.size())
      return std::nullopt;
    ByteTable taken = std::move(table->second);
    byte_tables_.erase(table);
    steps_.pop_back();
    lifetimes_.erase(value_of_[id]);
    value_of_[id] = -1;
    return taken;
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

  // A quantize or dequantize with one scale and one zero point.
  static bool PerTensor(const BodyOp& op) {
    Attrs a(op.attrs, op.where);
    return a.Floats("scale").size() == 1 && a.Ints("zero_point").size() == 1;
  }

  // relax.quantize (f32 -> u8/s8) or relax.dequantize (u8/s8 -> f32): one reorder with scale and
  // zero point, from the input in whatever layout it has to a plain output.
  void QuantizeReorder(const BodyOp& op, const Attrs& a, bool quantize) {
    Arity(op, 1);
    int x = op.inputs[0];
    SameShape(op, x);
    std::vector<int64_t> zero_points = a.Ints("zero_point");
    for (int64_t z : zero_points)
      if (z != zero_points[0]) Fail(op.where + ": per-axis zero points are not supported (scales are)");
    int arg = quantize ? DNNL_ARG_DST : DNNL_ARG_SRC;
    int from = value_of_[x];
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
  primitive_attr QuantizedAttr(const Attrs& a, memory::data_type out, int weight_mask, std::vector<Arg>* args) {
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
  size_t QuantizedConv(size_t k, const Attrs& a) {
    const BodyOp& op = g_.ops()[k];
    if (op.inputs.size() != 2 && op.inputs.size() != 3) Fail(op.where + " takes 2 or 3 inputs");
    int x = op.inputs[0], w = op.inputs[1];
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
                    QuantizedWeights(ConstView(value_of_[w], Plain(c.weights)), pd.weights_desc(), a, weight_mask),
                    pd.weights_desc()});
    if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, value_of_[op.inputs[2]], bias});
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
  bool WindowsAsMatmul(const BodyOp& op, const Attrs& a, const ConvDims& c) {
    int x = op.inputs[0], w = op.inputs[1];
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
    Desc by_tap({taps, channels, outs}, memory::data_type::f32, Dims{1, taps, channels * taps});
    memory staged = Reordered(memory(by_tap, Engine(), const_cast<float*>(g_.const_data(w).data())),
                              Plain({taps, channels, outs}, memory::data_type::s8), WeightScales(a), 1 << 2);
    memory rows_of_weight(Plain({taps * channels, outs}, memory::data_type::s8), Engine(), staged.get_data_handle());
    int packed = KeepConst(Reordered(rows_of_weight, pd.weights_desc()));
    args.push_back({DNNL_ARG_SRC, rows_value, windows});
    args.push_back({DNNL_ARG_WEIGHTS, packed, pd.weights_desc()});
    if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, value_of_[op.inputs[2]], bias});
    Desc nwc_out = conv2d ? Desc({1, outs, rows, 1}, out, memory::format_tag::acdb)
                          : Desc({1, outs, rows}, out, memory::format_tag::acb);
    args.push_back({DNNL_ARG_DST, Define(op.output, nwc_out), dst});
    AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
    return true;
  }

  // An int8 matmul with constant s8 weights (per tensor, or per output column).
  size_t QuantizedMatmul(size_t k, const Attrs& a) {
    const BodyOp& op = g_.ops()[k];
    if (op.inputs.size() != 2 && op.inputs.size() != 3) Fail(op.where + " takes 2 or 3 inputs");
    int x = op.inputs[0], w = op.inputs[1];
    if (g_.tensor(w).kind != Kind::kConst) Fail(op.where + ": the weight must be a constant (it is reordered at load)");
    const auto &xs = g_.Shape(x), &ws = g_.Shape(w), &ys = g_.Shape(op.output);
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
                    QuantizedWeights(ConstView(value_of_[w], Plain(Padded(ws, rank))), pd.weights_desc(), a, weight_mask),
                    pd.weights_desc()});
    if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, value_of_[op.inputs[2]], bias});
    args.push_back({DNNL_ARG_DST, Define(op.output, dst), dst});
    AddStep(dnnl::matmul(pd), std::move(args), pd.scratchpad_desc());
    return k + 1;
  }

  // An int8 matmul [rows, K] x [K, N] as a 1x1 convolution over a rows x 1 NHWC image: the same bytes in and out,
  // and oneDNN's int8 1x1 convolution (weights packed once) runs 2.5-7x faster than its int8 gemm for a few rows
  // (a classifier, a token), and no slower for many (measured on AVX2 with 2 threads: [1, 2048] x [2048, 1000]
  // 0.04 ms against 0.15 ms). False, adding nothing, when oneDNN offers only its reference kernel.
  bool RowsAsConv(const BodyOp& op, const Attrs& a) {
    int x = op.inputs[0], w = op.inputs[1];
    const auto &xs = g_.Shape(x), &ws = g_.Shape(w);
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
    args.push_back({DNNL_ARG_WEIGHTS, QuantizedWeights(ConstView(value_of_[w], transposed), pd.weights_desc(), a, 1),
                    pd.weights_desc()});
    if (op.inputs.size() == 3) args.push_back({DNNL_ARG_BIAS, value_of_[op.inputs[2]], bias});
    args.push_back({DNNL_ARG_DST, Define(op.output, Plain(g_.Shape(op.output), out)), dst});
    AddStep(dnnl::convolution_forward(pd), std::move(args), pd.scratchpad_desc());
    return true;
  }

  // Same bytes, other shape: a view of the input in plain layout, no step.
  void Reshape(const BodyOp& op) {
    Arity(op, 1);
    if (g_.tensor(op.inputs[0]).numel != g_.tensor(op.output).numel)
      Fail(op.where + ": " + ShapeStr(g_.Shape(op.inputs[0])) + " and " + ShapeStr(g_.Shape(op.output)) +
           " have different sizes");
    if (g_.Shape(op.inputs[0]) == g_.Shape(op.output) && value_of_[op.inputs[0]] >= 0) {
      value_of_[op.output] = value_of_[op.inputs[0]];  // the same tensor: keep its layout, blocked or not
      return;
    }
    int v = value_of_[op.inputs[0]];
    if (v >= 0) {
      // The same bytes seen with the new dims when the layout allows it (unit dims dropped or added, or
      // dims merged that lie together): a conv's NWC output squeezed to 3-D stays NWC, with no copy to
      // plain and back (Magika: 0.76 ms of reorders around its conv).
      try {
        value_of_[op.output] = NewView(v, values_[v].desc.reshape(DimsOf(g_.Shape(op.output))));
        return;
      } catch (const dnnl::error&) {
      }
    }
    memory::data_type type = DataType(g_.tensor(op.output));
    value_of_[op.output] =
        NewView(As(op.inputs[0], Plain(g_.Shape(op.inputs[0]), type)), Plain(g_.Shape(op.output), type));
  }

  // A reorder from the input seen through permuted strides into a plain output.
  void Transpose(const BodyOp& op, const Attrs& a) {
    Arity(op, 1);
    const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
    std::vector<int64_t> perm;
    if (a.IsNone("axes")) {
      for (size_t d = xs.size(); d > 0; --d) perm.push_back(static_cast<int64_t>(d - 1));
    } else {
      for (int64_t axis : a.Ints("axes")) perm.push_back(NormAxis(axis, xs.size(), op.where));
    }
    std::vector<bool> seen(xs.size(), false);
    if (perm.size() != xs.size()) Fail(op.where + ": axes is not a permutation");
    memory::data_type type = DataType(g_.tensor(op.inputs[0]));
    int v = value_of_[op.inputs[0]];
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
    Desc view(dims, type, strides);
    if (g_.tensor(op.inputs[0]).kind == Kind::kConst) {  // a transposed weight: transposed once, at load
      value_of_[op.output] = ReorderConst(ConstView(v, view), Plain(ys));
      return;
    }
    int src = As(op.inputs[0], source);
    // Seen through the permuted strides, the bytes may already be plain or channels last (the NCW <-> NWC
    // transposes a TensorFlow export puts around each conv): the output is then that view, with no step.
    if (view == Plain(ys, type) || (ys.size() >= 3 && ys.size() <= 5 && view == ChannelsLast(ys, type))) {
      value_of_[op.output] = NewView(src, view);
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
  size_t ChannelShuffleAt(size_t k) {
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
        parts[3] != xs[2] || parts[4] != xs[3] || value_of_[x] < 0 || g_.tensor(x).kind == Kind::kConst)
      return 0;
    memory::data_type type = DataType(g_.tensor(x));
    Desc layout = IsStrided(values_[value_of_[x]].desc) ? values_[value_of_[x]].desc : ChannelsLast(xs, type);
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
  static bool IsStrided(const Desc& desc) {
    return desc.get_format_kind() == memory::format_kind::blocked && desc.get_inner_blks().empty();
  }

  void Pool(const BodyOp& op, const Attrs& a) {
    Arity(op, 1);
    bool max = op.kernel == "relax.nn.max_pool2d";
    if (a.Str("layout") != "NCHW" || a.Str("out_layout") != "NCHW") Fail(op.where + ": only NCHW is supported");
    const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
    if (xs.size() != 4 || ys.size() != 4 || xs[0] != ys[0] || xs[1] != ys[1]) Fail(op.where + ": pooling needs 4-D NCHW tensors");
    auto kernel = a.Ints("pool_size"), st = a.Ints("strides"), pad = a.Ints("padding"), dil = a.Ints("dilation");
    if (kernel.size() != 2 || st.size() != 2 || pad.size() != 4 || dil.size() != 2)
      Fail(op.where + ": pool_size/strides/dilation need 2 values and padding 4");
    if (!max && (a.Bool("ceil_mode") || dil[0] != 1 || dil[1] != 1))
      Fail(op.where + ": average pooling with ceil_mode or dilation is not supported");
    Dims pad_r = {pad[2], pad[3]};
    for (int d = 0; d < 2; ++d) {
      if (kernel[d] < 1 || st[d] < 1 || dil[d] < 1 || pad[d] < 0 || pad[d + 2] < 0) Fail(op.where + ": invalid window");
      int64_t span = dil[d] * (kernel[d] - 1) + 1;
      // ceil_mode: pad the end just enough for oneDNN's floor formula to give the output size.
      if ((xs[2 + d] + pad[d] + pad_r[d] - span) / st[d] + 1 != ys[2 + d]) pad_r[d] = (ys[2 + d] - 1) * st[d] + span - xs[2 + d] - pad[d];
      if (pad_r[d] < 0 || (xs[2 + d] + pad[d] + pad_r[d] - span) / st[d] + 1 != ys[2 + d])
        Fail(op.where + ": output shape " + ShapeStr(ys) + " does not follow from the attributes");
    }
    algorithm alg = max ? algorithm::pooling_max
                        : a.Bool("count_include_pad") ? algorithm::pooling_avg_include_padding
                                                      : algorithm::pooling_avg_exclude_padding;
    auto make = [&](const Desc& src) {
      return dnnl::pooling_forward::primitive_desc(Engine(), prop_kind::forward_inference, alg, src,
                                                   Any(DimsOf(ys), DataType(g_.tensor(op.output))), {st[0], st[1]},
                                                   {kernel[0], kernel[1]}, {dil[0] - 1, dil[1] - 1}, {pad[0], pad[1]},
                                                   pad_r, UserScratchpad());
    };
    auto pd = make(values_[value_of_[op.inputs[0]]].desc);
    // The source's layout has only a reference or plain-C kernel (a u8 NCHW tensor: ref, 26 ms in a ResNet-50;
    // a global max over a long NCW row: simple_nchw, 0.4 ms in Magika): take it channels last, if that jits.
    if (!IsJit(pd)) {
      auto nhwc = make(ChannelsLast(xs, DataType(g_.tensor(op.inputs[0]))));
      if (IsJit(nhwc)) pd = nhwc;
    }
    int src = As(op.inputs[0], pd.src_desc());
    int dst = Define(op.output, pd.dst_desc());
    AddStep(dnnl::pooling_forward(pd), {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
            pd.scratchpad_desc());
  }

  static const algorithm* ReductionOf(const std::string& kernel) {
    static const std::map<std::string, algorithm> table = {{"relax.mean", algorithm::reduction_mean},
                                                           {"relax.sum", algorithm::reduction_sum},
                                                           {"relax.max", algorithm::reduction_max},
                                                           {"relax.min", algorithm::reduction_min}};
    return Find(table, kernel);
  }

  // relax.mean, sum, max or min over some axes.
  void Reduce(const BodyOp& op, const Attrs& a, algorithm alg) {
    Arity(op, 1);
    bool mean = alg == algorithm::reduction_mean, additive = mean || alg == algorithm::reduction_sum;
    auto stacked = stacked_.find(op.inputs[0]);
    if (stacked != stacked_.end()) {
      if (additive)
        SumOf(op, stacked->second, mean);
      else
        ExtremeOf(op, stacked->second, alg == algorithm::reduction_max ? algorithm::binary_max : algorithm::binary_min);
      return;
    }
    const auto& xs = g_.Shape(op.inputs[0]);
    if (xs.empty()) Fail(op.where + ": a reduction of a scalar is not supported");
    Dims kept = DimsOf(xs);
    if (a.IsNone("axis")) {
      kept.assign(xs.size(), 1);
    } else {
      for (int64_t axis : a.Ints("axis")) kept[NormAxis(axis, xs.size(), op.where)] = 1;
    }
    int64_t numel = 1;
    for (auto d : kept) numel *= d;
    if (numel != g_.tensor(op.output).numel) Fail(op.where + ": output shape does not match the reduced axes");
    if (kept == DimsOf(xs)) {  // nothing to reduce: the reduction of one value is that value, a reshape
      Reshape(op);
      return;
    }
    int src = value_of_[op.inputs[0]];
    if ((mean || alg == algorithm::reduction_max) && (xs.size() == 3 || xs.size() == 4) && kept[0] == xs[0] &&
        kept[1] == xs[1] && std::all_of(kept.begin() + 2, kept.end(), [](int64_t d) { return d == 1; })) {
      GlobalPool(op, src, kept, mean ? algorithm::pooling_avg_exclude_padding : algorithm::pooling_max);
      return;
    }
    // The result is plain with the reduced axes kept; the graph's tensor is the same bytes without them.
    dnnl::reduction::primitive_desc pd(Engine(), alg, values_[src].desc, Plain(kept), 0.0f, 0.0f, UserScratchpad());
    if (IsReference(pd) && additive && ReduceByMatmul(op, kept, mean)) return;
    int dst = Define(op.output, Plain(g_.Shape(op.output)));
    AddStep(dnnl::reduction(pd), {{DNNL_ARG_SRC, src, values_[src].desc}, {DNNL_ARG_DST, dst, Plain(kept)}},
            pd.scratchpad_desc());
  }

  // The element-wise max (min) of `terms` (ONNX Max / Min of n tensors, stacked then reduced):
  // a chain of binary primitives on plain tensors (one term: its max with itself, a copy).
  void ExtremeOf(const BodyOp& op, const std::vector<int>& terms, algorithm alg) {
    const auto& ys = g_.Shape(op.output);
    for (int t : terms)
      if (g_.Shape(t) != ys) Fail(op.where + ": terms of another shape than " + ShapeStr(ys));
    Desc plain = Plain(ys);
    dnnl::binary::primitive_desc pd(Engine(), alg, plain, plain, plain, UserScratchpad());
    int acc = As(terms[0], plain);
    for (size_t i = std::min<size_t>(1, terms.size() - 1); i < terms.size(); ++i) {
      int dst = i + 1 == terms.size() ? Define(op.output, plain) : NewTemp(plain);
      AddStep(dnnl::binary(pd), {{DNNL_ARG_SRC_0, acc, plain}, {DNNL_ARG_SRC_1, As(terms[i], plain), plain},
                                 {DNNL_ARG_DST, dst, plain}},
              pd.scratchpad_desc());
      acc = dst;
    }
  }

  // A sum (mean) over consecutive axes as a matmul with a row of ones (1/K): viewed plain as
  // [outer, K, inner], it is ones[1, 1, K] x X[outer, K, inner]. oneDNN has only its reference
  // kernel for such reductions when the axes are not innermost (measured: 4 ms for a
  // 512x256 sum over the 512 axis in Magika, where the matmul takes tens of microseconds).
  // Returns false, having added nothing, when the reduced axes are not one run.
  bool ReduceByMatmul(const BodyOp& op, const Dims& kept, bool mean) {
    const auto& xs = g_.Shape(op.inputs[0]);
    std::vector<size_t> axes;  // the reduced ones
    for (size_t i = 0; i < xs.size(); ++i)
      if (kept[i] != xs[i]) axes.push_back(i);
    if (axes.empty()) return false;
    size_t first = axes.front(), last = axes.back();
    for (size_t j = first; j <= last; ++j)
      if (kept[j] == xs[j] && xs[j] != 1) return false;  // a kept axis between two reduced ones
    int64_t outer = 1, reduced = 1, inner = 1;
    for (size_t i = 0; i < xs.size(); ++i) (i < first ? outer : i <= last ? reduced : inner) *= xs[i];
    Desc ones_desc = Plain({1, 1, reduced});
    memory ones(ones_desc, Engine());
    std::fill_n(static_cast<float*>(ones.get_data_handle()), reduced, mean ? 1.0f / reduced : 1.0f);
    int ones_value = KeepConst(ones);
    Desc x_desc = Plain({outer, reduced, inner}), y_desc = Plain({outer, 1, inner});
    dnnl::matmul::primitive_desc pd(Engine(), ones_desc, x_desc, y_desc, UserScratchpad());
    int x = As(op.inputs[0], Plain(DimsOf(xs)));
    int y = Define(op.output, Plain(g_.Shape(op.output)));
    AddStep(dnnl::matmul(pd), {{DNNL_ARG_SRC, ones_value, ones_desc}, {DNNL_ARG_WEIGHTS, x, x_desc},
                               {DNNL_ARG_DST, y, y_desc}},
            pd.scratchpad_desc());
    return true;
  }

  // The mean (max) over the spatial axes of NCW / NCHW as one pooling window: oneDNN's
  // pooling reads blocked layouts with a jit kernel, its reduction does not
  // (measured: 21% of MobileNetV2 in the reference reduction).
  void GlobalPool(const BodyOp& op, int src, const Dims& kept, algorithm alg) {
    const auto& xs = g_.Shape(op.inputs[0]);
    Dims window(xs.begin() + 2, xs.end()), ones(xs.size() - 2, 1), zeros(xs.size() - 2, 0);
    auto make = [&](const Desc& from) {
      return dnnl::pooling_forward::primitive_desc(Engine(), prop_kind::forward_inference, alg, from, Any(kept), ones,
                                                   window, zeros, zeros, zeros, UserScratchpad());
    };
    auto pd = make(values_[src].desc);
    if (!IsJit(pd)) {  // a plain NCW row has only simple_nchw (Magika's global max over 508: 0.4 ms)
      auto nwc = make(ChannelsLast(xs, DataType(g_.tensor(op.inputs[0]))));
      if (IsJit(nwc)) {
        pd = nwc;
        src = As(op.inputs[0], nwc.src_desc());
      }
    }
    Desc plain = Plain(kept);
    int dst = Define(op.output, Plain(g_.Shape(op.output)));
    int pooled = pd.dst_desc() == plain ? dst : NewTemp(pd.dst_desc());
    AddStep(dnnl::pooling_forward(pd),
            {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_DST, pooled, pd.dst_desc()}}, pd.scratchpad_desc());
    if (pooled != dst) {
      dnnl::reorder::primitive_desc copy(Engine(), pd.dst_desc(), Engine(), plain, UserScratchpad());
      AddStep(dnnl::reorder(copy), {{DNNL_ARG_FROM, pooled, pd.dst_desc()}, {DNNL_ARG_TO, dst, plain}},
              copy.scratchpad_desc());
    }
  }

  void Softmax(const BodyOp& op, const Attrs& a) {
    Arity(op, 1);
    SameShape(op, op.inputs[0]);
    const auto& xs = g_.Shape(op.inputs[0]);
    if (xs.empty()) Fail(op.where + ": softmax of a scalar is not supported");
    int axis = static_cast<int>(NormAxis(a.Int("axis"), xs.size(), op.where));
    auto make = [&](const Desc& desc) {
      return dnnl::softmax_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                   algorithm::softmax_accurate, desc, desc, axis, UserScratchpad());
    };
    Desc desc = Plain(xs);
    auto pd = make(desc);
    // oneDNN's jit softmax needs the axis innermost in memory; over another axis it runs its
    // reference kernel (measured: 18 ms of NudeNet's 40 ms, YOLOv8's softmax over 16 box bins
    // on axis 1). So the input is reordered into a layout with the axis innermost, where the
    // output stays.
    if (static_cast<size_t>(axis) + 1 < xs.size() && IsReference(pd)) {
      Dims strides(xs.size());
      int64_t stride = xs[static_cast<size_t>(axis)];
      for (size_t i = xs.size(); i-- > 0;)
        if (static_cast<int>(i) != axis) strides[i] = stride, stride *= xs[i];
      strides[static_cast<size_t>(axis)] = 1;
      desc = Desc(DimsOf(xs), memory::data_type::f32, strides);
      pd = make(desc);
    }
    int src = As(op.inputs[0], desc);
    int dst = Define(op.output, desc);
    AddStep(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, src, desc}, {DNNL_ARG_DST, dst, desc}}, pd.scratchpad_desc());
  }

  void LayerNorm(const BodyOp& op, const Attrs& a) {
    Arity(op, 3);
    SameShape(op, op.inputs[0]);
    const auto& xs = g_.Shape(op.inputs[0]);
    auto axes = a.Ints("axes");
    if (xs.size() < 2 || axes.size() != 1 || NormAxis(axes[0], xs.size(), op.where) != static_cast<int64_t>(xs.size() - 1))
      Fail(op.where + ": layer norm over the last axis of a tensor of rank >= 2 only");
    int64_t c = xs.back();
    for (int p : {op.inputs[1], op.inputs[2]})
      if (g_.tensor(p).numel != c) Fail(op.where + ": gamma and beta must have " + std::to_string(c) + " values");
    auto flags = dnnl::normalization_flags::none;
    if (a.Bool("scale")) flags |= dnnl::normalization_flags::use_scale;
    if (a.Bool("center")) flags |= dnnl::normalization_flags::use_shift;
    Desc desc = Plain(xs), param = Plain(Dims{c});
    dnnl::layer_normalization_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, desc, desc,
                                                         static_cast<float>(a.Float("epsilon")), flags, UserScratchpad());
    int src = As(op.inputs[0], desc);
    std::vector<Arg> args = {{DNNL_ARG_SRC, src, desc}};
    if (a.Bool("scale")) args.push_back({DNNL_ARG_SCALE, As(op.inputs[1], Plain(g_.Shape(op.inputs[1]))), param});
    if (a.Bool("center")) args.push_back({DNNL_ARG_SHIFT, As(op.inputs[2], Plain(g_.Shape(op.inputs[2]))), param});
    args.push_back({DNNL_ARG_DST, Define(op.output, desc), desc});
    AddStep(dnnl::layer_normalization_forward(pd), std::move(args), pd.scratchpad_desc());
  }

  void Binary(const BodyOp& op, algorithm alg, bool commutes) {
    Arity(op, 2);
    if (WithScalar(op) || OuterProduct(op)) return;
    const auto& ys = g_.Shape(op.output);
    int full = op.inputs[0], other = op.inputs[1];
    if (g_.Shape(full) != ys && commutes) std::swap(full, other);
    if (g_.Shape(full) != ys || !Broadcasts(g_.Shape(other), ys))
      Fail(op.where + ": the first operand must have the output shape " + ShapeStr(ys) + " (oneDNN broadcasts the second only)");
    Desc src0 = values_[value_of_[full]].desc;
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
      b = ReorderConst(ConstView(value_of_[other], Plain(Dims{1, ys[1], 1, 1})), src1);
    }
    dnnl::binary::primitive_desc pd(Engine(), alg, src0, src1, src0, UserScratchpad());
    int a = As(full, src0);
    if (b < 0) b = As(other, g_.Shape(other) == ys ? src1 : Plain(g_.Shape(other)));
    int dst = Define(op.output, pd.dst_desc());
    AddStep(dnnl::binary(pd), {{DNNL_ARG_SRC_0, a, src0}, {DNNL_ARG_SRC_1, b, src1}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
            pd.scratchpad_desc());
  }

  // x + c, x - c, c - x, x * c and x / c with a scalar constant c as one eltwise_linear, which
  // reads any layout with a jit kernel: oneDNN's binary broadcasting a plain scalar over a
  // blocked tensor is its reference kernel (measured: 1.6-1.8 ms each for 18 k elements in
  // PP-OCR cls's hard-swish, 75% of the model's time); and c / x (ONNX Reciprocal) as
  // eltwise_pow, c * x^-1. False, having added nothing, for any other operands.
  bool WithScalar(const BodyOp& op) {
    for (int x : op.inputs) {
      bool x_first = false;
      float c = ScalarOperand(op, x, &x_first), alpha, beta;
      if (g_.Shape(x) != g_.Shape(op.output) || value_of_[x] < 0) continue;
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
  bool OuterProduct(const BodyOp& op) {
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
        const Desc& own = values_[value_of_[id]].desc;
        if (g_.tensor(id).kind == Kind::kConst) {
          srcs.push_back(Plain(g_.Shape(id)));
        } else if (layout_of < 0) {
          srcs.push_back(own);
        } else {
          auto tag = TagOf(values_[value_of_[layout_of]].desc);
          srcs.push_back(tag == memory::format_tag::undef ? own : Desc(own.get_dims(), own.get_data_type(), tag));
        }
      }
      return make(srcs);
    };
    try {
      auto pd = in_layout(-1);
      if (!IsReference(pd)) return pd;
      for (int id : ids) {
        if (g_.tensor(id).kind == Kind::kConst || TagOf(values_[value_of_[id]].desc) == memory::format_tag::undef)
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

  // The format tag of a 3-D or 4-D `desc` among oneDNN's common ones, or undef.
  static memory::format_tag TagOf(const Desc& desc) {
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
  void Concat(const BodyOp& op, const Attrs& a) {
    const auto& ys = g_.Shape(op.output);
    if (op.inputs.empty() || ys.empty()) Fail(op.where + ": concat needs at least one tensor of rank >= 1");
    size_t axis = static_cast<size_t>(NormAxis(a.Int("axis"), ys.size(), op.where));
    int64_t total = 0;
    for (int id : op.inputs) {
      const auto& xs = g_.Shape(id);
      bool fits = xs.size() == ys.size();
      for (size_t d = 0; fits && d < ys.size(); ++d) fits = d == axis || xs[d] == ys[d];
      if (!fits) Fail(op.where + ": " + ShapeStr(xs) + " does not fit " + ShapeStr(ys) + " along axis " + std::to_string(axis));
      if (value_of_[id] < 0) Fail(op.where + ": tensor " + g_.tensor(id).name + " is read before it is computed");
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

  // stack: a concat of the inputs, each seen with a unit axis inserted, into a plain output;
  // or nothing at all when a sum / mean / max / min over the new axis is its only reader (ONNX
  // Sum, Mean, Max and Min of n tensors): that reduction is then one oneDNN sum of the inputs
  // (SumOf), or a chain of binary max / min (ExtremeOf).
  void Stack(const BodyOp& op, const Attrs& a) {
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
  bool CopyBlockedPart(const BodyOp& op, const Dims& offsets) {
    int v = value_of_[op.inputs[0]];
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

  // Whether the only reader of tensor `id` is a relax.sum / mean / max / min over `axis` alone, without keepdims.
  bool ReducedOverOnly(int id, size_t axis) const {
    if (g_.uses(id) != 1) return false;  // a graph output counts as a use
    for (const BodyOp& reader : g_.ops()) {
      if (std::find(reader.inputs.begin(), reader.inputs.end(), id) == reader.inputs.end()) continue;
      if (!ReductionOf(reader.kernel)) return false;
      Attrs a(reader.attrs, reader.where);
      size_t rank = g_.Shape(id).size();
      return !a.IsNone("axis") && a.Ints("axis").size() == 1 &&
             static_cast<size_t>(NormAxis(a.Ints("axis")[0], rank, reader.where)) == axis && !a.Bool("keepdims");
    }
    return false;
  }

  // The sum (or mean) of `terms`, one oneDNN sum primitive over them in their own layouts.
  void SumOf(const BodyOp& op, const std::vector<int>& terms, bool mean) {
    for (int t : terms)
      if (g_.Shape(t) != g_.Shape(op.output)) Fail(op.where + ": terms of another shape than " + ShapeStr(g_.Shape(op.output)));
    std::vector<float> scales(terms.size(), mean ? 1.0f / static_cast<float>(terms.size()) : 1.0f);
    auto pd = WithSourceLayouts(terms, [&](const std::vector<Desc>& srcs) {
      return dnnl::sum::primitive_desc(Engine(), scales, srcs, UserScratchpad());
    });
    std::vector<Arg> args;
    for (size_t i = 0; i < terms.size(); ++i) {
      Desc desc = pd.src_desc(static_cast<int>(i));
      args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), As(terms[i], desc), desc});
    }
    args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
    AddStep(dnnl::sum(pd), std::move(args), pd.scratchpad_desc());
  }

  // oneDNN resampling computes the source coordinate of output x as
  // (x + 0.5) * in / out - 0.5 (ONNX half_pixel), clamped to the edges, and
  // rounds it for nearest. ONNX Resize agrees for linear with half_pixel (and
  // pytorch_half_pixel when no output extent is 1), and for nearest at integer
  // upscales with half_pixel + round_prefer_floor/ceil (the coordinate stays
  // within 0.5 of the right index) or asymmetric + floor. Empty when supported,
  // else why not (annotations/dnnl.py's rule says the same).
  static std::string ResizeUnsupported(const std::string& method, const std::string& ctm, const std::string& rounding,
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

  void Resize(const BodyOp& op, const Attrs& a) {
    Arity(op, 1);
    const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
    if (a.Str("layout") != "NCHW" || xs.size() != 4 || ys.size() != 4 || xs[0] != ys[0] || xs[1] != ys[1])
      Fail(op.where + ": resize of 4-D NCHW tensors only");
    std::string method = a.Str("method");
    std::string why = ResizeUnsupported(method, a.Str("coordinate_transformation_mode"), a.Str("rounding_method"), xs, ys);
    if (!why.empty()) Fail(op.where + ": " + why);
    algorithm alg = method == "linear" ? algorithm::resampling_linear : algorithm::resampling_nearest;
    int src = value_of_[op.inputs[0]];
    dnnl::resampling_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, alg, values_[src].desc,
                                                Any(DimsOf(ys)), UserScratchpad());
    src = As(op.inputs[0], pd.src_desc());
    int dst = Define(op.output, pd.dst_desc());
    AddStep(dnnl::resampling_forward(pd), {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_DST, dst, pd.dst_desc()}},
            pd.scratchpad_desc());
  }

  // A reorder from a strided view of the (plain) input into a plain output; positive steps.
  void StridedSlice(const BodyOp& op, const Attrs& a) {
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
      if (dims[d] * step[d] > xs[d])
        Fail(op.where + ": " + std::to_string(dims[d]) + " elements at step " + std::to_string(steps[i]) +
             " span more than the axis of " + std::to_string(xs[d]) + " (oneDNN cannot view them)");
    }
    if (Dims(ys.begin(), ys.end()) != dims)
      Fail(op.where + ": the slice gives " + ShapeStr(std::vector<int64_t>(dims.begin(), dims.end())) + ", not " + ShapeStr(ys));
    if (ys == xs && value_of_[op.inputs[0]] >= 0) {  // the whole tensor (an exporter's no-op slice): itself
      value_of_[op.output] = value_of_[op.inputs[0]];
      return;
    }
    CopyPart(op, offsets, step);
  }

  // One result of relax.split (attrs["result_index"], see byoc/graph.py): a part along the axis.
  void Split(const BodyOp& op, const Attrs& a) {
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
  void CopyPart(const BodyOp& op, const Dims& offsets, const Dims& step) {
    const auto &xs = g_.Shape(op.inputs[0]), &ys = g_.Shape(op.output);
    if (step == Dims(xs.size(), 1) && CopyBlockedPart(op, offsets)) return;
    Desc plain = Plain(xs);
    Dims strides = plain.get_strides();
    size_t offset = 0;
    for (size_t d = 0; d < xs.size(); ++d) {
      offset += static_cast<size_t>(offsets[d] * strides[d]) * sizeof(float);
      strides[d] *= step[d];
    }
    Desc view(DimsOf(ys), memory::data_type::f32, strides);
    int src = As(op.inputs[0], plain);
    if (view == Plain(ys) && StorageOf(src) != Storage::kConst) {
      // A contiguous part (the rows of one step of an unrolled LSTM's input projection): those bytes, no copy.
      value_of_[op.output] = NewView(src, view, offset);
      return;
    }
    int dst = Define(op.output, Plain(ys));
    dnnl::reorder::primitive_desc pd(Engine(), view, Engine(), Plain(ys), UserScratchpad());
    AddStep(dnnl::reorder(pd), {{DNNL_ARG_FROM, src, view, offset}, {DNNL_ARG_TO, dst, Plain(ys)}},
            pd.scratchpad_desc());
  }

  // ONNX LRN as TVM imports it, eight ops of one node:
  //   x / (bias + alpha * squeeze(avg_pool3d(expand_dims(x * x), (n, 1, 1), pad n/2, count pad)))^beta,
  // which is oneDNN's across-channel LRN x / (k + alpha/n * sum of squares)^beta.
  // Compiles it and returns 8, or returns 0 when the ops at k are something else.
  size_t LrnAt(size_t k) {
    const std::vector<BodyOp>& ops = g_.ops();
    if (k + 8 > ops.size() || ops[k + 7].node != ops[k].node) return 0;
    const BodyOp &sq = ops[k], &expand = ops[k + 1], &pool = ops[k + 2], &squeeze = ops[k + 3], &mul = ops[k + 4],
                 &add = ops[k + 5], &power = ops[k + 6], &div = ops[k + 7];
    if (sq.kernel != "relax.multiply" || sq.inputs.size() != 2 || sq.inputs[0] != sq.inputs[1]) return 0;
    int x = sq.inputs[0];
    auto chain = [&](const BodyOp& op, const char* kernel, const BodyOp& from) {
      return op.kernel == kernel && !op.inputs.empty() && op.inputs[0] == from.output && g_.uses(from.output) == 1;
    };
    if (!chain(expand, "relax.expand_dims", sq) || !chain(pool, "relax.nn.avg_pool3d", expand) ||
        !chain(squeeze, "relax.squeeze", pool) || !chain(mul, "relax.multiply", squeeze) ||
        !chain(add, "relax.add", mul) || !chain(power, "relax.power", add) || div.kernel != "relax.divide" ||
        div.inputs != std::vector<int>{x, power.output} || g_.uses(power.output) != 1)
      return 0;
    bool first = false;
    float alpha = ScalarOperand(mul, squeeze.output, &first), bias = ScalarOperand(add, mul.output, &first);
    float beta = ScalarOperand(power, add.output, &first);
    const auto& xs = g_.Shape(x);
    Attrs pa(pool.attrs, pool.where);
    auto size = pa.Ints("pool_size"), st = pa.Ints("strides"), pad = pa.Ints("padding"), dil = pa.Ints("dilation");
    int64_t n = size.empty() ? 0 : size[0];
    if (std::isnan(alpha) || std::isnan(bias) || std::isnan(beta) || !first || xs.size() != 4 || g_.Shape(div.output) != xs ||
        size != std::vector<int64_t>{n, 1, 1} || st != std::vector<int64_t>{1, 1, 1} || dil != std::vector<int64_t>{1, 1, 1} ||
        n % 2 != 1 || pad != std::vector<int64_t>{n / 2, 0, 0, n / 2, 0, 0} || !pa.Bool("count_include_pad") ||
        pa.Bool("ceil_mode"))
      Fail(div.where + ": not an LRN over channels with an odd window (the ops oneDNN's LRN computes)");
    int src = value_of_[x];
    Desc desc = g_.tensor(x).kind == Kind::kConst ? Plain(xs) : values_[src].desc;
    dnnl::lrn_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, algorithm::lrn_across_channels, desc,
                                         desc, n, alpha, beta, bias, UserScratchpad());
    AddStep(dnnl::lrn_forward(pd),
            {{DNNL_ARG_SRC, As(x, desc), desc}, {DNNL_ARG_DST, Define(div.output, pd.dst_desc()), pd.dst_desc()}},
            pd.scratchpad_desc());
    return 8;
  }

  // Inference batch norm (the first result of relax.nn.batch_norm): moving statistics as given.
  void BatchNorm(const BodyOp& op, const Attrs& a) {
    Arity(op, 5);
    SameShape(op, op.inputs[0]);
    const auto& xs = g_.Shape(op.inputs[0]);
    if (xs.size() < 2 || xs.size() > 5 || NormAxis(a.Int("axis"), xs.size(), op.where) != 1)
      Fail(op.where + ": batch norm over axis 1 of a tensor of rank 2 to 5 only");
    if (a.Bool("training")) Fail(op.where + ": batch norm in training mode is not supported");
    int64_t c = xs[1];
    for (size_t i = 1; i < 5; ++i)
      if (g_.tensor(op.inputs[i]).numel != c) Fail(op.where + ": gamma, beta, mean and variance must have " + std::to_string(c) + " values");
    auto flags = dnnl::normalization_flags::use_global_stats;
    if (a.Bool("scale")) flags |= dnnl::normalization_flags::use_scale;
    if (a.Bool("center")) flags |= dnnl::normalization_flags::use_shift;
    int src = value_of_[op.inputs[0]];
    Desc desc = values_[src].desc, param = Plain(Dims{c});
    if (g_.tensor(op.inputs[0]).kind == Kind::kConst) desc = Plain(xs);
    dnnl::batch_normalization_forward::primitive_desc pd(Engine(), prop_kind::forward_inference, desc, desc,
                                                         static_cast<float>(a.Float("epsilon")), flags, UserScratchpad());
    std::vector<Arg> args = {{DNNL_ARG_SRC, As(op.inputs[0], desc), desc}};
    auto param_arg = [&](int key, int id) { args.push_back({key, As(id, Plain(g_.Shape(id))), param}); };
    if (a.Bool("scale")) param_arg(DNNL_ARG_SCALE, op.inputs[1]);
    if (a.Bool("center")) param_arg(DNNL_ARG_SHIFT, op.inputs[2]);
    param_arg(DNNL_ARG_MEAN, op.inputs[3]);
    param_arg(DNNL_ARG_VARIANCE, op.inputs[4]);
    args.push_back({DNNL_ARG_DST, Define(op.output, pd.dst_desc()), pd.dst_desc()});
    AddStep(dnnl::batch_normalization_forward(pd), std::move(args), pd.scratchpad_desc());
  }

  // conv2d_transpose (NCHW data, IOHW weights) as a oneDNN deconvolution, with
  // the conv's post-ops. ONNX's output_padding extends the end of the output,
  // which is oneDNN's right padding made smaller (negative beyond the padding,
  // which oneDNN takes: checked against onnxruntime).
  size_t Deconv2d(size_t k, const Attrs& a) {
    const BodyOp& op = g_.ops()[k];
    Arity(op, 2);
    int x = op.inputs[0], w = op.inputs[1];
    if (g_.tensor(w).kind != Kind::kConst) Fail(op.where + ": the weight must be a constant (it is reordered at load)");
    if (a.Str("data_layout") != "NCHW" || a.Str("kernel_layout") != "IOHW" || a.Str("out_layout") != "NCHW")
      Fail(op.where + ": only NCHW/IOHW layouts are supported");
    const auto &xs = g_.Shape(x), &ws = g_.Shape(w), &ys = g_.Shape(op.output);
    if (xs.size() != 4 || ws.size() != 4 || ys.size() != 4) Fail(op.where + ": conv2d_transpose tensors must be 4-D");
    int64_t groups = a.Int("groups");
    auto st = a.Ints("strides"), dil = a.Ints("dilation"), pad = a.Ints("padding"), extra = a.Ints("output_padding");
    if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
    if (st.size() != 2 || dil.size() != 2 || pad.size() != 4 || extra.size() != 2)
      Fail(op.where + ": strides/dilation/output_padding need 2 values and padding 2 or 4");
    if (groups < 1 || xs[1] != ws[0] || ws[0] % groups != 0 || ys[0] != xs[0] || ys[1] != ws[1] * groups)
      Fail(op.where + ": channels of " + ShapeStr(xs) + " and weight " + ShapeStr(ws) + " do not match groups=" +
           std::to_string(groups));
    Dims pad_r(2);
    for (int d = 0; d < 2; ++d) {
      if (st[d] < 1 || dil[d] < 1 || pad[d] < 0 || pad[d + 2] < 0 || extra[d] < 0) Fail(op.where + ": invalid window");
      pad_r[d] = pad[d + 2] - extra[d];
      if (ys[2 + d] != (xs[2 + d] - 1) * st[d] + dil[d] * (ws[2 + d] - 1) + 1 - pad[d] - pad_r[d])
        Fail(op.where + ": output shape " + ShapeStr(ys) + " does not follow from the attributes");
    }
    int64_t ic = xs[1] / groups, oc = ys[1] / groups, kh = ws[2], kw = ws[3];
    // The IOHW weight seen as oneDNN's (G,) O, I, H, W through permuted strides.
    Dims wdims = groups == 1 ? Dims{oc, ic, kh, kw} : Dims{groups, oc, ic, kh, kw};
    Dims wstrides = groups == 1 ? Dims{kh * kw, oc * kh * kw, kw, 1} : Dims{ic * oc * kh * kw, kh * kw, oc * kh * kw, kw, 1};
    Desc iohw(wdims, memory::data_type::f32, wstrides);
    int64_t channels = ys[1];
    Fused f = FusePostOps(k, [&](int b) { return ChannelBias(b, channels, ys.size()); });
    Desc bias = Plain(Dims{channels});
    auto pd = CreateWithPostOps(f, ys, [&](const primitive_attr& attr) {
      Dims strides = {st[0], st[1]}, dilation = {dil[0] - 1, dil[1] - 1}, pad_l = {pad[0], pad[1]};
      if (f.bias >= 0)
        return dnnl::deconvolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                           algorithm::deconvolution_direct, Any(DimsOf(xs)), Any(wdims),
                                                           bias, Any(DimsOf(ys)), strides, dilation, pad_l, pad_r, attr);
      return dnnl::deconvolution_forward::primitive_desc(Engine(), prop_kind::forward_inference,
                                                         algorithm::deconvolution_direct, Any(DimsOf(xs)), Any(wdims),
                                                         Any(DimsOf(ys)), strides, dilation, pad_l, pad_r, attr);
    });
    int src = As(x, pd.src_desc());
    int weights = ReorderConst(ConstView(value_of_[w], iohw), pd.weights_desc());
    std::vector<Arg> args = {{DNNL_ARG_SRC, src, pd.src_desc()}, {DNNL_ARG_WEIGHTS, weights, pd.weights_desc()}};
    if (f.bias >= 0) args.push_back({DNNL_ARG_BIAS, value_of_[f.bias], bias});
    AddBinaryArgs(f, &args, ys, pd.dst_desc());
    args.push_back({DNNL_ARG_DST, Define(f.last, pd.dst_desc()), pd.dst_desc()});
    AddStep(dnnl::deconvolution_forward(pd), std::move(args), pd.scratchpad_desc());
    return f.next;
  }

  void Arity(const BodyOp& op, size_t n) const {
    if (op.inputs.size() != n) Fail(op.where + " takes " + std::to_string(n) + " inputs, got " + std::to_string(op.inputs.size()));
  }

  void SameShape(const BodyOp& op, int input) const {
    if (g_.Shape(input) != g_.Shape(op.output))
      Fail(op.where + ": output shape " + ShapeStr(g_.Shape(op.output)) + " differs from " + ShapeStr(g_.Shape(input)));
  }

  // -- outputs, memory plan, workspaces --------------------------------------------------
  // Each graph output is the caller's buffer: the op that computes it writes there
  // directly when its layout is plain; otherwise (blocked, an input, a constant, a
  // tensor listed twice) a final reorder converts into it.
  void BindOutputs() {
    std::vector<bool> taken(values_.size(), false);
    for (size_t slot = 0; slot < g_.outputs().size(); ++slot) {
      int id = g_.outputs()[slot];
      Desc plain = Plain(g_.Shape(id), DataType(g_.tensor(id)));
      int v = value_of_[id];
      if (v < 0) Fail("graph output " + g_.tensor(id).name + " is never computed");
      if (values_[v].storage == Storage::kTemp && values_[v].base < 0 && values_[v].desc == plain && !taken[v]) {
        values_[v].storage = Storage::kOutput;
        values_[v].slot = static_cast<int>(slot);
        lifetimes_.erase(v);
        taken[v] = true;
      } else {
        int out = NewValue(plain, Storage::kOutput, static_cast<int>(slot));
        AddReorder(v, out);
      }
    }
  }

  // Temps share one arena: greedy first fit, biggest first, by [first, last] step.
  void PlanArena() {
    std::vector<int> temps;
    for (const auto& entry : lifetimes_) temps.push_back(entry.first);
    std::sort(temps.begin(), temps.end(), [&](int a, int b) {
      size_t sa = values_[a].desc.get_size(), sb = values_[b].desc.get_size();
      return sa != sb ? sa > sb : a < b;
    });
    std::vector<std::pair<size_t, size_t>> placed;  // (offset, size) per entry of `temps` placed so far
    for (size_t i = 0; i < temps.size(); ++i) {
      size_t size = AlignUp(std::max<size_t>(values_[temps[i]].desc.get_size(), 1));
      auto life = lifetimes_[temps[i]];
      std::vector<std::pair<size_t, size_t>> busy;
      for (size_t j = 0; j < i; ++j) {
        auto other = lifetimes_[temps[j]];
        if (other.first <= life.second && life.first <= other.second) busy.push_back(placed[j]);
      }
      std::sort(busy.begin(), busy.end());
      size_t offset = 0;
      for (const auto& b : busy) {
        if (offset + size <= b.first) break;
        offset = std::max(offset, b.first + b.second);
      }
      placed.emplace_back(offset, size);
      values_[temps[i]].slot = static_cast<int>(offset);
      arena_bytes_ = std::max(arena_bytes_, offset + size);
    }
    for (const Step& s : steps_) scratch_bytes_ = std::max(scratch_bytes_, AlignUp(s.scratchpad.get_size()));
  }

  std::unique_ptr<Workspace> Take() const {
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      if (!pool_.empty()) {
        std::unique_ptr<Workspace> ws = std::move(pool_.back());
        pool_.pop_back();
        return ws;
      }
    }
    auto ws = std::make_unique<Workspace>();
    size_t bytes = arena_bytes_ + scratch_bytes_;
    ws->arena.reset(static_cast<char*>(std::aligned_alloc(kAlign, AlignUp(std::max<size_t>(bytes, 1)))));
    if (!ws->arena) TVM_FFI_THROW(RuntimeError) << "byoc dnnl: cannot allocate " << bytes << " bytes of workspace";
    char* scratch = ws->arena.get() + arena_bytes_;
    ws->stream = dnnl::stream(Engine());
    ws->args.resize(steps_.size());
    for (size_t i = 0; i < steps_.size(); ++i) {
      for (const Arg& arg : steps_[i].args) {
        const Value& v = values_[Root(arg.value)];
        char* base = v.storage == Storage::kConst  ? static_cast<char*>(consts_[v.slot].get_data_handle())
                     : v.storage == Storage::kTemp ? ws->arena.get() + v.slot
                                                   : nullptr;
        size_t offset = values_[arg.value].offset + arg.offset;
        memory m(arg.desc, Engine(), base ? static_cast<void*>(base + offset) : DNNL_MEMORY_NONE);
        if (v.storage == Storage::kInput) ws->inputs.push_back({v.slot, m, offset});
        if (v.storage == Storage::kOutput) ws->outputs.push_back({v.slot, m, offset});
        ws->args[i][arg.key] = m;
      }
      if (steps_[i].scratchpad.get_size() > 0)
        ws->args[i][DNNL_ARG_SCRATCHPAD] = memory(steps_[i].scratchpad, Engine(), scratch);
    }
    return ws;
  }

  void Give(std::unique_ptr<Workspace> ws) const {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    pool_.push_back(std::move(ws));
  }

  const ParsedGraph& g_;
  std::vector<int> value_of_;  // graph tensor -> its value as computed
  std::vector<Value> values_;
  std::vector<memory> consts_;  // module-owned (reordered weights) or views of the module's constants
  std::map<std::pair<int, std::string>, int> reorders_;  // (tensor, layout) -> value
  std::set<size_t> merged_;  // matmul ops a sibling computed (SideBySide)
  std::map<std::vector<int>, int> joined_weights_;  // constant weights side by side (SideBySide) -> value
  std::map<std::string, int> const_reorders_;  // (constant, view, layout, scales) -> value
  std::map<int, std::pair<int, int>> lifetimes_;  // temp value -> [first, last] step
  std::map<int, std::vector<int>> stacked_;  // a stack left unmaterialized -> the tensors it stacks
  std::map<int, ByteTable> byte_tables_;  // graph tensor computed as a byte table -> that table
  std::vector<Step> steps_;
  bool winograd_;    // BYOC_DNNL_WINOGRAD is not off
  int threads_ = 1;  // the team size of the op being compiled
  size_t arena_bytes_ = 0, scratch_bytes_ = 0, owned_const_bytes_ = 0;
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<Workspace>> pool_;
};

// -- contention ----------------------------------------------------------------------------
// A team of two waits for its second thread at every primitive. When another process holds
// the other core, each wait is a scheduler time slice, and a run takes 10-100x its idle time.
// So a module that has team primitives keeps a second program, compiled for one thread, and
// ProgramChooser sends each call to whichever was faster when last timed:
// - kSlowRuns team runs in a row that were slow send the next calls to the serial program.
//   Slow means slower than the last serial run by kSwitchMargin; before the serial program
//   has run, it means that the calling thread spent most of the run off a CPU (its CPU time
//   under kBusyShare of the wall time: it slept waiting for its team, or for a core).
// - After the serial calls (one, the first time, to time it), kTrials team calls try the
//   team again (the first of them wakes the sleeping team, so the best one counts). Faster
//   than the last serial run, the team keeps the calls; slower, the serial program gets
//   twice as many calls as before (from kFirstBackoff up to kMaxBackoff).
// Every serial stretch re-times the serial program, so a stale time corrects itself. The
// serial program is compiled the first time it is needed (its reordered weights are a second
// copy). BYOC_DNNL_CONTENTION=off, read when a module is created, keeps every call on the
// team's program. byoc.dnnl.run_counts() says how many runs each kind of program made.
constexpr double kBusyShare = 0.8;  // an idle team's caller spins at barriers: its share is ~1
constexpr double kMinContendedUs = 200;  // shorter runs cannot have waited a time slice
constexpr double kSwitchMargin = 1.2;
constexpr int kSlowRuns = 2, kTrials = 2, kFirstBackoff = 4, kMaxBackoff = 1024;

std::atomic<int64_t> g_team_runs{0}, g_serial_runs{0};

// CLOCK_MONOTONIC: wall time; CLOCK_THREAD_CPUTIME_ID: the calling thread's time on a CPU.
double ClockUs(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

bool ContentionWatchOn() { return SwitchOn("BYOC_DNNL_CONTENTION"); }

// Which program the next call runs, learnt from the timings of the calls before it.
class ProgramChooser {
 public:
  // One call, on the program the timings so far pick: `team()` runs the team's program and returns its
  // {wall, calling thread's CPU} time in microseconds, `serial()` the serial one and its wall time.
  // Returns whether the call ran serially.
  template <class Team, class Serial>
  bool Call(Team team, Serial serial) {
    if (NextIsSerial()) {
      SerialRan(serial());
      return true;
    }
    std::pair<double, double> timed = team();
    TeamRan(timed.first, timed.second);
    return false;
  }

 private:
  bool NextIsSerial() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (serial_left_ == 0) return false;
    --serial_left_;
    return true;
  }

  void SerialRan(double wall_us) {
    std::lock_guard<std::mutex> lock(mutex_);
    serial_us_ = wall_us;
  }

  void TeamRan(double wall_us, double cpu_us) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (trials_left_ > 0) {
      trial_best_us_ = std::min(trial_best_us_, wall_us);
      if (--trials_left_ > 0) return;
      if (trial_best_us_ > serial_us_) {
        backoff_ = std::min(2 * backoff_, kMaxBackoff);
        GoSerial(backoff_);
      } else {
        backoff_ = kFirstBackoff;
      }
      return;
    }
    bool slow = serial_us_ > 0 ? wall_us > kSwitchMargin * serial_us_
                               : wall_us > kMinContendedUs && cpu_us < kBusyShare * wall_us;
    slow_streak_ = slow ? slow_streak_ + 1 : 0;
    if (slow_streak_ >= kSlowRuns) GoSerial(serial_us_ > 0 ? backoff_ : 1);
  }

  void GoSerial(int calls) {
    serial_left_ = calls;
    trials_left_ = kTrials;
    trial_best_us_ = std::numeric_limits<double>::infinity();
    slow_streak_ = 0;
  }

  std::mutex mutex_;
  int serial_left_ = 0, trials_left_ = 0, slow_streak_ = 0, backoff_ = kFirstBackoff;
  double serial_us_ = 0, trial_best_us_ = 0;  // serial_us_: the last serial run; 0 before the first
};

class DnnlExecutor {
 public:
  static constexpr const char* kName = "dnnl";
  static constexpr char kMagic[8] = {'B', 'Y', 'O', 'C', 'D', 'N', 'N', 'L'};

  // "vnni" when oneDNN's int8 kernels run on VNNI here (u8 x s8 products summed in int32: exact for any weight
  // and for s8 sources), else "no_vnni" (pairs summed in int16, which saturates; an s8 source halves the
  // weights): codegens/dnnl/quantized.py sends such units both ways. oneDNN's effective ISA, so
  // ONEDNN_MAX_CPU_ISA counts.
  static std::set<std::string> CpuFeatures() {
    auto bit = [](dnnl::cpu_isa with, dnnl::cpu_isa without) { return static_cast<int>(with) & ~static_cast<int>(without); };
    int vnni = bit(dnnl::cpu_isa::avx2_vnni, dnnl::cpu_isa::avx2) |
               bit(dnnl::cpu_isa::avx512_core_vnni, dnnl::cpu_isa::avx512_core);
    return {(static_cast<int>(dnnl::get_effective_cpu_isa()) & vnni) ? "vnni" : "no_vnni"};
  }

  explicit DnnlExecutor(const ParsedGraph& graph)
      : g_(graph), team_(graph, MaxThreads()), watch_(ContentionWatchOn() && team_.parallel()) {}

  // What the module holds besides its constants as given: one workspace per call in flight,
  // and the reordered constants of each program compiled (the serial one once it has run).
  MemoryUse Memory() const {
    MemoryUse use{team_.WorkspaceBytes(), team_.ConstantBytes()};
    if (const Program* serial = serial_ready_.load(std::memory_order_acquire)) {
      use.workspace_bytes = std::max(use.workspace_bytes, serial->WorkspaceBytes());
      use.constant_bytes += serial->ConstantBytes();
    }
    return use;
  }

  void Run(float* const* in, float* const* out) const {
    if (!watch_) {  // nothing to choose: no clock reads on the path of small modules
      g_team_runs.fetch_add(1, std::memory_order_relaxed);
      return team_.Run(in, out);
    }
    bool serial = chooser_.Call(
        [&] {
          double wall = ClockUs(CLOCK_MONOTONIC), cpu = ClockUs(CLOCK_THREAD_CPUTIME_ID);
          team_.Run(in, out);
          return std::make_pair(ClockUs(CLOCK_MONOTONIC) - wall, ClockUs(CLOCK_THREAD_CPUTIME_ID) - cpu);
        },
        [&] {
          const Program& program = Serial();  // compiled on first use, outside the timing
          double wall = ClockUs(CLOCK_MONOTONIC);
          program.Run(in, out);
          return ClockUs(CLOCK_MONOTONIC) - wall;
        });
    (serial ? g_serial_runs : g_team_runs).fetch_add(1, std::memory_order_relaxed);
  }

 private:
  const Program& Serial() const {
    std::call_once(serial_once_, [this] {
      serial_ = std::make_unique<Program>(g_, 1);
      serial_ready_.store(serial_.get(), std::memory_order_release);
    });
    return *serial_;
  }

  const ParsedGraph& g_;
  Program team_;
  bool watch_;
  mutable ProgramChooser chooser_;
  mutable std::once_flag serial_once_;
  mutable std::unique_ptr<Program> serial_;
  mutable std::atomic<const Program*> serial_ready_{nullptr};  // serial_, once compiled (for Memory)
};

TVM_FFI_STATIC_INIT_BLOCK() {
  RegisterGraphRuntime<DnnlExecutor>();
  tvm::ffi::reflection::GlobalDef()
      .def("byoc.dnnl.set_max_threads",
           [](int64_t n) {
             if (n < 0) Fail("set_max_threads: a thread count is >= 0 (0: OpenMP's default)");
             g_max_threads.store(static_cast<int>(n));
           })
      .def("byoc.dnnl.max_threads", []() -> int64_t { return MaxThreads(); })
      .def("byoc.dnnl.run_counts", []() -> tvm::ffi::Array<int64_t> {
        return {g_team_runs.load(), g_serial_runs.load()};
      })
      .def("byoc.dnnl.kernel_runs", []() -> int64_t { return g_kernel_runs.load(); })
      // The programs `calls` calls would run (1: serial) when every team run takes `team_wall_us` with its
      // caller `team_cpu_us` on a CPU and every serial run `serial_us`: the chooser's schedule, without a clock.
      .def("byoc.dnnl.program_schedule",
           [](double team_wall_us, double team_cpu_us, double serial_us, int64_t calls) -> tvm::ffi::Array<int64_t> {
             ProgramChooser chooser;
             tvm::ffi::Array<int64_t> ran;
             for (int64_t i = 0; i < calls; ++i)
               ran.push_back(chooser.Call([&] { return std::make_pair(team_wall_us, team_cpu_us); },
                                          [&] { return serial_us; }));
             return ran;
           });
}

}  // namespace dnnl_runtime
}  // namespace byoc
