#include "native_unwind.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "tree/cct.h"

namespace dctx {
namespace {

constexpr int kMaxPcs = 256;
// One request at a time (there is one sampler thread): the handler checks it is the target.
std::atomic<pid_t> g_target{0};
std::atomic<int> g_count{-1};
void *g_pcs[kMaxPcs];
int g_signal = 0;

// Where the kernel writes the signal frame. Without an alternate stack it goes below the
// interrupted rsp, and code may point rsp anywhere: oneDNN's JIT gemm kernels (under XLA:CPU's
// and PyTorch's matmuls) run with rsp inside a page-aligned malloc'd workspace, so a frame
// (~3 KB with AVX-512 state) written there overwrote the heap chunk below it ("corrupted size vs.
// prev_size" in the gemm's free) -- whatever the handler did, even nothing. So every thread is
// given an alternate signal stack (SA_ONSTACK) before it is sampled: the first signal a thread
// gets (the arming one) is sent only while /proc says it is blocked in a system call, where its
// rsp is the one the call was made with, or preempted in a loaded object's code (not JIT code);
// that handler installs the stack for later signals.
constexpr size_t kAltStack = 64 * 1024;
constexpr size_t kGuard = 4096;
struct Arm {
  void *stack = nullptr;     // base of the usable part (above the guard page)
  uintptr_t expect_pc = 0;   // the user pc of the blocking call, from /proc
  uintptr_t lo = 0, hi = 0;  // the mapping that holds the call's sp (the thread's stack)
};
Arm g_arm;                         // the arming request, or stack == nullptr
std::atomic<int> g_arm_result{0};  // 1 installed ours, 2 kept a larger one, 3 failed
std::atomic<uint64_t> g_stats[5];  // armed, arm raced (on the stack), arm unsafe, lost, forced

// A thread's state as the sampler knows it (only the sampler thread touches this).
struct Armed {
  void *mapping = nullptr;  // ours (kGuard + kAltStack), unmapped once the thread is gone
  bool armed = false;
  int tries = 0;  // arming attempts that found the thread running
};
std::unordered_map<pid_t, Armed> g_armed;

void install_stack(ucontext_t *uc) {
  stack_t cur{};
  int r = 3;
  if (sigaltstack(nullptr, &cur) == 0) {
    if (!(cur.ss_flags & SS_DISABLE) && cur.ss_size >= kAltStack) {
      r = 2;  // someone's (faulthandler's) stack, large enough: keep it
    } else if (!(cur.ss_flags & SS_ONSTACK)) {
      stack_t ss{};
      ss.ss_sp = g_arm.stack;
      ss.ss_size = kAltStack;
      ss.ss_flags = 0;
      // rt_sigreturn restores the alternate stack saved in the frame (uc_stack): set both, or
      // the stack is gone again when this handler returns.
      if (sigaltstack(&ss, nullptr) == 0) {
        uc->uc_stack = ss;
        r = 1;
      }
    }
  }
  // The frame of this (arming) signal went below the interrupted rsp: safe when that is the
  // blocking call's (the pc /proc gave), or at least inside the thread's stack mapping.
  const auto pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const auto sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  // (A restarted call's pc is rewound by the 2 bytes of the syscall instruction.)
  if (g_arm.expect_pc != 0 && pc != g_arm.expect_pc && pc != g_arm.expect_pc - 2) {
    g_stats[(sp >= g_arm.lo && sp < g_arm.hi) ? 1 : 2].fetch_add(1, std::memory_order_relaxed);
  }
  g_arm_result.store(r, std::memory_order_release);
}

// unw_step, not unw_backtrace: unw_backtrace's fast path keeps a per-thread trace cache whose
// first use in a thread calls pthread_setspecific, which may calloc -- not in a handler.
void handler(int, siginfo_t *, void *ctx) {
  int saved = errno;
  if (static_cast<pid_t>(syscall(SYS_gettid)) == g_target.load(std::memory_order_acquire)) {
    if (g_arm.stack) install_stack(static_cast<ucontext_t *>(ctx));
    unw_context_t uc;
    unw_cursor_t cursor;
    int n = 0;
    if (unw_getcontext(&uc) == 0 && unw_init_local(&cursor, &uc) == 0) {
      do {
        unw_word_t ip = 0;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0) break;
        g_pcs[n++] = reinterpret_cast<void *>(ip);
      } while (n < kMaxPcs && unw_step(&cursor) > 0);
    }
    g_count.store(n, std::memory_order_release);
  }
  errno = saved;
}

// /proc/self/task/<tid>/syscall: "<nr> <6 args> <sp> <pc>" while the thread is blocked in a
// call, "-1 <sp> <pc>" when it is off the CPU in user code, "running" when it runs. in_call says
// which of the first two.
bool stopped_at(pid_t tid, uintptr_t *sp, uintptr_t *pc, bool *in_call) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", int(tid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  *in_call = buf[0] >= '0' && buf[0] <= '9';
  if (!*in_call && std::strncmp(buf, "-1 ", 3) != 0) return false;  // running
  const int want = *in_call ? 9 : 3;
  unsigned long v[9];
  int k = 0;
  char *p = *in_call ? buf : buf + 3;
  if (!*in_call) k = 1;
  while (k < want) {
    char *end = nullptr;
    v[k] = std::strtoul(p, &end, k == 0 ? 10 : 16);
    if (end == p) break;
    ++k;
    p = end;
  }
  if (k != want) return false;
  *sp = v[want - 2];
  *pc = v[want - 1];
  return true;
}

