#include "sampler.h"

#include <Python.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collect/native_unwind.h"
#include "collect/perf_counters.h"
#include "context/python_stack.h"
#include "context/thread_context.h"
#include "tree/cct.h"

#if PY_VERSION_HEX >= 0x030D0000
#define DCTX_PY_FINALIZING() Py_IsFinalizing()
#else
#define DCTX_PY_FINALIZING() _Py_IsFinalizing()
#endif

namespace dctx {
namespace {

struct Sampled {
  clockid_t clock{};
  uint64_t last_cpu = 0;
  ThreadCounters counters;
  bool seen = false;
};

struct State {
  SamplerOptions opts;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool running = false;
  std::unordered_map<unsigned long, Sampled> threads;
  bool counters_ok = true;
  dctx_metric m_cpu, m_wall, m_samples, m_cycles, m_instr;
  uint64_t last_wall = 0;
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
  pid_t tid = 0;
#endif
  uintptr_t pcs[256];
  size_t np = native_unwind_thread(static_cast<pthread_t>(ts->thread_id), tid, pcs, 256);
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
  for (size_t i = end; i-- > 0;) node = tree().child(node, symbolize(pcs[i]).frame_id);
  return node;
}

void tick(State &s, uint64_t wall_delta) {
  PyThreadState *self = PyThreadState_Get();
  PyInterpreterState *interp = PyThreadState_GetInterpreter(self);
  for (auto &[id, st] : s.threads) st.seen = false;
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts; ts = PyThreadState_Next(ts)) {
    if (ts == self) continue;
    auto [it, fresh] = s.threads.try_emplace(ts->thread_id);
    Sampled &st = it->second;
    st.seen = true;
    if (fresh) {
      if (pthread_getcpuclockid(static_cast<pthread_t>(ts->thread_id), &st.clock) != 0) {
        st.clock = CLOCK_THREAD_CPUTIME_ID;  // unusable; never matches another thread
      }
      st.last_cpu = now_ns(st.clock);
#if PY_VERSION_HEX >= 0x030B0000
      if (s.opts.counters && s.counters_ok) {
        std::string err = st.counters.open(static_cast<pid_t>(ts->native_thread_id));
        if (!err.empty()) {
          s.counters_ok = false;
          tree().note(err);
        }
      }
#endif
      if (wall_delta == 0) continue;
    }
    uint64_t cpu = now_ns(st.clock);
    uint64_t cpu_delta = cpu > st.last_cpu ? cpu - st.last_cpu : 0;
    st.last_cpu = cpu;
    if (cpu_delta == 0 && !s.opts.wall) continue;
    dctx_node node = sample_node(ts, s.opts.native && cpu_delta > 0);
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
    if (s.opts.wall && wall_delta) tree().add(node, s.m_wall, double(wall_delta));
  }
  for (auto it = s.threads.begin(); it != s.threads.end();) {
    if (!it->second.seen) {
      it->second.counters.close();
      it = s.threads.erase(it);
    } else {
      ++it;
    }
  }
}

void loop(State *s) {
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
    if (Py_IsInitialized() && !DCTX_PY_FINALIZING()) {
      PyGILState_STATE gs = PyGILState_Ensure();
      uint64_t wall = now_ns(CLOCK_MONOTONIC);
      uint64_t wall_delta = wall - s->last_wall;
      s->last_wall = wall;
      tick(*s, wall_delta);
      PyGILState_Release(gs);
    }
    lock.lock();
  }
}

}  // namespace

void sampler_start(const SamplerOptions &opts) {
  if (g && g->running) return;
  if (!g) g = new State();
  g->opts = opts;
  g->stop = false;
  g->m_cpu = tree().metric("cpu_time", "ns", "thread CPU time, by sampling");
  g->m_wall = tree().metric("wall_time", "ns", "wall time, by sampling");
  g->m_samples = tree().metric("samples", "count", "CPU samples");
  g->m_cycles = tree().metric("cycles", "cycles", "CPU cycles (perf_event)");
  g->m_instr = tree().metric("instructions", "instructions", "instructions retired (perf_event)");
  if (opts.native && !native_unwind_install()) {
    tree().note("native frames not recorded: the unwinding signal is in use by the program");
    g->opts.native = false;
  }
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
  bool has_gil = Py_IsInitialized() && PyGILState_Check();
  PyThreadState *save = has_gil ? PyEval_SaveThread() : nullptr;
  g->thread.join();
  if (save) PyEval_RestoreThread(save);
  for (auto &[id, st] : g->threads) st.counters.close();
  g->threads.clear();
  g->running = false;
}

void sampler_after_fork() {
  // The sampler thread does not exist in the child and its lock may have been held at the fork:
  // abandon that state (a small leak) rather than touch it.
  g = nullptr;
}

}  // namespace dctx
