/*
 * graph_runtime/module.h -- the tvm-ffi module that holds one partition (its symbol, graph and constants) and
 * calls an executor, and RegisterGraphRuntime, which makes a runtime of an executor. What a runtime includes.
 *
 * A runtime (json_runtime.cc: reference kernels; codegens/dnnl/runtime/: oneDNN)
 * defines an Executor class
 *
 *     struct Executor {
 *       static constexpr const char* kName;     // "json_runtime": error prefix, global names
 *       static constexpr char kMagic[8];        // first bytes of its module blob
 *       static constexpr int64_t kMinGraphVersion;  // the oldest graph schema it reads (to kGraphVersion)
 *       static std::set<std::string> CpuFeatures();  // what ops marked "only_if_cpu" may ask for
 *       explicit Executor(const ParsedGraph&);  // compile once; may keep pointers into the graph
 *       void Run(float* const* in, float* const* out) const;  // thread safe
 *     };
 *
 * and registers it with RegisterGraphRuntime<Executor>() in its
 * TVM_FFI_STATIC_INIT_BLOCK, which defines the globals
 *
 *     byoc.<name>.create(symbol, graph_json, const_names, consts) -> Module
 *     byoc.<name>.format_version() -> int
 *     byoc.<name>.save_to_bytes(module) -> bytes    (what export embeds: blob.h)
 *     byoc.<name>.export_weights(module, path) -> symbol   (the weights as a library section: weights.h)
 *     ffi.Module.load_from_bytes.byoc_<name>(bytes) -> Module
 *
 * An executor that needs what the module was created with (a thread count, a cache its specializations
 * share) declares `struct Settings`, `static Settings NewSettings()` (read once, on the thread that creates
 * the module) and the constructor `Executor(const ParsedGraph&, const Settings&)`.
 *
 * A graph with symbolic dims (schema 4) is compiled per shape: each call binds the dims from its input
 * tensors, and the executor compiled for those sizes is taken from a cache of at most "shape_cache"
 * (a graph option, default kDefaultShapeCache) specializations, least recently used first out.
 *
 * The graph JSON schema is documented in byoc/codegens/json_runtime/serializer.py.
 * Every error is a ValueError / TypeError whose message starts "byoc <name>:".
 */
#ifndef BYOC_GRAPH_RUNTIME_MODULE_H_
#define BYOC_GRAPH_RUNTIME_MODULE_H_

#include <tvm/ffi/cast.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/reflection/registry.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "blob.h"
#include "graph.h"

namespace byoc {
namespace graph_runtime {

// The specializations of a symbolic graph a module keeps, unless the graph's option "shape_cache" says otherwise.
constexpr size_t kDefaultShapeCache = 8;

// What an executor holds besides the module's constants as given: the bytes one call works in
// (per call in flight), and the constants it made itself (e.g. weights reordered for a kernel).
struct MemoryUse {
  size_t workspace_bytes = 0;
  size_t constant_bytes = 0;
  // Whether its kernels read the module's constants where they are when those are a library's pages (weights.h);
  // false: it read them once into copies of its own (in constant_bytes) and gave the pages back.
  bool reads_mapped_constants = true;
};

// Whether an executor reports the team size it was created for (int MaxThreads() const).
template <class E, class = void>
struct ReportsThreads : std::false_type {};
template <class E>
struct ReportsThreads<E, std::void_t<decltype(std::declval<const E&>().MaxThreads())>> : std::true_type {};

// Whether an executor says what runs each of its steps (a module's get_implementations).
template <class E, class = void>
struct ReportsImplementations : std::false_type {};
template <class E>
struct ReportsImplementations<E, std::void_t<decltype(std::declval<const E&>().Implementations())>>
    : std::true_type {};

// Whether an executor times its steps (a module's get_step_times).
template <class E, class = void>
struct ReportsStepTimes : std::false_type {};
template <class E>
struct ReportsStepTimes<E, std::void_t<decltype(std::declval<const E&>().StepTimes())>> : std::true_type {};

// Whether an executor takes the settings of the module that creates it (see the top of this file).
template <class E, class = void>
struct HasSettings : std::false_type {
  using type = int;  // unused
};
template <class E>
struct HasSettings<E, std::void_t<typename E::Settings>> : std::true_type {
  using type = typename E::Settings;
};

// A graph compiled for one set of sizes of its symbolic dims (or for its static shapes).
template <class Executor>
struct Specialization {
  std::unique_ptr<const ParsedGraph> graph;
  std::unique_ptr<const Executor> executor;
};

template <class Executor>
class GraphModuleObj : public ModuleObj {
 public:
  static std::string Kind() { return std::string("byoc_") + Executor::kName; }

