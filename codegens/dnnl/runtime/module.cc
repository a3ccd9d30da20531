// module.cc -- the dnnl runtime's module and FFI surface: the executor a graph module calls (its team's
// program, and a serial one when the machine is busy) and the byoc.dnnl.* globals.
#include <mutex>

#include "contention.h"
#include "program.h"

namespace byoc {
namespace graph_runtime {
const char* const kRuntimeName = "dnnl";
}  // namespace graph_runtime

namespace dnnl_runtime {

class DnnlExecutor {
 public:
  static constexpr const char* kName = "dnnl";
  static constexpr char kMagic[8] = {'B', 'Y', 'O', 'C', 'D', 'N', 'N', 'L'};
  // Version 3: the activations spelled as several ops arrive as one op (codegens/dnnl/activations.py); an
  // older graph still spells them, and this runtime no longer finds them in the op sequence.
  static constexpr int64_t kMinGraphVersion = 3;

  // "vnni" when oneDNN's int8 kernels run on VNNI here (u8 x s8 products summed in int32: exact for any weight
  // and for s8 sources), else "no_vnni" (pairs summed in int16, which saturates; an s8 source halves the
  // weights): codegens/dnnl/quantized.py sends such units both ways. oneDNN's effective ISA, so
  // ONEDNN_MAX_CPU_ISA counts.
  static std::set<std::string> CpuFeatures() { return {OnednnHasVnni() ? "vnni" : "no_vnni"}; }

  // What a module keeps for all its programs: the team size of the thread that created it, and the
  // weights its programs reordered (a graph with symbolic dims compiles one program per shape, on
  // whichever thread first calls with that shape).
  struct Settings {
    int max_threads = 0;
    std::shared_ptr<SharedConsts> consts;
  };
  static Settings NewSettings() { return {ThreadsForNewModules(), std::make_shared<SharedConsts>()}; }
  static int MaxThreadsOf(const Settings& s) { return s.max_threads; }

  DnnlExecutor(const ParsedGraph& graph, const Settings& settings)
      : g_(graph), settings_(settings), max_threads_(settings.max_threads), team_(graph, max_threads_, settings.consts),
        watch_(graph.BoolOption("contention_watch", true) && team_.parallel()) {}

  // The team size this module's primitives were created for (the module's get_max_threads).
  int MaxThreads() const { return max_threads_; }

  // What runs each step of the team's program (the module's get_implementations), and the steps' times while
  // step timing was on (get_step_times; calls the busy-machine switch sent to the serial program are not in them).
  std::vector<std::string> Implementations() const { return team_.Implementations(); }
  std::vector<std::pair<int64_t, int64_t>> StepTimes() const { return team_.StepTimes(); }

  // What the module holds besides its constants as given: one workspace per call in flight,
  // and the reordered constants of each program compiled (the serial one once it has run).
  MemoryUse Memory() const {
    MemoryUse use{team_.WorkspaceBytes(), team_.ConstantBytes(), /*reads_mapped_constants=*/false};
    if (const Program* serial = serial_ready_.load(std::memory_order_acquire)) {
      use.workspace_bytes = std::max(use.workspace_bytes, serial->WorkspaceBytes());
      use.constant_bytes += serial->ConstantBytes();
    }
    return use;
  }

  void Run(float* const* in, float* const* out) const {
    if (!watch_) {  // nothing to choose: no clock reads on the path of small modules
      g_team_runs.fetch_add(1, std::memory_order_relaxed);
      return team_.Run(in, out);
    }
    bool serial = chooser_.Call(
        [&] {
          if (!chooser_.WantsCpuTime()) {
            double wall = ClockUs(CLOCK_MONOTONIC);
            team_.Run(in, out);
            wall = ClockUs(CLOCK_MONOTONIC) - wall;
            return std::make_pair(wall, wall);
          }
          double wall = ClockUs(CLOCK_MONOTONIC), caller = ClockUs(CLOCK_THREAD_CPUTIME_ID),
                 process = ClockUs(CLOCK_PROCESS_CPUTIME_ID);
          team_.Run(in, out);
          caller = ClockUs(CLOCK_THREAD_CPUTIME_ID) - caller;
          process = ClockUs(CLOCK_PROCESS_CPUTIME_ID) - process;
          return std::make_pair(ClockUs(CLOCK_MONOTONIC) - wall, std::min(caller, process / max_threads_));
        },
        [&] {
          const Program& program = Serial();  // compiled on first use, outside the timing
          double wall = ClockUs(CLOCK_MONOTONIC);
          program.Run(in, out);
          return ClockUs(CLOCK_MONOTONIC) - wall;
        });
    (serial ? g_serial_runs : g_team_runs).fetch_add(1, std::memory_order_relaxed);
  }

 private:
  const Program& Serial() const {
    std::call_once(serial_once_, [this] {
      serial_ = std::make_unique<Program>(g_, 1, settings_.consts);
      serial_ready_.store(serial_.get(), std::memory_order_release);
    });
    return *serial_;
  }

  const ParsedGraph& g_;
  Settings settings_;
  int max_threads_;
  Program team_;
  bool watch_;
  mutable ProgramChooser chooser_;
  mutable std::once_flag serial_once_;
  mutable std::unique_ptr<Program> serial_;
  mutable std::atomic<const Program*> serial_ready_{nullptr};  // serial_, once compiled (for Memory)
};

TVM_FFI_STATIC_INIT_BLOCK() {
  RegisterGraphRuntime<DnnlExecutor>();
  tvm::ffi::reflection::GlobalDef()
      .def("byoc.dnnl.set_max_threads",
           [](int64_t n) {
             if (n < 0) Fail("set_max_threads: a thread count is >= 0 (0: OpenMP's default)");
             t_max_threads = static_cast<int>(n);
           })
      .def("byoc.dnnl.max_threads", []() -> int64_t { return ThreadsForNewModules(); })
      .def("byoc.dnnl.run_counts", []() -> tvm::ffi::Array<int64_t> {
        return {g_team_runs.load(), g_serial_runs.load()};
      })
      .def("byoc.dnnl.kernel_runs", []() -> int64_t { return g_kernel_runs.load(); })
      // Every program in this process times each step from now on (true) or no longer (false); see get_step_times.
      .def("byoc.dnnl.set_step_timing", [](bool on) { g_step_timing.store(on); })
      // The programs `calls` calls would run (1: serial) when every team run takes `team_wall_us` with each of its
      // threads `team_cpu_us` on a CPU and every serial run `serial_us`: the chooser's schedule, without a clock.
      .def("byoc.dnnl.program_schedule",
           [](double team_wall_us, double team_cpu_us, double serial_us, int64_t calls) -> tvm::ffi::Array<int64_t> {
             ProgramChooser chooser;
             tvm::ffi::Array<int64_t> ran;
             for (int64_t i = 0; i < calls; ++i)
               ran.push_back(chooser.Call([&] {  // as Run: a CPU time only where the chooser reads one
                                            bool cpu = chooser.WantsCpuTime();
                                            return std::make_pair(team_wall_us, cpu ? team_cpu_us : team_wall_us);
                                          },
                                          [&] { return serial_us; }));
             return ran;
           });
}

}  // namespace dnnl_runtime
}  // namespace byoc
