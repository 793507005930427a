#include "native_unwind.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>

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

// unw_step, not unw_backtrace: unw_backtrace's fast path keeps a per-thread trace cache whose
// first use in a thread calls pthread_setspecific, which may calloc — inside a handler that
// interrupted malloc on that thread, that corrupts the heap (seen on XLA's pool threads).
// unw_init_local/unw_step take libunwind's global cache under a lock with signals blocked.
void handler(int, siginfo_t *, void *) {
  int saved = errno;
  if (static_cast<pid_t>(syscall(SYS_gettid)) == g_target.load(std::memory_order_acquire)) {
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

std::mutex g_sym_mu;
std::unordered_map<uintptr_t, NativeFrame> g_syms;

}  // namespace

bool native_unwind_install() {
  if (g_signal) return true;
  int sig = SIGRTMIN + 5;
  struct sigaction old{};
  sigaction(sig, nullptr, &old);
  if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) return false;  // someone else's
  struct sigaction sa{};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, nullptr) != 0) return false;
  g_signal = sig;
  return true;
}

size_t native_unwind_thread(pid_t tid, uintptr_t *out, size_t max) {
  if (!g_signal) return 0;
  g_count.store(-1, std::memory_order_relaxed);
  g_target.store(tid, std::memory_order_release);
  if (syscall(SYS_tgkill, getpid(), tid, g_signal) != 0) {
    g_target.store(0);
    return 0;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  int n;
  while ((n = g_count.load(std::memory_order_acquire)) < 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      g_target.store(0);
      // A late handler may still write; wait for it briefly so the buffer is not reused under it.
      for (int i = 0; i < 1000 && g_count.load() < 0; ++i) std::this_thread::yield();
      return 0;
    }
    std::this_thread::yield();
  }
  g_target.store(0);
  // Skip the handler's own frame and the signal trampoline.
  size_t skip = 2;
  size_t k = 0;
  for (int i = static_cast<int>(skip); i < n && k < max; ++i)
    out[k++] = reinterpret_cast<uintptr_t>(g_pcs[i]);
  return k;
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

}  // namespace dctx
