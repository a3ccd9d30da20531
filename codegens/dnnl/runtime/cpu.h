// cpu.h -- what the CPU itself has, for byoc's own kernels (oneDNN's effective ISA, which ONEDNN_MAX_CPU_ISA caps,
// is OnednnRuns in common.h).
#ifndef BYOC_DNNL_CPU_H_
#define BYOC_DNNL_CPU_H_

namespace byoc {
namespace dnnl_runtime {

// AVX2 with FMA: what the kernels compiled with __attribute__((target("avx2,fma"))) need.
inline bool CpuHasAvx2Fma() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_CPU_H_
