// program.cc -- a partition compiled once (the builder lowers its ops into values and steps; the plan binds the
// outputs and packs the arena), then run.
#include "program.h"

#include "builder.h"

namespace byoc {
namespace dnnl_runtime {

Program::Program(const ParsedGraph& graph, int max_threads, std::shared_ptr<SharedConsts> shared)
    : values_(graph, std::move(shared)), plan_(&values_) {
  Builder(graph, &values_, &plan_).Build(max_threads);
  plan_.Finish(graph);
}

}  // namespace dnnl_runtime
}  // namespace byoc
