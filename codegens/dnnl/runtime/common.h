// common.h -- what every part of the dnnl runtime shares: oneDNN descs and the values, arguments and steps
// a program is made of, the thread settings, and the forms fused into a primitive.
#ifndef BYOC_DNNL_COMMON_H_
#define BYOC_DNNL_COMMON_H_

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph_runtime/module.h"

namespace byoc {
namespace dnnl_runtime {

using namespace byoc::graph_runtime;  // NOLINT: this file is one runtime built on it
using dnnl::algorithm;
using dnnl::memory;
using dnnl::post_ops;
using dnnl::primitive_attr;
using dnnl::prop_kind;
using Desc = dnnl::memory::desc;
using Dims = dnnl::memory::dims;

inline dnnl::engine& Engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// -- threads -------------------------------------------------------------------------------
// The team size for modules the calling thread creates: byoc sets it (byoc.dnnl.set_max_threads, from an
// artifact's threads=) on the thread that builds or loads the artifact, right before its modules are created,
// and each module keeps the count it was created with. Per thread, so that two artifacts built or loaded at
// once in one process with different counts each get their own. 0: OpenMP's default.
inline thread_local int t_max_threads = 0;

inline int ThreadsForNewModules() { return t_max_threads > 0 ? t_max_threads : omp_get_max_threads(); }

// Steps byoc ran itself (Kernel: Winograd transforms, byte tables) in this process: byoc.dnnl.kernel_runs().
inline std::atomic<int64_t> g_kernel_runs{0};

// Whether programs time each step (byoc.dnnl.set_step_timing; off: a call reads this flag once, and nothing else).
inline std::atomic<bool> g_step_timing{false};

// One step's time over the calls made while step timing was on.
struct StepTime {
  std::atomic<int64_t> calls{0}, ns{0};
};

// Single-thread work in microseconds, roughly, on AVX2: multiply-adds of a convolution or
// matmul, and elements read and written by anything else.
constexpr double kMacsPerUs = 20000, kElementsPerUs = 2500;
// A primitive below kParallelOpUs runs on one thread; so does one below kParallelAloneUs in a module whose
// total is below kParallelModuleUs. A team costs a wake-up of its sleeping threads at the first primitive
// after a pause (about 0.07 ms on a KVM guest with the team bound to CPUs: HeldOnPlace), which a short module
// of small primitives does not win back (Silero VAD, 0.2 ms a call: 1.4x onnxruntime with every primitive
// over 25 us on the team, 1.0-1.2x with this), while one primitive of 0.1 ms alone does (a softmax over
// [1,12,128,128] on one thread: 1.65x onnxruntime's two; on the team 0.93x). Measured on 2 cores, AVX-512 VNNI.
constexpr double kParallelOpUs = 25, kParallelAloneUs = 100, kParallelModuleUs = 1000;
// A token's GEMV (Builder::StreamsWeights) of at least kStreamOpUs takes the team where the module's such GEMVs
// total kStreamModuleUs: alone, or beside few, the team's entry into a call (its caller held on a place, its threads
// met) cost more than it saved (one int4 GEMV [1,512]x[512,1408]: 22 us a call on the team, 21 serial; [1,384]x
// [384,640]: 17.5 against 11.5); ten of them ran 1.4x as fast on the team. Estimates, as WorkUs gives them.
constexpr double kStreamOpUs = 40, kStreamModuleUs = 300;
// The most copies along one axis a repeating broadcast_to makes (one concat input each; annotations/dnnl.py).
constexpr int64_t kMaxBroadcastCopies = 64;

// Sets the calling thread's OpenMP team size for its lifetime, then puts the caller's back.
class OmpThreads {
 public:
  OmpThreads() : saved_(omp_get_max_threads()), current_(saved_) {}
  ~OmpThreads() { omp_set_num_threads(saved_); }
  void Set(int n) {
    if (n != current_) omp_set_num_threads(current_ = n);
  }