  // `weights` holds the constants `entries` lays out (blob.h); the module reads them there, in place.
  GraphModuleObj(std::string symbol, std::string graph_json, std::vector<ConstEntry> entries,
                 std::shared_ptr<WeightsBlock> weights)
      : symbol_(std::move(symbol)), graph_json_(std::move(graph_json)), entries_(std::move(entries)),
        weights_(std::move(weights)), kind_(Kind()) {
    for (const ConstEntry& e : entries_) {
      ConstSpan span{reinterpret_cast<const float*>(weights_->data() + e.offset), e.count, weights_->mapped()};
      if (!by_name_.emplace(e.name, span).second) Fail("constant " + e.name + " is given twice");
    }
    if constexpr (HasSettings<Executor>::value) settings_ = Executor::NewSettings();
    graph_ = std::make_unique<ParsedGraph>(symbol_, graph_json_, by_name_, Executor::CpuFeatures(),
                                           Executor::kMinGraphVersion);
    if (!graph_->symbolic()) {
      executor_ = NewExecutor(*graph_);
    } else {
      int64_t bound = graph_->IntOption("shape_cache", kDefaultShapeCache);
      if (bound < 1) Fail("graph option shape_cache must be at least 1");
      cache_bound_ = static_cast<size_t>(bound);
    }
  }

  const char* kind() const final { return kind_.c_str(); }

  int GetPropertyMask() const final { return Module::kBinarySerializable | Module::kRunnable; }

  Optional<Function> GetFunction(const String& name) final {
    ObjectPtr<Object> self = tvm::ffi::GetObjectPtr<Object>(this);
    if (name == symbol_) {
      return Function::FromPacked([self, this](PackedArgs args, Any*) { Call(args); });
    }
    if (name == "get_graph_json") {
      return Function::FromPacked([self, this](PackedArgs, Any* rv) { *rv = String(graph_json_); });
    }
    if (name == "get_symbol") {
      return Function::FromPacked([self, this](PackedArgs, Any* rv) { *rv = String(symbol_); });
    }
    if (name == "get_specializations") {  // [shapes compiled and alive now, shapes compiled in all]
      return Function::FromPacked([self, this](PackedArgs, Any* rv) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        *rv = Array<int64_t>{static_cast<int64_t>(executor_ ? 1 : cache_.size()), executor_ ? 1 : created_};
      });
    }
    // [workspace bytes per call, bytes of the constants as given that stay resident, bytes it made,
    //  bytes of the constants as given, 1 when those are the library file's pages (read in place)]
    if (name == "get_memory") {
      return Function::FromPacked([self, this](PackedArgs, Any* rv) {
        MemoryUse use = Memory();
        int64_t given = 0;
        for (const ConstEntry& e : entries_) given += static_cast<int64_t>(e.count * sizeof(float));
        int64_t held = weights_->mapped() && !use.reads_mapped_constants ? 0 : given;
        *rv = Array<int64_t>{static_cast<int64_t>(use.workspace_bytes), held, static_cast<int64_t>(use.constant_bytes),
                             given, weights_->mapped() ? 1 : 0};
      });
    }
    if constexpr (ReportsThreads<Executor>::value) {
      if (name == "get_max_threads") {  // the team size its kernels were created for
        return Function::FromPacked(
            [self, this](PackedArgs, Any* rv) { *rv = static_cast<int64_t>(MaxThreads()); });
      }
    }
    if constexpr (ReportsImplementations<Executor>::value) {
      if (name == "get_implementations") {  // of the static graph, or of the shape called last; [] before any call
        return Function::FromPacked([self, this](PackedArgs, Any* rv) {
          Array<String> names;
          WithLastExecutor([&](const Executor& e) {
            for (const std::string& n : e.Implementations()) names.push_back(String(n));
          });
          *rv = names;
        });
      }
    }
    if constexpr (ReportsStepTimes<Executor>::value) {
      if (name == "get_step_times") {  // per step of get_implementations: [calls, nanoseconds] while timed
        return Function::FromPacked([self, this](PackedArgs, Any* rv) {
          Array<Array<int64_t>> times;
          WithLastExecutor([&](const Executor& e) {
            for (const auto& t : e.StepTimes()) times.push_back(Array<int64_t>{t.first, t.second});
          });
          *rv = times;
        });
      }
    }
    return std::nullopt;
  }

