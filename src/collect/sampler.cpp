#include "sampler.h"

#include <Python.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collect/native_unwind.h"
#include "collect/perf_counters.h"
#include "collect/thread_origin.h"
#include "context/python_stack.h"
#include "context/thread_context.h"
#include "deepcontext/monitor.h"
#include "tree/cct.h"

#if PY_VERSION_HEX >= 0x030D0000
#define DCTX_PY_FINALIZING() Py_IsFinalizing()
#else
#define DCTX_PY_FINALIZING() _Py_IsFinalizing()
#endif

namespace dctx {
namespace {

// The time a thread was runnable but waited for a CPU: the second field of its schedstat, which
// the kernel keeps per thread (CONFIG_SCHED_INFO). A file kept open per thread; -1 if unreadable.
class RunQueueWait {
 public:
  void open(pid_t tid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", int(tid));
    fd_ = ::open(path, O_RDONLY | O_CLOEXEC);
    last_ = read();
  }
  bool readable() const { return fd_ >= 0; }
  // Nanoseconds waited since the last call.
  uint64_t delta() {
    const uint64_t now = read();
    const uint64_t d = now > last_ ? now - last_ : 0;
    last_ = now;
    return d;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  uint64_t read() const {
    if (fd_ < 0) return 0;
    char buf[96];
    const ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *end = nullptr;
    std::strtoull(buf, &end, 10);  // time on the CPU
    return std::strtoull(end, nullptr, 10);
  }
  int fd_ = -1;
  uint64_t last_ = 0;
};

struct Sampled {
  clockid_t clock{};
  uint64_t last_cpu = 0;
  ThreadCounters counters;
  RunQueueWait wait;
  pid_t tid = 0;
  dctx_node last_node = 0;  // where its last sample went
  bool seen = false;
  bool files = false;  // holds descriptors (counters, schedstat)
};

// Per-thread descriptors (two counters, one schedstat file) count against the program's limit of
// open files: only this many Python threads get them (the main thread and the first helpers,
// where the step runs), never hundreds in a program with a large thread pool.
constexpr int kMaxThreadsWithFiles = 32;

// A Python thread whose tstate is gone: its kernel thread may still be there for a moment, with
// the CPU time it used since its last sample (tick_native reads it once, without the GIL).
struct Departing {
  pid_t tid;
  uint64_t last_cpu;
  dctx_node node;
};

// The kernel's per-thread CPU clock id (CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD), which
// clock_gettime accepts for any thread of this process.
clockid_t thread_clock(pid_t tid) {
  return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
}

// A thread that runs no Python (XLA/OpenMP/intra-op pools, autograd device threads).
struct NativeThread {
  clockid_t clock{};
  uint64_t last_cpu = 0;
  uint32_t frame = 0;
  bool skip = false;  // our own threads
  bool seen = false;
  bool fresh = false;   // found by the last scan
  bool python = false;  // sampled through its tstate: never counted here, even as it exits
};

struct State {
  SamplerOptions opts;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool running = false;
  std::unordered_map<unsigned long, Sampled> threads;
  std::unordered_map<pid_t, NativeThread> native_threads;
  std::vector<pid_t> python_tids;  // kernel ids of the threads sampled through their tstate
  std::vector<Departing> departing;
  pid_t self_tid = 0;
  int scan_countdown = 0;  // ticks until /proc/self/task is read again
  nlink_t task_links = 0;  // link count of /proc/self/task at the last scan: 2 + threads
  bool scanned = false;    // the first scan (threads that were there when sampling started) done
  bool python_ticked = false;  // the first tick over the Python threads done
  std::string process_comm;
  bool counters_ok = true;
  int threads_with_files = 0;
  bool wait_noted = false;  // cpu_wait_source is in the run's metadata
  dctx_metric m_cpu, m_wall, m_samples, m_cycles, m_instr, m_wait;
  uint64_t last_wall = 0;
  // When sampling started (CLOCK_MONOTONIC): the run's elapsed time, which the threads' wall
  // times are parts of, is written as the meta key elapsed_ns on every write of the profile.
  uint64_t start_wall = 0;
  int flush_hook = 0;
  // The thread that started sampling and its CPU clock then: its first tick counts from there.
  unsigned long start_thread = 0;
  uint64_t start_cpu = 0;
};

State *g = nullptr;

uint64_t now_ns(clockid_t c) {
  timespec ts{};
  if (clock_gettime(c, &ts) != 0) return 0;
  return uint64_t(ts.tv_sec) * 1'000'000'000ULL + uint64_t(ts.tv_nsec);
}

// The node a sample of this thread belongs to: the top of its context stack (operator, scope)
// with the Python frames deeper than that entry, or its whole Python stack.
dctx_node sample_node(PyThreadState *ts, bool native) {
  uint32_t frames[512];
  size_t n = capture_python(reinterpret_cast<_ts *>(ts), frames, 512);
  uint64_t top = 0;
  with_thread_context(static_cast<pthread_t>(ts->thread_id),
                      [&](ThreadContext *c) { top = c ? c->top.load() : 0; });
  dctx_node node;
  if (top) {
    top -= 1;
    auto depth = static_cast<uint32_t>(top & 0xFFFFFFFF);
    node = static_cast<dctx_node>(top >> 32);
    if (depth < n) node = extend(node, frames + depth, n - depth);
  } else {
    node = extend(tree().child(0, thread_frame(ts->thread_id)), frames, n);
  }
  if (!native) return node;
#if PY_VERSION_HEX >= 0x030B0000
  pid_t tid = static_cast<pid_t>(ts->native_thread_id);
#else
  pid_t tid = 0;  // 3.10 keeps no kernel id in the tstate: no native frames there
#endif
  uintptr_t pcs[256];
  // A Python thread that computes with the GIL released (np.sort) may never stop: it may be
  // armed where it runs (pool threads of a Python process, e.g. XLA's, never are).
  size_t np = native_unwind_thread(tid, pcs, 256, true);
  // pcs are innermost first. Frames inner to the innermost eval-loop frame were called by the
  // innermost Python frame (numpy's C code under the Python line). Without Python frames, all
  // native frames are kept.
  size_t cut = np;
  for (size_t i = 0; i < np; ++i) {
    if (symbolize(pcs[i]).interpreter) {
      cut = i;
      break;
    }
  }
  // Leading CPython helpers between the eval loop and the extension (PyObject_Call, vectorcall)
  // are interpreter plumbing: drop them.
  size_t end = cut;
  while (end > 0 && symbolize(pcs[end - 1]).python_runtime && n > 0) --end;
  // A thread that yielded the GIL to the sampler is, at sample time, waiting to take it back
  // (take_gil -> pthread_cond_timedwait): that tail is the sampler's doing, not the program's.
  // Drop the innermost C-library frames and the interpreter frames above them, so the leaf is
  // the code that ran (numpy's function re-acquiring the GIL), or the Python line itself.
  size_t begin = 0;
  while (begin < cut && symbolize(pcs[begin]).libc) ++begin;
  if (begin < cut && symbolize(pcs[begin]).python_runtime) {
    while (begin < cut && symbolize(pcs[begin]).python_runtime) ++begin;
  } else {
    begin = 0;  // a libc leaf called by the program (memcpy, qsort) stays
  }
  for (size_t i = end; i-- > begin;) node = append_native(node, pcs[i]);
  return node;
}

// Python threads of the profiler itself (by threading ident); read and written with the GIL held.
std::vector<unsigned long> g_hidden_python_threads;

bool hidden_python_thread(unsigned long id) {
  return std::find(g_hidden_python_threads.begin(), g_hidden_python_threads.end(), id) !=
         g_hidden_python_threads.end();
}

void tick(State &s, uint64_t wall_delta) {
  PyThreadState *self = PyThreadState_Get();
  PyInterpreterState *interp = PyThreadState_GetInterpreter(self);
  s.python_tids.clear();
#if PY_VERSION_HEX >= 0x030B0000
  s.python_tids.push_back(static_cast<pid_t>(self->native_thread_id));
#endif
  for (auto &[id, st] : s.threads) st.seen = false;
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts; ts = PyThreadState_Next(ts)) {
    if (ts == self) continue;
#if PY_VERSION_HEX >= 0x030B0000
    s.python_tids.push_back(static_cast<pid_t>(ts->native_thread_id));
#endif
    if (hidden_python_thread(ts->thread_id)) continue;
    if (s.threads.find(ts->thread_id) == s.threads.end() && profiler_thread(ts->thread_id)) {
      g_hidden_python_threads.push_back(ts->thread_id);  // ours, seen before it hid itself
      continue;
    }
    auto [it, fresh] = s.threads.try_emplace(ts->thread_id);
    Sampled &st = it->second;
    st.seen = true;
    if (fresh) {
      const bool clock_ok =
          pthread_getcpuclockid(static_cast<pthread_t>(ts->thread_id), &st.clock) == 0;
      if (!clock_ok) st.clock = CLOCK_THREAD_CPUTIME_ID;  // unusable; never matches another thread
      // A thread that appeared after the first tick started within the profiled window: all of
      // its CPU time counts, not only what it used after it was first seen.
      st.last_cpu = s.python_ticked && clock_ok ? 0 : now_ns(st.clock);
      // The starting thread's CPU time since sampler_start is in the profiled window: counted.
      const bool starter = ts->thread_id == s.start_thread && s.start_cpu != 0;
      if (starter) st.last_cpu = s.start_cpu;
#if PY_VERSION_HEX >= 0x030B0000
      st.tid = static_cast<pid_t>(ts->native_thread_id);
      if (s.threads_with_files < kMaxThreadsWithFiles) {
        st.files = true;
        ++s.threads_with_files;
        st.wait.open(st.tid);
        // The analyzer reads cpu_wait as a measurement only where the kernel gave it.
        if (st.wait.readable() && !s.wait_noted) {
          s.wait_noted = true;
          tree().set_meta("cpu_wait_source", "schedstat");
        }
        if (s.opts.counters && s.counters_ok) {
          std::string err = st.counters.open(static_cast<pid_t>(ts->native_thread_id));
          if (!err.empty()) {
            s.counters_ok = false;
            tree().note(err);
          }
        }
      }
#endif
      if (wall_delta == 0) continue;
    }
    uint64_t cpu = now_ns(st.clock);
    uint64_t cpu_delta = cpu > st.last_cpu ? cpu - st.last_cpu : 0;
    st.last_cpu = cpu;
    const uint64_t wait_delta = st.wait.delta();
    if (cpu_delta == 0 && wait_delta == 0 && !s.opts.wall) continue;
    dctx_node node = sample_node(ts, s.opts.native && cpu_delta > 0);
    st.last_node = node;
    if (cpu_delta > 0) {
      tree().add(node, s.m_cpu, double(cpu_delta));
      tree().add(node, s.m_samples, 1);
      if (st.counters.fd_cycles >= 0) {
        uint64_t cyc, ins;
        st.counters.read(&cyc, &ins);
        if (cyc) tree().add(node, s.m_cycles, double(cyc));
        if (ins) tree().add(node, s.m_instr, double(ins));
      }
    }
    if (wait_delta > 0) tree().add(node, s.m_wait, double(wait_delta));
    if (s.opts.wall && wall_delta) tree().add(node, s.m_wall, double(wall_delta));
  }
  for (auto it = s.threads.begin(); it != s.threads.end();) {
    if (!it->second.seen) {
      if (it->second.tid != 0 && it->second.last_node != 0)
        s.departing.push_back({it->second.tid, it->second.last_cpu, it->second.last_node});
      it->second.counters.close();
      it->second.wait.close();
      if (it->second.files) --s.threads_with_files;
      native_unwind_forget(it->second.tid);
      it = s.threads.erase(it);
    } else {
      ++it;
    }
  }
  s.python_ticked = true;
}

// Python threads whose tstate went since the last tick: the CPU time they used after their last
// sample goes where that sample went (read once, without the GIL: at the next tick or the stop).
void count_departing(State &s) {
  for (const Departing &d : s.departing) {
    const uint64_t cpu = now_ns(thread_clock(d.tid));  // 0 once the thread has exited
    if (cpu > d.last_cpu) {
      tree().add(d.node, s.m_cpu, double(cpu - d.last_cpu));
      tree().add(d.node, s.m_samples, 1);
    }
  }
  s.departing.clear();
}

std::string read_comm(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/comm", int(tid));
  std::string out;
  if (FILE *f = std::fopen(path, "re")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, f)) out = buf;
    std::fclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// Threads without Python: CPU time by their kernel clock, placed under their own context stack
// (a layer pushed operators there), else under the worker context a layer set around a call that
// fans out to them, else under the root; below a thread frame named by the thread's comm. Runs
// without the GIL. 3.10 keeps no kernel id in the tstate, so this needs 3.11+.
// Looks for threads that appeared (every tenth tick: /proc costs more than reading clocks).
void scan_tasks(State &s) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return;
  for (auto &[tid, t] : s.native_threads) t.seen = false;
  std::vector<pid_t> unnamed;  // found now, with the process's comm
  while (dirent *e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    auto tid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
    if (tid == s.self_tid) continue;
    auto [it, fresh] = s.native_threads.try_emplace(tid);
    NativeThread &t = it->second;
    t.seen = true;
    if (!fresh) continue;
    t.clock = thread_clock(tid);
    // A thread that was there when sampling started is measured from now on. One found later
    // started since the last scan, normally within the last tick (a change in the thread count
    // triggers a scan): its CPU time so far is in the profiled window and goes to its first
    // sample, like any tick's CPU time goes to the context seen at the tick.
    t.last_cpu = s.scanned ? 0 : now_ns(t.clock);
    t.fresh = !s.scanned;
    std::string comm = read_comm(tid);
    t.skip = comm.rfind("dctx-", 0) == 0;
    if (tid == getpid()) {
      comm = "MainThread";
    } else if (comm.empty() || comm == s.process_comm) {
      unnamed.push_back(tid);  // named below by what started it
      comm = "native thread";
    }
    t.frame = tree().frame(DCTX_FRAME_THREAD, comm, "", 0, "");
  }
  closedir(dir);
  if (!unnamed.empty()) {
    const std::vector<std::string> origins = thread_origins(unnamed);
    for (size_t i = 0; i < unnamed.size(); ++i) {
      if (!origins[i].empty())
        s.native_threads[unnamed[i]].frame = tree().frame(DCTX_FRAME_THREAD, origins[i], "", 0, "");
    }
  }
  s.scanned = true;
  for (auto it = s.native_threads.begin(); it != s.native_threads.end();) {
    if (it->second.seen) {
      ++it;
    } else {
      native_unwind_forget(it->first);
      it = s.native_threads.erase(it);
    }
  }
}

// Threads without Python: CPU time by their kernel clock, placed under their own context stack
// (a layer pushed operators there), else under the worker context a layer set around a call that
// fans out to them, else under the root; below a thread frame named by the thread's comm. Runs
// without the GIL. 3.10 keeps no kernel id in the tstate, so this needs 3.11+.
void tick_native(State &s) {
#if PY_VERSION_HEX >= 0x030B0000
  // procfs gives /proc/<pid>/task a link count of 2 + its threads: a stat per tick finds new
  // threads within a tick; the full scan every tenth tick catches one that replaced another.
  struct stat st{};
  const bool count_changed =
      stat("/proc/self/task", &st) == 0 && st.st_nlink != s.task_links && s.scanned;
  if (s.scan_countdown == 0 || count_changed) {
    s.task_links = st.st_nlink;
    scan_tasks(s);
    s.scan_countdown = 10;
  }
  --s.scan_countdown;
  count_departing(s);
  std::sort(s.python_tids.begin(), s.python_tids.end());
  for (auto it = s.native_threads.begin(); it != s.native_threads.end();) {
    const pid_t tid = it->first;
    NativeThread &t = it->second;
    if (t.fresh) {  // its clock was read when found: the next tick measures
      t.fresh = false;
      ++it;
      continue;
    }
    // A Python thread's tstate is gone a moment before the kernel thread: without the mark, its
    // whole CPU time would be counted a second time here, at the root, as it exits.
    if (!t.python && std::binary_search(s.python_tids.begin(), s.python_tids.end(), tid))
      t.python = true;
    if (t.skip || t.python) {
      ++it;
      continue;
    }
    uint64_t cpu = now_ns(t.clock);
    if (cpu == 0) {  // the thread has exited
      native_unwind_forget(tid);
      it = s.native_threads.erase(it);
      continue;
    }
    const bool young = t.last_cpu == 0;  // found after sampling started: counted from its start
    uint64_t delta = cpu > t.last_cpu ? cpu - t.last_cpu : 0;
    t.last_cpu = cpu;
    ++it;
    if (delta == 0) continue;
    uint64_t top = 0;
    with_thread_context_tid(tid, [&](ThreadContext *c) { top = c ? c->top.load() : 0; });
    dctx_node node;
    if (top) {
      node = static_cast<dctx_node>((top - 1) >> 32);
    } else {
      uint64_t w = g_worker_context.load(std::memory_order_acquire);
      // In a Python process, a new pool thread's start-up with no context set anywhere would
      // land at the root, attributed to nothing: leave it out, as before it was found.
      if (young && w == 0 && python_present()) continue;
      node = tree().child(w ? static_cast<dctx_node>(w - 1) : 0, t.frame);
    }
    if (s.opts.native) {
      uintptr_t pcs[256];
      size_t np = native_unwind_thread(tid, pcs, 256, !python_present());
      for (size_t i = np; i-- > 0;) node = append_native(node, pcs[i]);
    }
    tree().add(node, s.m_cpu, double(delta));
    tree().add(node, s.m_samples, 1);
  }
#else
  (void)s;
#endif
}

// dctx_register_tick_hook's table: slots written under g_tick_mu, read by the sampler lock-free.
constexpr int kTickHooks = 8;
struct TickHook {
  std::atomic<dctx_tick_fn> fn{nullptr};
  void *user = nullptr;
};
TickHook g_tick_hooks[kTickHooks];
std::mutex g_tick_mu;

void run_tick_hooks() {
  for (TickHook &h : g_tick_hooks)
    if (dctx_tick_fn fn = h.fn.load(std::memory_order_acquire)) fn(h.user);
}

void loop(State *s) {
  pthread_setname_np(pthread_self(), "dctx-sampler");
  s->self_tid = static_cast<pid_t>(syscall(SYS_gettid));
  s->process_comm = read_comm(static_cast<pid_t>(getpid()));
  auto next = std::chrono::steady_clock::now();
  s->last_wall = now_ns(CLOCK_MONOTONIC);
  std::unique_lock lock(s->mu);
  while (!s->stop) {
    next += std::chrono::nanoseconds(s->opts.interval_ns);
    s->cv.wait_until(lock, next, [&] { return s->stop; });
    if (s->stop) break;
    auto now = std::chrono::steady_clock::now();
    if (now > next + std::chrono::nanoseconds(s->opts.interval_ns * 10)) next = now;
    lock.unlock();
    if (!python_present()) {
      s->python_tids.clear();  // a native executable: every thread is sampled natively
      tick_native(*s);
    } else if (Py_IsInitialized() && !DCTX_PY_FINALIZING()) {
      PyGILState_STATE gs = PyGILState_Ensure();
      uint64_t wall = now_ns(CLOCK_MONOTONIC);
      uint64_t wall_delta = wall - s->last_wall;
      s->last_wall = wall;
      tick(*s, wall_delta);
      run_tick_hooks();
      PyGILState_Release(gs);
      tick_native(*s);
    }
    lock.lock();
  }
}

void record_elapsed(int /*final*/, void * /*user*/) {
  if (g) tree().set_meta("elapsed_ns", std::to_string(now_ns(CLOCK_MONOTONIC) - g->start_wall));
}

}  // namespace

