// libdeepcontext_preload.so: profiles a native executable, with no change to it. `deepcontext run
// -- ./program` starts the program with this library in LD_PRELOAD; its constructor starts the
// core's session (every thread sampled by its kernel CPU clock, native frames by libunwind), and
// the profile is written at exit, on SIGINT/SIGTERM, and by the periodic checkpoint.
//
// Configuration comes from the environment, which the CLI sets (and this library removes, so the
// program's own children are not profiled): DEEPCONTEXT_PRELOAD_OUTPUT (required),
// DEEPCONTEXT_PRELOAD_INTERVAL_MS, DEEPCONTEXT_PRELOAD_CHECKPOINT_S, DEEPCONTEXT_PRELOAD_QUIET.

#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "monitor/session.h"
#include "tree/cct.h"

namespace {

std::atomic<bool> g_running{false};
bool g_quiet = false;
sem_t g_signal_sem;
std::atomic<int> g_signal{0};

double env_double(const char *name, double fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::strtod(v, nullptr) : fallback;
}

std::string read_file(const char *path) {
  std::string out;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  close(fd);
  return out;
}

// The command line as a JSON list, from /proc/self/cmdline (NUL-separated).
std::string command_json() {
  std::string raw = read_file("/proc/self/cmdline"), out = "[";
  size_t start = 0;
  bool first = true;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    out += first ? "\"" : ", \"";
    first = false;
    for (char c : raw.substr(start, end - start)) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    out += '"';
    start = end + 1;
  }
  return out + "]";
}

// Remove our library from LD_PRELOAD so that programs this one starts run unprofiled.
void unset_preload() {
  const char *v = std::getenv("LD_PRELOAD");
  if (!v) return;
  std::string kept, item, all = v;
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t end = all.find_first_of(": ", pos);
    if (end == std::string::npos) end = all.size();
    item = all.substr(pos, end - pos);
    if (!item.empty() && item.find("libdeepcontext_preload") == std::string::npos)
      kept += (kept.empty() ? "" : ":") + item;
    pos = end + 1;
  }
  if (kept.empty()) {
    unsetenv("LD_PRELOAD");
  } else {
    setenv("LD_PRELOAD", kept.c_str(), 1);
  }
}

void stop_session() {
  if (!g_running.exchange(false)) return;
  std::string err = dctx::session_stop();
  if (!err.empty()) {
    std::fprintf(stderr, "deepcontext: %s\n", err.c_str());
  } else if (!g_quiet) {
    std::fprintf(stderr, "deepcontext: wrote %s\n", dctx::session_output().c_str());
  }
}

// Signal handlers may only post the semaphore; this thread writes the profile, then lets the
// signal's default action end the program as it would have.
void on_signal(int sig) {
  g_signal.store(sig);
  sem_post(&g_signal_sem);
}

void signal_thread() {
  pthread_setname_np(pthread_self(), "dctx-signal");
  while (sem_wait(&g_signal_sem) != 0) {
  }
  int sig = g_signal.load();
  stop_session();
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_signal(int sig) {
  struct sigaction old{};
  if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;  // program's own
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
}

__attribute__((constructor)) void preload_start() {
  const char *out = std::getenv("DEEPCONTEXT_PRELOAD_OUTPUT");
  if (!out || !*out) return;
  dctx::SessionOptions opts;
  opts.output = out;
  opts.sampler.interval_ns =
      static_cast<uint64_t>(env_double("DEEPCONTEXT_PRELOAD_INTERVAL_MS", 10.0) * 1e6);
  opts.sampler.native = true;
  opts.sampler.wall = false;  // threads have no Python state to tell running from waiting
  opts.sampler.counters = false;
  opts.checkpoint_s = env_double("DEEPCONTEXT_PRELOAD_CHECKPOINT_S", 60.0);
  g_quiet = std::getenv("DEEPCONTEXT_PRELOAD_QUIET") != nullptr;
  unsetenv("DEEPCONTEXT_PRELOAD_OUTPUT");
  unset_preload();
  std::string err = dctx::session_start(opts);
  if (!err.empty()) {
    std::fprintf(stderr, "deepcontext: %s\n", err.c_str());
    return;
  }
  dctx::tree().set_meta("command", command_json());
  dctx::tree().set_meta("program_kind", "native");
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) dctx::tree().set_meta("host", host);
  g_running.store(true);
  sem_init(&g_signal_sem, 0, 0);
  std::thread(signal_thread).detach();
  install_signal(SIGINT);
  install_signal(SIGTERM);
  std::atexit(stop_session);
}

}  // namespace