 private:
  int saved_, current_;
};

// Holds the calling thread on the CPUs of its OpenMP place for its lifetime, then gives it back the CPUs it had.
// With OMP_PROC_BIND (byoc sets it when oneDNN's libraries load, unless the user chose) libgomp binds each team
// thread to a place after the caller's. Left free, the caller may be running on a team thread's CPU: that
// thread, woken there, then waits for the scheduler's next tick (4 ms on a 250 Hz kernel) before its share of
// the first primitive starts. Measured on a 2-core KVM guest, the first call after a 50 ms pause of Silero VAD
// over 8 chunks took 12.6 ms on a team, 1.2 ms on one thread, and 1.1 ms on a team with the caller held.
// Given back after the run, so that the caller's threads started later are not confined to one CPU. A caller
// already on its place's CPUs is left as it is: two sched_setaffinity calls (a task move each) cost a 0.25 ms
// decoder step about 5 us (perf, AMD EPYC), and a caller that a run keeps busy stays where it is.
class HeldOnPlace {
 public:
  HeldOnPlace() {
    if (omp_get_proc_bind() == omp_proc_bind_false) return;
    thread_local bool placed = false;  // this thread's place and its CPUs are known (place_cpus)
    thread_local cpu_set_t place_cpus;
    if (placed) {
      int cpu = sched_getcpu();
      if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &place_cpus)) return;
    }
    held_ = pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) == 0;
    int place = omp_get_place_num();  // which binds a thread that has no place yet (libgomp)
    if (!held_ || place < 0) return;
    if (!placed) {
      std::vector<int> ids(omp_get_place_num_procs(place));
      omp_get_place_proc_ids(place, ids.data());
      CPU_ZERO(&place_cpus);
      for (int id : ids) CPU_SET(id, &place_cpus);
      placed = true;
    }
    pthread_setaffinity_np(pthread_self(), sizeof place_cpus, &place_cpus);
  }
  ~HeldOnPlace() {
    if (held_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }
  HeldOnPlace(const HeldOnPlace&) = delete;
  HeldOnPlace& operator=(const HeldOnPlace&) = delete;

 private:
  cpu_set_t saved_;
  bool held_ = false;
};

constexpr size_t kAlign = 64;

inline size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// oneDNN has no rank-0 tensors: a scalar is a 1-element vector.
inline Dims DimsOf(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1};
  return Dims(shape.begin(), shape.end());
}

// Row-major (the layout of every tensor the caller and TVM hand over); a
// shape (scalars included) or oneDNN dims.
inline Desc Plain(const std::vector<int64_t>& shape, memory::data_type type = memory::data_type::f32) {
  Dims dims = DimsOf(shape);
  Dims strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(); i > 0; --i) {
    strides[i - 1] = stride;
    stride *= dims[i - 1];
  }
  return Desc(dims, type, strides);
}

// A strided layout whose dims of size 1 have the stride a plain tensor gives them. Such a dim is never stepped
// over, so its stride is free; left as a permutation or a slice made it, oneDNN's jit binary kernels computed
// garbage over a view whose bytes were plain ((1, 1, 2, 32) permuted to (1, 2, 1, 32), strides (64, 32, 64, 1):
// one token's heads in a decoder), and equal layouts compared unequal.
inline Desc Strided(const Dims& dims, memory::data_type type, Dims strides) {
  for (size_t i = dims.size(); i-- > 0;)
    if (dims[i] == 1) strides[i] = i + 1 < dims.size() ? strides[i + 1] * dims[i + 1] : 1;
  return Desc(dims, type, strides);
}

// The oneDNN type of a graph tensor (8-bit ones are the int8 units' activations).
// A bool mask is its bytes (u8); an int64 index, which oneDNN has no type for, is sized as f64 and read only by
// byoc's own kernels (Where, GatherElements).
inline memory::data_type DataType(const TensorInfo& t) {
  if (t.dtype == "uint8" || t.dtype == "bool") return memory::data_type::u8;
  if (t.dtype == "int8") return memory::data_type::s8;
  if (t.dtype == "int64") return memory::data_type::f64;
  return memory::data_type::f32;
}