// The mapping that holds addr (from /proc/self/maps), or false; file_backed: it maps a file.
bool mapping_of(uintptr_t addr, uintptr_t *lo, uintptr_t *hi, bool *file_backed = nullptr) {
  FILE *f = std::fopen("/proc/self/maps", "re");
  if (!f) return false;
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof line, f)) {
    char *end = nullptr;
    const unsigned long a = std::strtoul(line, &end, 16);
    if (end == line || *end != '-') continue;
    const unsigned long b = std::strtoul(end + 1, nullptr, 16);
    if (addr >= a && addr < b) {
      *lo = a;
      *hi = b;
      if (file_backed) *file_backed = std::strchr(line, '/') != nullptr;
      found = true;
      break;
    }
  }
  std::fclose(f);
  return found;
}

// Sends the signal and waits up to 20 ms for the handler's pcs; -1 when none came.
int signal_and_wait(pid_t tid) {
  g_count.store(-1, std::memory_order_relaxed);
  g_target.store(tid, std::memory_order_release);
  if (syscall(SYS_tgkill, getpid(), tid, g_signal) != 0) {
    g_target.store(0);
    return -1;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  int n;
  while ((n = g_count.load(std::memory_order_acquire)) < 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      g_target.store(0);
      // A late handler may still write; wait for it briefly so the buffer is not reused under it.
      for (int i = 0; i < 1000 && g_count.load() < 0; ++i) std::this_thread::yield();
      return -1;
    }
    std::this_thread::yield();
  }
  g_target.store(0);
  return n;
}

// Gives tid an alternate signal stack (see g_arm), unwinding it on the way; returns the handler's
// pc count, -1 when the thread was not armed now (it runs: try at a later tick).
int arm(pid_t tid, Armed &a, bool may_force) {
  uintptr_t sp = 0, pc = 0, lo = 0, hi = 0;
  bool in_call = false;
  // A thread may compute without ever stopping (a native executable's, a Python thread with the
  // GIL released): with may_force, after 3 tries, arm it where it runs (the risk the stack
  // removes for every later signal; counted as forced).
  const bool force = may_force && ++a.tries > 3;
  if (force) {
    g_stats[4].fetch_add(1, std::memory_order_relaxed);
  } else if (!stopped_at(tid, &sp, &pc, &in_call) || !mapping_of(sp, &lo, &hi)) {
    return -1;
  } else if (!in_call) {
    // Preempted in user code: only in a loaded object's code, not JIT code (which may have
    // moved rsp off the stack, as oneDNN's gemm does).
    uintptr_t clo = 0, chi = 0;
    bool file = false;
    if (!mapping_of(pc, &clo, &chi, &file) || !file) return -1;
  }
  if (force) pc = 0;  // not classified by the handler: counted as forced
  if (!a.mapping) {
    void *m = mmap(nullptr, kGuard + kAltStack, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return -1;
    mprotect(m, kGuard, PROT_NONE);  // an overflow faults instead of writing below the stack
    a.mapping = m;
  }
  g_arm.stack = static_cast<char *>(a.mapping) + kGuard;
  g_arm.expect_pc = pc;
  g_arm.lo = lo;
  g_arm.hi = hi;
  g_arm_result.store(0, std::memory_order_relaxed);
  int n = signal_and_wait(tid);
  g_arm.stack = nullptr;
  int r = g_arm_result.load(std::memory_order_acquire);
  if (r == 1 || r == 2) {
    a.armed = true;
    g_stats[0].fetch_add(1, std::memory_order_relaxed);
    if (r == 2) {  // our stack is not in use: give it back
      munmap(a.mapping, kGuard + kAltStack);
      a.mapping = nullptr;
    }
  }
  return n;
}

std::mutex g_sym_mu;
std::unordered_map<uintptr_t, NativeFrame> g_syms;

constexpr size_t kMaxSymbolizers = 8;
struct Symbolizer {
  std::atomic<dctx_symbolizer_fn> fn{nullptr};
  void *user = nullptr;
};
Symbolizer g_symbolizers[kMaxSymbolizers];

// A registered symbolizer's frames for pc (code outside every loaded object), into f.
bool symbolize_jit(uintptr_t pc, NativeFrame &f) {
  for (Symbolizer &z : g_symbolizers) {
    dctx_symbolizer_fn fn = z.fn.load(std::memory_order_acquire);
    if (!fn) continue;
    uint32_t frames[8];
    size_t n = fn(pc, frames, 8, z.user);
    if (n == 0) continue;
    n = std::min<size_t>(n, 8);
    f.frame_id = frames[0];
    f.extra_count = static_cast<uint8_t>(n - 1);
    for (size_t i = 1; i < n; ++i) f.extra[i - 1] = frames[i];
    return true;
  }
  return false;
}

}  // namespace