  Bytes SaveToBytes() const final {
    std::lock_guard<std::mutex> lock(export_mutex_);
    return Bytes(WriteBlob(Executor::kMagic, symbol_, graph_json_, entries_, Ref(export_symbol_), weights_->data()));
  }

  static Module LoadFromBytes(const Bytes& bytes) {
    Blob blob = ReadBlob(Executor::kMagic, Executor::kName, bytes.data(), bytes.size());
    std::shared_ptr<WeightsBlock> weights;
    if (blob.inline_weights) {
      weights = WeightsBlock::Owned(blob.ref.bytes);
      CopyFloatsLE(weights->data(), blob.inline_weights, blob.ref.bytes);
    } else {
      std::shared_ptr<WeightsBlock> section = WeightsBlock::Section(blob.ref.symbol, blob.ref.bytes);
      if (WeightsChecksum(section->data(), section->size()) != blob.ref.checksum)
        Fail("the weights section " + blob.ref.symbol + " does not hold the weights the module was exported with "
             "(the library file was modified; export it again)");
      ReleasePages(section->data(), section->size());  // read again where a kernel reads them
      if (HostIsLittleEndian()) {
        weights = std::move(section);
      } else {  // the file's floats are little-endian: this host reads a copy in its own order
        weights = WeightsBlock::Owned(blob.ref.bytes);
        CopyFloatsLE(weights->data(), section->data(), blob.ref.bytes);
      }
    }
    return Module(tvm::ffi::make_object<GraphModuleObj>(std::move(blob.symbol), std::move(blob.graph_json),
                                                        std::move(blob.entries), std::move(weights)));
  }

  static Module Create(const String& symbol, const String& graph_json, const Array<String>& names,
                       const Array<tvm::ffi::Tensor>& values) {
    if (names.size() != values.size()) Fail("create: got " + std::to_string(names.size()) + " constant names and " +
                                            std::to_string(values.size()) + " constant tensors");
    std::vector<ConstEntry> entries;
    std::vector<const float*> sources;
    for (size_t i = 0; i < names.size(); ++i) {
      const DLTensor* t = values[i].GetDLTensorPtr();
      std::string name(names[i]);
      if (t->device.device_type != kDLCPU || t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1 ||
          !tvm::ffi::IsContiguous(*t))
        Fail("create: constant " + name + " must be a contiguous float32 CPU tensor");
      int64_t n = 1;
      for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
      entries.push_back({std::move(name), static_cast<uint64_t>(n), 0});
      sources.push_back(reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset));
    }
    std::shared_ptr<WeightsBlock> weights = WeightsBlock::Owned(LayOut(&entries));
    for (size_t i = 0; i < entries.size(); ++i)
      std::memcpy(weights->data() + entries[i].offset, sources[i], entries[i].count * sizeof(float));
    return Module(tvm::ffi::make_object<GraphModuleObj>(std::string(symbol), std::string(graph_json),
                                                        std::move(entries), std::move(weights)));
  }

