// program.cc -- a partition compiled once (the builder lowers its ops into values and steps; the plan binds the
// outputs and packs the arena), then run.
#include "program.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

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
  std::set<int> read = plan_.Used();
  values_.ReleaseUnread(read);  // weights dequantized at load, once reordered for their primitives
  values_.SettleGiven(read);  // the library's pages of weights: reordered or copied, then given back
#ifdef __GLIBC__
  // Building freed as much as it keeps (weights dequantized or transformed on the way to their layouts, oneDNN's
  // descriptors): glibc keeps freed blocks below its sliding mmap threshold in the heap, resident. ResNet-50 QDQ
  // on AVX2 held 84 MB of them after load.
  malloc_trim(0);
#endif
}

}  // namespace dnnl_runtime
}  // namespace byoc