bool native_unwind_install() {
  if (g_signal) return true;
  int sig = SIGRTMIN + 5;
  struct sigaction old{};
  sigaction(sig, nullptr, &old);
  if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) return false;  // someone else's
  struct sigaction sa{};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, nullptr) != 0) return false;
  g_signal = sig;
  return true;
}

size_t native_unwind_thread(pid_t tid, uintptr_t *out, size_t max, bool may_force) {
  if (!g_signal || tid <= 0) return 0;
  Armed &a = g_armed[tid];
  int n = a.armed ? signal_and_wait(tid) : arm(tid, a, may_force);
  if (n < 0) {
    if (a.armed) g_stats[3].fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  // Skip the handler's own frame and the signal trampoline.
  size_t skip = 2;
  size_t k = 0;
  for (int i = static_cast<int>(skip); i < n && k < max; ++i)
    out[k++] = reinterpret_cast<uintptr_t>(g_pcs[i]);
  return k;
}

void native_unwind_forget(pid_t tid) {
  auto it = g_armed.find(tid);
  if (it == g_armed.end()) return;
  if (it->second.mapping) munmap(it->second.mapping, kGuard + kAltStack);
  g_armed.erase(it);
}

void native_unwind_after_fork() {
  // The child's threads have other kernel ids; the one that forked keeps its stack (it is
  // re-armed under its new id and keeps the stack it has). The others' stacks are left mapped.
  new (&g_armed) std::unordered_map<pid_t, Armed>();
}

NativeUnwindStats native_unwind_stats() {
  return {g_stats[0].load(), g_stats[1].load(), g_stats[2].load(), g_stats[3].load(),
          g_stats[4].load()};
}

NativeFrame symbolize(uintptr_t pc) {
  std::lock_guard lock(g_sym_mu);
  auto it = g_syms.find(pc);
  if (it != g_syms.end()) return it->second;
  Dl_info info{};
  std::string name, module;
  // Return addresses point after the call; look up pc-1 so the call's own function is found.
  if (dladdr(reinterpret_cast<void *>(pc - 1), &info) && info.dli_fname) {
    module = info.dli_fname;
    auto slash = module.rfind('/');
    if (slash != std::string::npos) module = module.substr(slash + 1);
    if (info.dli_sname) {
      int status = 0;
      char *dem = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      name = status == 0 && dem ? dem : info.dli_sname;
      std::free(dem);
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "0x%lx",
                    static_cast<unsigned long>(pc - reinterpret_cast<uintptr_t>(info.dli_fbase)));
      name = buf;
    }
  } else {
    NativeFrame jit{};
    if (symbolize_jit(pc - 1, jit)) {
      if (g_syms.size() > 500000) g_syms.clear();
      g_syms.emplace(pc, jit);
      return jit;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(pc));
    name = buf;
  }
  NativeFrame f{};
  f.frame_id = tree().frame(DCTX_FRAME_NATIVE, name, "", 0, module);
  f.interpreter = name == "_PyEval_EvalFrameDefault" || name == "_PyEval_EvalFrame";
  f.python_runtime =
      module.rfind("libpython", 0) == 0 || module.rfind("python3", 0) == 0 || module == "python";
  f.libc = module.rfind("libc.so", 0) == 0;
  if (g_syms.size() > 500000) g_syms.clear();
  g_syms.emplace(pc, f);
  return f;
}

dctx_node append_native(dctx_node node, uintptr_t pc) {
  const NativeFrame f = symbolize(pc);
  node = tree().child(node, f.frame_id);
  for (uint8_t i = 0; i < f.extra_count; ++i) node = tree().child(node, f.extra[i]);
  return node;
}

}  // namespace dctx

extern "C" int dctx_register_symbolizer(dctx_symbolizer_fn fn, void *user) {
  if (!fn) return 0;
  std::lock_guard lock(dctx::g_sym_mu);
  for (size_t i = 0; i < dctx::kMaxSymbolizers; ++i) {
    dctx::Symbolizer &z = dctx::g_symbolizers[i];
    if (z.fn.load(std::memory_order_relaxed) != nullptr) continue;
    z.user = user;
    z.fn.store(fn, std::memory_order_release);
    dctx::g_syms.clear();  // pcs named 0x... so far may be code it knows
    return static_cast<int>(i + 1);
  }
  return 0;
}
