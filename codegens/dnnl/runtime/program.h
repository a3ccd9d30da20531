// program.h -- a partition compiled into oneDNN primitives (Program): its values (values.h) and its step plan
// (step_plan.h), built once by the builder (builder.h), then run, from any number of threads at once.
#ifndef BYOC_DNNL_PROGRAM_H_
#define BYOC_DNNL_PROGRAM_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "step_plan.h"
#include "values.h"

namespace byoc {
namespace dnnl_runtime {

// A partition compiled into oneDNN primitives for teams of at most `max_threads` threads. `shared`, when
// given, holds the weights reordered by the other programs of the module (and takes this one's).
class Program {
 public:
  Program(const ParsedGraph& graph, int max_threads, std::shared_ptr<SharedConsts> shared = nullptr);
  // Whether any primitive runs on a team (else running it serially changes nothing).
  bool parallel() const { return plan_.parallel(); }
  void Run(float* const* in, float* const* out) const { plan_.Run(in, out); }
  // Bytes a call works in (the arena of intermediates and the largest scratchpad), and the
  // bytes of the constants this program made (weights reordered for its primitives).
  size_t WorkspaceBytes() const { return plan_.WorkspaceBytes(); }
  size_t ConstantBytes() const { return values_.OwnedConstBytes(); }
  // What runs each step, in order (Step::implementation).
  std::vector<std::string> Implementations() const { return plan_.Implementations(); }
  // Per step, in order: {calls, nanoseconds} while step timing was on.
  std::vector<std::pair<int64_t, int64_t>> StepTimes() const { return plan_.StepTimes(); }

 private:
  // Gives back the pages of oneDNN's code that creating primitives read (program.cc).
  static void ReleaseCreationCode();

  ValueTable values_;
  StepPlan plan_;
};

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_PROGRAM_H_