void sampler_start(const SamplerOptions &opts) {
  if (g && g->running) return;
  if (!g) g = new State();
  g->opts = opts;
  g->stop = false;
  g->scanned = false;
  g->scan_countdown = 0;
  g->wait_noted = false;
  g->m_cpu = tree().metric("cpu_time", "ns", "thread CPU time, by sampling");
  g->m_wall = tree().metric("wall_time", "ns", "wall time, by sampling");
  g->m_samples = tree().metric("samples", "count", "CPU samples");
  g->m_cycles = tree().metric("cycles", "cycles", "CPU cycles (perf_event)");
  g->m_instr = tree().metric("instructions", "instructions", "instructions retired (perf_event)");
  g->m_wait = tree().metric("cpu_wait", "ns",
                            "time runnable but waiting for a CPU (run-queue delay), by sampling");
  if (opts.native && !native_unwind_install()) {
    tree().note("native frames not recorded: the unwinding signal is in use by the program");
    g->opts.native = false;
  }
  g->start_thread = static_cast<unsigned long>(pthread_self());
  g->start_cpu = now_ns(CLOCK_THREAD_CPUTIME_ID);
  g->start_wall = now_ns(CLOCK_MONOTONIC);
  g->flush_hook = dctx_register_flush_hook(record_elapsed, nullptr);
  g->running = true;
  g->thread = std::thread(loop, g);
}

