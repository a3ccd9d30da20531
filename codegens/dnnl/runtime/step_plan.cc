// step_plan.cc -- the step plan (StepPlan): steps and temps added while a program is built; then outputs bound in
// place, intermediates packed into one arena by lifetime, the pool of per-call workspaces, and the run.
#include <algorithm>
#include <chrono>
#include <optional>

#include "step_plan.h"

namespace byoc {
namespace dnnl_runtime {

// -- building --------------------------------------------------------------------------------
int StepPlan::NewTemp(const Desc& desc) {
  int v = values_.New(desc, Storage::kTemp);
  lifetimes_[v] = {-1, -1};
  return v;
}

void StepPlan::Add(dnnl::primitive primitive, std::vector<Arg> args, const Desc& scratchpad,
                   std::shared_ptr<const Kernel> kernel) {
  for (const Arg& a : args) {
    if (values_.StorageOf(a.value) != Storage::kTemp) continue;
    int step = static_cast<int>(steps_.size());
    auto& life = lifetimes_.at(values_.Root(a.value));
    if (life.first < 0 || life.first > step) life.first = step;
    life.second = std::max(life.second, step);
  }
  std::string implementation = kernel ? std::string("kernel byoc:") + kernel->Name() : ImplementationOf(primitive);
  steps_.push_back({std::move(primitive), std::move(args), scratchpad, threads_, std::move(kernel), implementation});
}

void StepPlan::AddReorder(int from, int to) {
  dnnl::reorder::primitive_desc pd(Engine(), values_[from].desc, Engine(), values_[to].desc, UserScratchpad());
  Add(dnnl::reorder(pd), {{DNNL_ARG_FROM, from, values_[from].desc}, {DNNL_ARG_TO, to, values_[to].desc}},
      pd.scratchpad_desc());
}

// "<primitive kind> <implementation>" as oneDNN's verbose log names them ("binary jit:uni").
std::string StepPlan::ImplementationOf(const dnnl::primitive& primitive) {
  const_dnnl_primitive_desc_t pd = primitive.get_primitive_desc();
  const char* impl = nullptr;
  dnnl_primitive_kind_t kind = dnnl_undefined_primitive;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind);
  return std::string(dnnl_prim_kind2str(kind)) + " " + (impl ? impl : "?");
}

// -- outputs, memory plan, workspaces --------------------------------------------------
void StepPlan::Finish(const ParsedGraph& graph) {
  BindOutputs(graph);
  PlanArena();
  step_times_ = std::make_unique<StepTime[]>(steps_.size());
  parallel_ = std::any_of(steps_.begin(), steps_.end(), [](const Step& step) { return step.threads > 1; });
}

// Each graph output is the caller's buffer: the op that computes it writes there
// directly when its layout is plain; otherwise (blocked, an input, a constant, a
// tensor listed twice) a final reorder converts into it.
void StepPlan::BindOutputs(const ParsedGraph& graph) {
  std::vector<bool> taken(values_.size(), false);
  for (size_t slot = 0; slot < graph.outputs().size(); ++slot) {
    int id = graph.outputs()[slot];
    Desc plain = Plain(graph.Shape(id), DataType(graph.tensor(id)));
    int v = values_.of(id);
    if (v < 0) Fail("graph output " + graph.tensor(id).name + " is never computed");
    // A plain view of a whole strided temp (a 2-D matmul's rows seen as [1, 14, 14, N], a matmul's heads written
    // through strides that make the transpose after it plain): the temp itself becomes the output, where a copy
    // took 10% of a dynamo-exported Linear.
    int r = values_.Root(v);
    bool whole_view = values_[v].base >= 0 && values_[v].offset == 0 && values_[v].desc == plain &&
                      values_[r].storage == Storage::kTemp && !taken[r] && IsStrided(values_[r].desc) &&
                      values_[r].desc.get_size() == plain.get_size();
    int own = whole_view ? r : v;
    if (values_[own].storage == Storage::kTemp && values_[own].base < 0 && (whole_view || values_[v].desc == plain) &&
        !taken[own]) {
      values_.Place(own, Storage::kOutput, static_cast<int>(slot));
      lifetimes_.erase(own);
      taken[own] = true;
    } else {
      int out = values_.New(plain, Storage::kOutput, static_cast<int>(slot));
      AddReorder(v, out);
    }
  }
}

// Temps share one arena: greedy first fit, biggest first, by [first, last] step.
void StepPlan::PlanArena() {
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
    values_.Place(temps[i], Storage::kTemp, static_cast<int>(offset));
    arena_bytes_ = std::max(arena_bytes_, offset + size);
  }
  for (const Step& s : steps_) scratch_bytes_ = std::max(scratch_bytes_, AlignUp(s.scratchpad.get_size()));
}

std::set<int> StepPlan::Used() const {
  std::set<int> used;
  for (const Step& s : steps_)
    for (const Arg& arg : s.args) used.insert(values_.Root(arg.value));
  return used;
}

std::unique_ptr<StepPlan::Workspace> StepPlan::Take() const {
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
      const Value& v = values_[values_.Root(arg.value)];
      char* base = v.storage == Storage::kConst  ? static_cast<char*>(values_.ConstData(v.slot))
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

void StepPlan::Give(std::unique_ptr<Workspace> ws) const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  pool_.push_back(std::move(ws));
}

// -- running ---------------------------------------------------------------------------------
void StepPlan::Run(float* const* in, float* const* out) const {
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

std::vector<std::string> StepPlan::Implementations() const {
  std::vector<std::string> all;
  for (const Step& s : steps_) all.push_back(s.implementation);
  return all;
}

std::vector<std::pair<int64_t, int64_t>> StepPlan::StepTimes() const {
  std::vector<std::pair<int64_t, int64_t>> all;
  for (size_t i = 0; i < steps_.size(); ++i) all.emplace_back(step_times_[i].calls.load(), step_times_[i].ns.load());
  return all;
}

}  // namespace dnnl_runtime
}  // namespace byoc
