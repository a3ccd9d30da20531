// contention.h -- the busy-machine switch: which of a module's two programs (its team's, or one compiled for
// one thread) the next call runs.
#ifndef BYOC_DNNL_CONTENTION_H_
#define BYOC_DNNL_CONTENTION_H_

#include <time.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <utility>

#include "common.h"

namespace byoc {
namespace dnnl_runtime {

// -- contention ----------------------------------------------------------------------------
// A team of two waits for its second thread at every primitive. When another process holds
// the other core, each wait is a scheduler time slice, and a run takes 10-100x its idle time.
// So a module that has team primitives keeps a second program, compiled for one thread, and
// ProgramChooser sends each call to whichever was faster when last timed:
// - kSlowRuns team runs in a row that were slow send the next calls to the serial program.
//   Slow means slower than the last serial run by kSwitchMargin; before the serial program
//   has run, it means that the team's threads spent much of the run off a CPU: the calling
//   thread's CPU time, or the process's over the team size, under kBusyShare of the wall time.
//   An unbound caller sleeps while it waits for its team, or for a core; a caller bound to
//   its own CPU (OMP_PROC_BIND) spins there while its team's thread waits for a busy core.
// - After the serial calls (one, the first time, to time it), kTrials team calls try the
//   team again (the first of them wakes the sleeping team, so the best one counts). Faster
//   than the last serial run, the team keeps the calls; slower, the serial program gets
//   twice as many calls as before (from kFirstBackoff up to kMaxBackoff).
// Every serial stretch re-times the serial program, so a stale time corrects itself. The
// serial program is compiled the first time it is needed (its reordered weights are a second
// copy). The graph's option contention_watch off (vendor_options, or BYOC_DNNL_CONTENTION=off
// when the artifact was built) keeps every call on the team's program. byoc.dnnl.run_counts() says how many runs each kind of program made.
constexpr double kBusyShare = 0.8;  // an idle team's threads spin at barriers: their share is ~1
constexpr double kMinContendedUs = 200;  // shorter runs cannot have waited a time slice
constexpr double kSwitchMargin = 1.2;
constexpr int kSlowRuns = 2, kTrials = 2, kFirstBackoff = 4, kMaxBackoff = 1024;

inline std::atomic<int64_t> g_team_runs{0}, g_serial_runs{0};

// CLOCK_MONOTONIC: wall time; CLOCK_THREAD_CPUTIME_ID: the calling thread's time on a CPU.
inline double ClockUs(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

// Which program the next call runs, learnt from the timings of the calls before it.
class ProgramChooser {
 public:
  // Whether the next team call's CPU times can decide anything: not once a serial run has been timed (then
  // its time decides), nor after a team run too short to have waited a time slice (the first slow run makes
  // the next one read them). Each read of a CPU clock is a system call, about 1.7 us on a KVM guest: the four
  // of a call were 3% of a 0.25 ms decoder step.
  bool WantsCpuTime() {
    std::lock_guard<std::mutex> lock(mutex_);
    return serial_us_ == 0 && last_team_us_ > kMinContendedUs / 2;
  }

  // One call, on the program the timings so far pick: `team()` runs the team's program and returns its
  // {wall, CPU per team thread} time in microseconds (the CPU time as the wall time where not WantsCpuTime),
  // `serial()` the serial one and its wall time.
  // Returns whether the call ran serially.
  template <class Team, class Serial>
  bool Call(Team team, Serial serial) {
    if (NextIsSerial()) {
      SerialRan(serial());
      return true;
    }
    std::pair<double, double> timed = team();
    TeamRan(timed.first, timed.second);
    return false;
  }

 private:
  bool NextIsSerial() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (serial_left_ == 0) return false;
    --serial_left_;
    return true;
  }

  void SerialRan(double wall_us) {
    std::lock_guard<std::mutex> lock(mutex_);
    serial_us_ = wall_us;
  }

  void TeamRan(double wall_us, double cpu_us) {
    std::lock_guard<std::mutex> lock(mutex_);
    last_team_us_ = wall_us;
    if (trials_left_ > 0) {
      trial_best_us_ = std::min(trial_best_us_, wall_us);
      if (--trials_left_ > 0) return;
      if (trial_best_us_ > serial_us_) {
        backoff_ = std::min(2 * backoff_, kMaxBackoff);
        GoSerial(backoff_);
      } else {
        backoff_ = kFirstBackoff;
      }
      return;
    }
    bool slow = serial_us_ > 0 ? wall_us > kSwitchMargin * serial_us_
                               : wall_us > kMinContendedUs && cpu_us < kBusyShare * wall_us;
    slow_streak_ = slow ? slow_streak_ + 1 : 0;
    if (slow_streak_ >= kSlowRuns) GoSerial(serial_us_ > 0 ? backoff_ : 1);
  }

  void GoSerial(int calls) {
    serial_left_ = calls;
    trials_left_ = kTrials;
    trial_best_us_ = std::numeric_limits<double>::infinity();
    slow_streak_ = 0;
  }

  std::mutex mutex_;
  int serial_left_ = 0, trials_left_ = 0, slow_streak_ = 0, backoff_ = kFirstBackoff;
  double serial_us_ = 0, trial_best_us_ = 0;  // serial_us_: the last serial run; 0 before the first
  double last_team_us_ = std::numeric_limits<double>::infinity();  // the last team run's wall time
};

}  // namespace dnnl_runtime
}  // namespace byoc

#endif  // BYOC_DNNL_CONTENTION_H_
