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

// AVX-512 F: what byoc's GEMV (gemv.h) needs.
inline bool CpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}

// AVX-512 with VNNI (and BW, VL): what the int8 dots of nbits.h's VNNI form need.
inline bool CpuHasAvx512Vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_CPU_H_
