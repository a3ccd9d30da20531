// program.cc -- a partition compiled once (the builder lowers its ops into values and steps; the plan binds the
// outputs and packs the arena), then run.
#include "program.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <utility>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "builder.h"

namespace byoc {
namespace dnnl_runtime {

namespace {

// The pages of oneDNN's machine code (its executable segments), found once.
std::vector<std::pair<uintptr_t, size_t>> OneDnnCode() {
  std::vector<std::pair<uintptr_t, size_t>> ranges;
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&dnnl_engine_create), &info) || !info.dli_fbase) return ranges;
  struct Search {
    const void* base;
    std::vector<std::pair<uintptr_t, size_t>>* ranges;
  } search{info.dli_fbase, &ranges};
  dl_iterate_phdr(
      [](dl_phdr_info* object, size_t, void* arg) {
        auto* s = static_cast<Search*>(arg);
        if (object->dlpi_addr != reinterpret_cast<uintptr_t>(s->base)) return 0;  // not oneDNN's library
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = object->dlpi_phdr[i];
          if (segment.p_type == PT_LOAD && (segment.p_flags & PF_X))
            s->ranges->push_back({object->dlpi_addr + segment.p_vaddr, segment.p_memsz});
        }
        return 1;
      },
      &search);
  return ranges;
}

}  // namespace

// oneDNN's library is 52 MB of machine code; its static initializers and primitive creation run through a third
// of it, a run through under a tenth (measured on Silero VAD: 21 MB resident after load and a run, 4 MB when
// only runs had touched it). So once a program is built, the pages of that code go back to the kernel, and a run
// faults in from the page cache what it executes: a tiny model's process held 17 MB more than it ran.
void Program::ReleaseCreationCode() {
  static const std::vector<std::pair<uintptr_t, size_t>> code = OneDnnCode();
  for (const auto& [start, bytes] : code) ReleasePages(reinterpret_cast<const void*>(start), bytes);
}

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
  ReleaseCreationCode();
#ifdef __GLIBC__
  // Building freed as much as it keeps (weights dequantized or transformed on the way to their layouts, oneDNN's
  // descriptors): glibc keeps freed blocks below its sliding mmap threshold in the heap, resident. ResNet-50 QDQ
  // on AVX2 held 84 MB of them after load.
  malloc_trim(0);
#endif
}

}  // namespace dnnl_runtime
}  // namespace byoc
