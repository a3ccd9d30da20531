// memory_plan.cc -- the memory plan: outputs bound in place, intermediates packed into one arena by lifetime, and
// the pool of per-call workspaces.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "program.h"

namespace byoc {
namespace dnnl_runtime {

// -- outputs, memory plan, workspaces --------------------------------------------------
// Each graph output is the caller's buffer: the op that computes it writes there
// directly when its layout is plain; otherwise (blocked, an input, a constant, a
// tensor listed twice) a final reorder converts into it.
void Program::BindOutputs() {
  std::vector<bool> taken(values_.size(), false);
  for (size_t slot = 0; slot < g_.outputs().size(); ++slot) {
    int id = g_.outputs()[slot];
    Desc plain = Plain(g_.Shape(id), DataType(g_.tensor(id)));
    int v = value_of_[id];
    if (v < 0) Fail("graph output " + g_.tensor(id).name + " is never computed");
    // A plain view of a whole strided temp (a 2-D matmul's rows seen as [1, 14, 14, N], a matmul's heads written
    // through strides that make the transpose after it plain): the temp itself becomes the output, where a copy
    // took 10% of a dynamo-exported Linear.
    int r = Root(v);
    bool whole_view = values_[v].base >= 0 && values_[v].offset == 0 && values_[v].desc == plain &&
                      values_[r].storage == Storage::kTemp && !taken[r] && IsStrided(values_[r].desc) &&
                      values_[r].desc.get_size() == plain.get_size();
    int own = whole_view ? r : v;
    if (values_[own].storage == Storage::kTemp && values_[own].base < 0 && (whole_view || values_[v].desc == plain) &&
        !taken[own]) {
      values_[own].storage = Storage::kOutput;
      values_[own].slot = static_cast<int>(slot);
      lifetimes_.erase(own);
      taken[own] = true;
    } else {
      int out = NewValue(plain, Storage::kOutput, static_cast<int>(slot));
      AddReorder(v, out);
    }
  }
}

// Temps share one arena: greedy first fit, biggest first, by [first, last] step.
void Program::PlanArena() {
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

std::unique_ptr<Program::Workspace> Program::Take() const {
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

void Program::Give(std::unique_ptr<Workspace> ws) const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  pool_.push_back(std::move(ws));
}

}  // namespace dnnl_runtime
}  // namespace byoc