// `shape` with leading 1s up to `rank` (numpy broadcasting).
// Whether oneDNN runs `isa`'s kernels here: its effective ISA, so ONEDNN_MAX_CPU_ISA (.ci/as-avx2) counts. ISAs are
// bit sets, each holding the bits of those it extends.
inline bool OnednnRuns(dnnl::cpu_isa isa) {
  int bits = static_cast<int>(isa);
  return (static_cast<int>(dnnl::get_effective_cpu_isa()) & bits) == bits;
}

// Whether oneDNN's int8 kernels run on VNNI here (u8 x s8 products summed in int32), AVX2's or AVX-512's.
inline bool OnednnHasVnni() {
  return OnednnRuns(dnnl::cpu_isa::avx2_vnni) || OnednnRuns(dnnl::cpu_isa::avx512_core_vnni);
}

inline Dims Padded(const std::vector<int64_t>& shape, size_t rank) {
  Dims dims(rank, 1);
  for (size_t i = 0; i < shape.size(); ++i) dims[rank - shape.size() + i] = shape[i];
  return dims;
}

inline Desc Any(const Dims& dims, memory::data_type type = memory::data_type::f32) {
  return Desc(dims, type, memory::format_tag::any);
}

inline primitive_attr UserScratchpad(const post_ops& ops = post_ops()) {
  primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(ops);
  return attr;
}

// A layout given by strides alone (plain, channels last, any permutation), not channel-blocked (layout.cc).
bool IsStrided(const Desc& desc);
// The format tag of a 3-D or 4-D `desc` among oneDNN's common ones, or undef (layout.cc).
memory::format_tag TagOf(const Desc& desc);

enum class Storage { kInput, kOutput, kConst, kTemp };

// A buffer the steps read or write, in one memory layout.
struct Value {
  Desc desc;
  Storage storage;
  int slot;       // input / output index, index into consts_, or arena offset (temps)
  int base = -1;  // a view (reshape) of this value's buffer; storage and slot are the base's
  size_t offset = 0;  // a view's bytes into the base's buffer (a contiguous part of it)
};

struct Arg {
  int key;    // DNNL_ARG_*
  int value;  // index into values_
  Desc desc;  // how the primitive sees the buffer (a value's desc, or a reshaped view of it)
  size_t offset = 0;  // bytes into the buffer where `desc` starts (a strided slice of it)
};

// A step byoc computes itself, between oneDNN primitives, on the memory objects of its arguments.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void Run(const std::unordered_map<int, memory>& args) const = 0;
  // What a profile and get_implementations call it ("winograd_input", ...).
  virtual const char* Name() const = 0;
};

struct Step {
  dnnl::primitive primitive;  // unless `kernel` is set
  std::vector<Arg> args;
  Desc scratchpad;
  int threads;  // the OpenMP team size it was created for
  std::shared_ptr<const Kernel> kernel = nullptr;
  // What runs it: "<primitive kind> <oneDNN implementation>" ("binary jit:uni", "convolution ref:any"),
  // or "kernel byoc:<name>" for byoc's own code.
  std::string implementation;
};

// One post-op: an element-wise function, or a binary op with a second tensor.
struct PostOp {
  algorithm alg;
  float alpha = 0.0f, beta = 0.0f;
  int tensor = -1;  // graph tensor of a binary post-op's second operand
};

// The ops of a node folded into its conv2d / matmul head.
struct Fused {
  std::vector<PostOp> post;
  int bias = -1;  // graph tensor of a bias added by the primitive itself
  int last;       // graph tensor the fused chain produces
  size_t next;    // first op index after the chain
};

// An 8-bit graph tensor a program computes as a byte table (LookupTable) of another.
struct ByteTable {
  int source;                  // the 8-bit graph tensor it maps
  std::vector<uint8_t> table;  // what it maps each byte of source to
  size_t step;                 // the step that applies it
};

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_COMMON_H_