  // Writes the weights to `path` (little-endian floats, each at its offset) for the library this module is about to
  // be exported into, and has its blob name that library's section instead of carrying them: returns the section's
  // symbol, which the library must define over exactly those bytes. An empty `path` (or a module without
  // constants, which returns "") keeps the weights in the blob again.
  String ExportWeights(const std::string& path) const {
    std::lock_guard<std::mutex> lock(export_mutex_);
    export_symbol_.clear();
    if (path.empty() || weights_->size() == 0) return String("");
    std::string swapped;  // a big-endian host's floats, turned little-endian (a little-endian one writes its own)
    const char* le = weights_->data();
    if (!HostIsLittleEndian()) {
      swapped.assign(weights_->size(), '\0');
      CopyFloatsLE(&swapped[0], weights_->data(), swapped.size());
      le = swapped.data();
    }
    std::FILE* f = std::fopen(path.c_str(), "wb");
    bool written = f && std::fwrite(le, 1, weights_->size(), f) == weights_->size();
    if (f && std::fclose(f) != 0) written = false;
    if (!written) Fail("cannot write the weights of " + symbol_ + " to " + path);
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(Checksum()));
    export_symbol_ = std::string("__byoc_weights_") + hex + "_" + std::to_string(weights_->size());
    return String(export_symbol_);
  }

 private:
  // The DLPack type of a graph dtype (graph.h takes these five).
  static DLDataType DLTypeOf(const std::string& dtype) {
    if (dtype == "float32") return {kDLFloat, 32, 1};
    if (dtype == "uint8") return {kDLUInt, 8, 1};
    if (dtype == "bool") return {kDLBool, 8, 1};
    if (dtype == "int64") return {kDLInt, 64, 1};
    return {kDLInt, 8, 1};
  }

  // Checked on every call, so nothing here allocates unless it fails.
  float* Arg(const PackedArgs& args, int i, const TensorInfo& t) const {
    auto where = [&]() { return symbol_ + ": argument " + std::to_string(i); };
    auto dl = args[i].try_cast<DLTensor*>();
    if (!dl.has_value()) TVM_FFI_THROW(TypeError) << where() << " is not a tensor";
    const DLTensor* x = *dl;
    if (x->device.device_type != kDLCPU) TVM_FFI_THROW(ValueError) << where() << " is not on the CPU";
    DLDataType want = DLTypeOf(t.dtype);
    if (x->dtype.code != want.code || x->dtype.bits != want.bits || x->dtype.lanes != 1)
      TVM_FFI_THROW(TypeError) << where() << " is not " << t.dtype;
    if (static_cast<size_t>(x->ndim) != t.shape.size() || !std::equal(t.shape.begin(), t.shape.end(), x->shape)) {
      std::vector<int64_t> shape(x->shape, x->shape + x->ndim);
      TVM_FFI_THROW(ValueError) << where() << " has shape " << ShapeStr(shape) << ", expected " << ShapeStr(t.shape);
    }
    if (!tvm::ffi::IsContiguous(*x)) TVM_FFI_THROW(ValueError) << where() << " is not contiguous";
    return reinterpret_cast<float*>(static_cast<char*>(x->data) + x->byte_offset);
  }

  // Where the blob says the weights are: in it (`symbol` empty) or in the library section `symbol`.
  WeightsRef Ref(const std::string& symbol) const { return {symbol, weights_->size(), Checksum()}; }

  // The weights' checksum, of their little-endian bytes as a section holds them: worked out at the first export or
  // save (the weights never change), under export_mutex_.
  uint64_t Checksum() const {
    if (!checksum_) {
      if (HostIsLittleEndian()) {
        checksum_ = WeightsChecksum(weights_->data(), weights_->size());
      } else {
        std::string le(weights_->size(), '\0');
        CopyFloatsLE(&le[0], weights_->data(), le.size());
        checksum_ = WeightsChecksum(le.data(), le.size());
      }
    }
    return *checksum_;
  }

  std::unique_ptr<const Executor> NewExecutor(const ParsedGraph& graph) const {
    if constexpr (HasSettings<Executor>::value) {
      return std::make_unique<Executor>(graph, settings_);
    } else {
      return std::make_unique<Executor>(graph);
    }
  }

  // The specialization for the sizes `env`: from the cache (moved to its front), or compiled now and
  // added, the least recently used one leaving when the cache is full. Compiling happens outside the
  // lock; a call already running on an evicted one keeps it alive through its shared_ptr.
  std::shared_ptr<const Specialization<Executor>> Specialize(const DimEnv& env) const {
    std::vector<int64_t> key;
    for (const std::string& name : graph_->dim_names()) key.push_back(env.at(name));
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      for (auto it = cache_.begin(); it != cache_.end(); ++it) {
        if (it->first == key) {
          if (it != cache_.begin()) cache_.splice(cache_.begin(), cache_, it);
          return cache_.front().second;
        }
      }
    }
    auto made = std::make_shared<Specialization<Executor>>();
    made->graph = std::make_unique<ParsedGraph>(symbol_, graph_json_, by_name_, Executor::CpuFeatures(),
                                                Executor::kMinGraphVersion, &env);
    made->executor = NewExecutor(*made->graph);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (const auto& entry : cache_)
      if (entry.first == key) return entry.second;  // another thread made it meanwhile
    cache_.emplace_front(std::move(key), made);
    ++created_;
    while (cache_.size() > cache_bound_) cache_.pop_back();
    return made;
  }

  // f(executor) for the executor of a static graph, or of the shape called last (kept alive while f runs, should
  // another thread's call evict it); nothing before a symbolic graph's first call.
  template <class F>
  void WithLastExecutor(F f) const {
    if (executor_) return f(*executor_);
    std::shared_ptr<const Specialization<Executor>> last;
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (cache_.empty()) return;
      last = cache_.front().second;
    }
    f(*last->executor);
  }

  MemoryUse Memory() const {
    if (executor_) return executor_->Memory();
    MemoryUse use;
    use.reads_mapped_constants = false;  // nothing compiled yet reads them
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (const auto& entry : cache_) {
      MemoryUse one = entry.second->executor->Memory();
      use.reads_mapped_constants = use.reads_mapped_constants || one.reads_mapped_constants;
      use.workspace_bytes = std::max(use.workspace_bytes, one.workspace_bytes);
      use.constant_bytes += one.constant_bytes;
    }
    return use;
  }

  int MaxThreads() const {
    if constexpr (ReportsThreads<Executor>::value) {
      if (executor_) return executor_->MaxThreads();
      if constexpr (HasSettings<Executor>::value) return Executor::MaxThreadsOf(settings_);
    }
    return 1;
  }

  // Destination-passing style: outputs are the caller's buffers, written in place. A graph with symbolic
  // dims may also take shapes among its inputs (shape_arguments), which size dims no input has whole.
  void Call(const PackedArgs& args) const {
    size_t ni = graph_->inputs().size(), no = graph_->outputs().size(), ns = graph_->shape_arguments().size();
    if (static_cast<size_t>(args.size()) != ni + ns + no) {
      if (ns == 0)
        TVM_FFI_THROW(TypeError) << symbol_ << ": expected " << ni << " input and " << no << " output tensors, got "
                                 << args.size() << " arguments";
      TVM_FFI_THROW(TypeError) << symbol_ << ": expected " << ni << " input, " << ns << " shape and " << no
                               << " output arguments, got " << args.size() << " arguments";
    }
    std::shared_ptr<const Specialization<Executor>> special;
    const ParsedGraph* graph = graph_.get();
    const Executor* executor = executor_.get();
    constexpr size_t kMaxInputs = 64;
    int position[kMaxInputs];  // the argument each tensor input is
    if (ni > kMaxInputs) TVM_FFI_THROW(ValueError) << symbol_ << ": more than " << kMaxInputs << " inputs";
    DimEnv given;
    for (size_t a = 0, i = 0, k = 0; a < ni + ns; ++a) {
      if (k < ns && graph_->shape_arguments()[k].first == static_cast<int>(a)) {
        auto shape = args[a].try_cast<tvm::ffi::Shape>();
        const std::vector<std::string>& names = graph_->shape_arguments()[k++].second;
        if (!shape.has_value() || shape->size() != names.size())
          TVM_FFI_THROW(TypeError) << symbol_ << ": argument " << a << " is not a shape of " << names.size() << " dims";
        for (size_t d = 0; d < names.size(); ++d) given[names[d]] = (*shape)[d];
      } else {
        position[i++] = static_cast<int>(a);
      }
    }
    if (!executor) {  // symbolic dims: size them from the inputs, then take that shape's executor
      const int64_t* shapes[kMaxInputs];
      int ranks[kMaxInputs];
      for (size_t i = 0; i < ni; ++i) {
        auto dl = args[position[i]].try_cast<DLTensor*>();
        if (!dl.has_value()) TVM_FFI_THROW(TypeError) << symbol_ << ": argument " << position[i] << " is not a tensor";
        shapes[i] = (*dl)->shape;
        ranks[i] = (*dl)->ndim;
      }
      special = Specialize(graph_->Bind(symbol_, shapes, ranks, std::move(given)));
      graph = special->graph.get();
      executor = special->executor.get();
    }
    // Small partitions are the common case: keep their pointers on the stack.
    constexpr size_t kOnStack = 16;
    float* stack[kOnStack];
    std::vector<float*> heap(ni + no > kOnStack ? ni + no : 0);
    float** ptrs = ni + no > kOnStack ? heap.data() : stack;
    for (size_t i = 0; i < ni; ++i) ptrs[i] = Arg(args, position[i], graph->tensor(graph->inputs()[i]));
    for (size_t i = 0; i < no; ++i)
      ptrs[ni + i] = Arg(args, static_cast<int>(ni + ns + i), graph->tensor(graph->outputs()[i]));
    executor->Run(ptrs, ptrs + ni);
  }

  const std::string symbol_;
  const std::string graph_json_;
  const std::vector<ConstEntry> entries_;  // the constants, where they are in weights_
  const std::shared_ptr<WeightsBlock> weights_;
  const std::string kind_;
  std::map<std::string, ConstSpan> by_name_;  // into weights_
  mutable std::mutex export_mutex_;
  mutable std::string export_symbol_;  // the library section the blob names while an export is under way
  mutable std::optional<uint64_t> checksum_;  // Checksum(), once known
  typename HasSettings<Executor>::type settings_{};
  std::unique_ptr<const ParsedGraph> graph_;     // the graph as written (a template when symbolic)
  std::unique_ptr<const Executor> executor_;     // for a static graph; null when symbolic
  // Symbolic graphs: the specializations, most recently used first, keyed by the sizes of dim_names().
  size_t cache_bound_ = kDefaultShapeCache;
  mutable std::mutex cache_mutex_;
  mutable std::list<std::pair<std::vector<int64_t>, std::shared_ptr<const Specialization<Executor>>>> cache_;
  mutable int64_t created_ = 0;
};

