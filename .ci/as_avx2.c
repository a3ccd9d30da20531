// as_avx2.c -- an LD_PRELOAD library that shows the process an AVX2 CPU (Haswell's class: AVX2 and FMA, no AVX-512,
// no VNNI, no AMX) on an AVX-512 machine, at native speed, so every library's cpuid dispatch (oneDNN,
// onnxruntime's MLAS, numpy, LLVM's host CPU, byoc's target_clones kernels) picks the code an AVX2 machine runs.
// Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID) makes each cpuid instruction trap; the SIGSEGV handler
// runs the real cpuid and clears the features an AVX2 machine lacks. Built and used by .ci/as-avx2.
// glibc picks its own string functions before this library loads, with the CPU's real features.
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

// Leaf 7, subleaf 0: AVX-512 F, DQ, IFMA, PF, ER, CD, BW, VL (EBX); VBMI, VBMI2, GFNI stays, VNNI, BITALG,
// VPOPCNTDQ (ECX); 4VNNIW, 4FMAPS, VP2INTERSECT, AMX-BF16, AVX512-FP16, AMX-TILE, AMX-INT8 (EDX).
#define EBX7 ((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31))
#define ECX7 ((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14))
#define EDX7 ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25))
// Leaf 7, subleaf 1: AVX-VNNI, AVX512-BF16, AMX-FP16, AVX-IFMA (EAX); AVX10 (EDX).
#define EAX71 ((1u << 4) | (1u << 5) | (1u << 21) | (1u << 23))
#define EDX71 (1u << 19)

static struct sigaction others;  // the SIGSEGV handler the program asked for, called for every other fault
static int (*real_sigaction)(int, const struct sigaction*, struct sigaction*);

static void faulting(int on) { syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1); }

static void on_segv(int sig, siginfo_t* info, void* context) {
  greg_t* r = ((ucontext_t*)context)->uc_mcontext.gregs;
  const unsigned char* ip = (const unsigned char*)r[REG_RIP];
  if (ip[0] == 0x0f && ip[1] == 0xa2) {  // cpuid
    unsigned leaf = (unsigned)r[REG_RAX], sub = (unsigned)r[REG_RCX], a, b, c, d;
    faulting(0);
    __cpuid_count(leaf, sub, a, b, c, d);
    faulting(1);
    if (leaf == 7 && sub == 0) b &= ~EBX7, c &= ~ECX7, d &= ~EDX7;
    if (leaf == 7 && sub == 1) a &= ~EAX71, d &= ~EDX71;
    if (leaf == 0xd && sub == 0) a &= ~0xe0u;  // no opmask or ZMM state to save
    r[REG_RAX] = a, r[REG_RBX] = b, r[REG_RCX] = c, r[REG_RDX] = d;
    r[REG_RIP] += 2;
    return;
  }
  if (others.sa_flags & SA_SIGINFO) {
    others.sa_sigaction(sig, info, context);
  } else if (others.sa_handler != SIG_IGN && others.sa_handler != SIG_DFL) {
    others.sa_handler(sig);
  } else {  // the default action: die of the fault, as without this library
    struct sigaction dfl = {0};
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &dfl, NULL);
  }
}

// The program's own SIGSEGV handler (Python's faulthandler, a JIT) is kept aside and called for the faults that
// are not a cpuid, so it cannot take the signal from on_segv.
int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (sig != SIGSEGV) return real_sigaction(sig, act, old);
  if (old) *old = others;
  if (act) others = *act;
  return 0;
}

static sighandler_t keep_aside(int sig, sighandler_t handler, sighandler_t (*real)(int, sighandler_t)) {
  if (sig != SIGSEGV) return real(sig, handler);
  sighandler_t old = (others.sa_flags & SA_SIGINFO) ? SIG_DFL : others.sa_handler;
  memset(&others, 0, sizeof others);
  others.sa_handler = handler;
  return old;
}

sighandler_t signal(int sig, sighandler_t handler) {
  static sighandler_t (*real)(int, sighandler_t);
  if (!real) real = (sighandler_t (*)(int, sighandler_t))dlsym(RTLD_NEXT, "signal");
  return keep_aside(sig, handler, real);
}

sighandler_t sysv_signal(int sig, sighandler_t handler) {
  static sighandler_t (*real)(int, sighandler_t);
  if (!real) real = (sighandler_t (*)(int, sighandler_t))dlsym(RTLD_NEXT, "sysv_signal");
  return keep_aside(sig, handler, real);
}

__attribute__((constructor)) static void start(void) {
  real_sigaction = (int (*)(int, const struct sigaction*, struct sigaction*))dlsym(RTLD_NEXT, "sigaction");
  struct sigaction act = {0};
  act.sa_sigaction = on_segv;
  act.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&act.sa_mask);
  real_sigaction(SIGSEGV, &act, &others);
  if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
    fprintf(stderr, "as-avx2: this kernel or CPU has no CPUID faulting (arch_prctl ARCH_SET_CPUID): cannot hide "
                    "AVX-512 from the process; run it on an AVX2 machine, or under qemu-x86_64 -cpu Haswell\n");
    _exit(2);
  }
}
