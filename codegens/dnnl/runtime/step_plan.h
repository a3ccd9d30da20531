// step_plan.h -- the steps of a program and its memory (StepPlan): the primitives and kernels in the order they
// run, each with the team size it was created for; the lifetimes of the temps they read and write, packed into
// one arena; the pool of per-call workspaces; and the run itself. Op lowerings only add steps (Add, AddReorder)
// and temps (NewTemp); the rest is the plan's own.
#ifndef BYOC_DNNL_STEP_PLAN_H_
#define BYOC_DNNL_STEP_PLAN_H_

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"
#include "values.h"

namespace byoc {
namespace dnnl_runtime {

class StepPlan {
 public:
  explicit StepPlan(ValueTable* values) : values_(*values) {}

  // -- while a program is built (step_plan.cc) --
  // The team size of the steps added from now on (the op being compiled).
  void set_threads(int threads) { threads_ = threads; }
  int threads() const { return threads_; }
  // A new value in layout `desc` whose buffer is in the arena, live from the first step that reads or writes it to
  // the last.
  int NewTemp(const Desc& desc);
  // Runs `primitive` (or byoc's `kernel`) on `args` with a scratchpad of `scratchpad`.
  void Add(dnnl::primitive primitive, std::vector<Arg> args, const Desc& scratchpad,
           std::shared_ptr<const Kernel> kernel = nullptr);
  // A reorder of value `from` into value `to`.
  void AddReorder(int from, int to);
  // How many steps there are so far.
  size_t size() const { return steps_.size(); }
  // Takes the last step back, with temp `v`, which it alone wrote (a byte table composed into a later one).
  void DropLast(int v) {
    steps_.pop_back();
    lifetimes_.erase(v);
  }
  // -- once final --
  // Whether any step runs on a team (else running it serially changes nothing).
  bool parallel() const { return parallel_; }
  void Run(float* const* in, float* const* out) const;
  // Bytes a call works in: the arena of intermediates and the largest scratchpad.
  size_t WorkspaceBytes() const { return arena_bytes_ + scratch_bytes_; }
  // What runs each step, in order (Step::implementation).
  std::vector<std::string> Implementations() const;
  // Per step, in order: {calls, nanoseconds} while step timing was on.
  std::vector<std::pair<int64_t, int64_t>> StepTimes() const;

 private:
  friend class Program;  // which alone finishes a plan
  // The steps are final: the graph's outputs bound to the caller's buffers (in place where their layout is plain),
  // the arena planned, the steps' timers made.
  void Finish(const ParsedGraph& graph);
  // The values the steps read or write, by Root.
  std::set<int> Used() const;

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
  static std::string ImplementationOf(const dnnl::primitive& primitive);
  void BindOutputs(const ParsedGraph& graph);
  void PlanArena();
  std::unique_ptr<Workspace> Take() const;
  void Give(std::unique_ptr<Workspace> ws) const;

  ValueTable& values_;
  std::vector<Step> steps_;
  std::map<int, std::pair<int, int>> lifetimes_;  // temp value -> [first, last] step
  int threads_ = 1;  // the team size of the op being compiled
  size_t arena_bytes_ = 0, scratch_bytes_ = 0;
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<Workspace>> pool_;
  std::unique_ptr<StepTime[]> step_times_;  // one per step, made when the steps are final
  bool parallel_ = false;  // set when the steps are final
};

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_STEP_PLAN_H_
