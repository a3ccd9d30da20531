// program.cc -- a partition compiled once (the builder lowers its ops into values and steps; the plan binds the
// outputs and packs the arena), then run.
#include "program.h"

#include "builder.h"

namespace byoc {
namespace dnnl_runtime {

Program::Program(const ParsedGraph& graph, int max_threads, std::shared_ptr<SharedConsts> shared)
    : values_(graph, std::move(shared)), plan_(&values_) {
  // oneDNN sizes each primitive's work split for the team size current at creation: the steps' own, set op by
  // op, and for the output reorders Finish adds, the last op's (their steps run with that size too).
  OmpThreads omp;
  Builder(graph, &values_, &plan_).Build(max_threads, omp);
  plan_.Finish(graph);
  values_.ReleaseUnread(plan_.Used());  // weights dequantized at load, once reordered for their primitives
}

}  // namespace dnnl_runtime
}  // namespace byoc