void sampler_stop() {
  if (!g || !g->running) return;
  {
    std::lock_guard lock(g->mu);
    g->stop = true;
  }
  g->cv.notify_all();
  // The sampler may be waiting for the GIL that the caller holds: release it while joining.
  bool has_gil = python_present() && Py_IsInitialized() && PyGILState_Check();
  PyThreadState *save = has_gil ? PyEval_SaveThread() : nullptr;
  g->thread.join();
  if (save) PyEval_RestoreThread(save);
  // after the last tick: every thread's wall time is within the elapsed time
  dctx_unregister_flush_hook(g->flush_hook);
  g->flush_hook = 0;
  record_elapsed(1, nullptr);
  // The CPU time a Python thread used since its last sample (up to one interval) goes where that
  // sample went, as for a thread that exits between two ticks: without it a run's totals fall short
  // of the threads' CPU time by an interval per thread.
  for (auto &[id, st] : g->threads) {
    const uint64_t cpu = st.last_node ? now_ns(st.clock) : 0;
    if (cpu > st.last_cpu) tree().add(st.last_node, g->m_cpu, double(cpu - st.last_cpu));
  }
  count_departing(*g);
  for (auto &[id, st] : g->threads) {
    st.counters.close();
    st.wait.close();
  }
  if (g->opts.native) {
    const NativeUnwindStats u = native_unwind_stats();
    char buf[200];
    std::snprintf(
        buf, sizeof buf, "armed %llu, arm raced %llu, arm unsafe %llu, lost %llu, forced %llu",
        static_cast<unsigned long long>(u.armed), static_cast<unsigned long long>(u.arm_raced),
        static_cast<unsigned long long>(u.arm_unsafe), static_cast<unsigned long long>(u.lost),
        static_cast<unsigned long long>(u.forced));
    tree().set_meta("native_unwind", buf);
  }
  g->threads.clear();
  g->threads_with_files = 0;
  g->native_threads.clear();
  g->running = false;
}

void sampler_after_fork() {
  // The sampler thread does not exist in the child and its lock may have been held at the fork:
  // abandon that state (a small leak) rather than touch it.
  g = nullptr;
  native_unwind_after_fork();
  g_hidden_python_threads.clear();  // thread idents of the parent's threads
}

void sampler_hide_current_thread() {
  const unsigned long id = PyThread_get_thread_ident();
  if (!hidden_python_thread(id)) g_hidden_python_threads.push_back(id);
}

}  // namespace dctx

extern "C" int dctx_register_tick_hook(dctx_tick_fn fn, void *user) {
  std::lock_guard lock(dctx::g_tick_mu);
  for (int i = 0; i < dctx::kTickHooks; ++i) {
    dctx::TickHook &h = dctx::g_tick_hooks[i];
    if (!h.fn.load(std::memory_order_relaxed)) {
      h.user = user;
      h.fn.store(fn, std::memory_order_release);
      return i + 1;
    }
  }
  return 0;
}

extern "C" void dctx_unregister_tick_hook(int handle) {
  if (handle < 1 || handle > dctx::kTickHooks) return;
  std::lock_guard lock(dctx::g_tick_mu);
  dctx::g_tick_hooks[handle - 1].fn.store(nullptr, std::memory_order_release);
}