// Defines byoc.<name>.create / format_version / save_to_bytes and the loader.
template <class Executor>
void RegisterGraphRuntime() {
  using M = GraphModuleObj<Executor>;
  namespace refl = tvm::ffi::reflection;
  const std::string prefix = std::string("byoc.") + Executor::kName + ".";
  const std::string kind = M::Kind();
  refl::GlobalDef()
      .def((prefix + "create").c_str(), M::Create)
      .def((prefix + "format_version").c_str(), []() -> int64_t { return kBlobVersion * 1000 + kGraphVersion; })
      .def((prefix + "save_to_bytes").c_str(),
           [kind](const Module& mod) -> Bytes {
             if (std::string(mod->kind()) != kind) Fail("save_to_bytes: not a " + kind + " module");
             return mod->SaveToBytes();
           })
      .def((prefix + "export_weights").c_str(),
           [kind](const Module& mod, const String& path) -> String {
             if (std::string(mod->kind()) != kind) Fail("export_weights: not a " + kind + " module");
             return static_cast<const M*>(mod.operator->())->ExportWeights(std::string(path));
           })
      .def(("ffi.Module.load_from_bytes." + kind).c_str(), M::LoadFromBytes);
}

}  // namespace graph_runtime
}  // namespace byoc

#endif  // BYOC_GRAPH_RUNTIME_MODULE_H_
