#include "thread_context.h"

#include <Python.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "context/python_stack.h"
#include "tree/cct.h"

namespace dctx {
namespace {
std::mutex g_registry_mu;
// Never destroyed: thread-local contexts unregister during thread (and process) exit.
struct Registry {
  std::unordered_map<pthread_t, ThreadContext *> by_thread;
  std::unordered_map<pid_t, ThreadContext *> by_tid;
};
Registry &registry() {
  static Registry *r = new Registry();
  return *r;
}
}  // namespace

std::atomic<uint64_t> g_worker_context{0};

bool python_present() {
  static const bool present = dlsym(RTLD_DEFAULT, "Py_IsInitialized") != nullptr;
  return present;
}

ThreadContext::ThreadContext()
    : thread(pthread_self()), tid(static_cast<pid_t>(syscall(SYS_gettid))) {
  stack.reserve(64);
  std::lock_guard lock(g_registry_mu);
  registry().by_thread[thread] = this;
  registry().by_tid[tid] = this;
}

ThreadContext::~ThreadContext() {
  std::lock_guard lock(g_registry_mu);
  auto &r = registry();
  auto it = r.by_thread.find(thread);
  if (it != r.by_thread.end() && it->second == this) r.by_thread.erase(it);
  auto jt = r.by_tid.find(tid);
  if (jt != r.by_tid.end() && jt->second == this) r.by_tid.erase(jt);
}

void with_thread_context_tid(pid_t tid, const std::function<void(ThreadContext *)> &fn) {
  std::lock_guard lock(g_registry_mu);
  auto &r = registry();
  auto it = r.by_tid.find(tid);
  fn(it == r.by_tid.end() ? nullptr : it->second);
}

ThreadContext &this_thread_context() {
  thread_local ThreadContext ctx;
  return ctx;
}

void with_thread_context(pthread_t thread, const std::function<void(ThreadContext *)> &fn) {
  std::lock_guard lock(g_registry_mu);
  auto &r = registry();
  auto it = r.by_thread.find(thread);
  fn(it == r.by_thread.end() ? nullptr : it->second);
}

namespace {
std::mutex g_names_mu;
struct ThreadName {
  uint32_t frame;
  bool named;     // from threading (or the main thread); else "thread <id>", named again later
  uint8_t tries;  // namings tried with the GIL held (a thread threading never lists stops at 8)
  bool final() const { return named || tries >= 8; }  // no later call changes it
};
std::unordered_map<unsigned long, ThreadName> g_thread_frames;
unsigned long g_main_thread = 0;

// threading's name for a thread, or "" (needs the GIL).
std::string threading_name(unsigned long ident) {
  std::string out;
  PyObject *mod = PyDict_GetItemString(PyImport_GetModuleDict(), "threading");
  if (!mod) return out;
  PyObject *active = PyObject_GetAttrString(mod, "_active");
  if (!active) {
    PyErr_Clear();
    return out;
  }
  PyObject *key = PyLong_FromUnsignedLong(ident);
  PyObject *t = PyDict_Check(active) ? PyDict_GetItem(active, key) : nullptr;
  if (t) {
    PyObject *name = PyObject_GetAttrString(t, "name");
    if (name && PyUnicode_Check(name)) {
      const char *c = PyUnicode_AsUTF8(name);
      if (c) out = c;
    }
    Py_XDECREF(name);
  }
  PyErr_Clear();
  Py_DECREF(key);
  Py_DECREF(active);
  return out;
}
}  // namespace

void set_main_thread_id(unsigned long id) { g_main_thread = id; }

bool profiler_thread(unsigned long thread_id) {
  return threading_name(thread_id).rfind("deepcontext-", 0) == 0;
}

uint32_t thread_frame(unsigned long thread_id) {
  // Naming needs the GIL. A thread without it here (an autograd device thread, a thread seen
  // from the sampler) keeps its "thread <id>" frame until a call that holds the GIL names it,
  // so the many calls in between are a lookup, not a string build and a frame interning each.
  // The last answer on this thread, without the lock: operators ask for their own thread's frame.
  struct Last {
    unsigned long id;
    uint32_t frame;
    bool final;  // ThreadName::final
  };
  thread_local Last last{0, 0, false};
  if (last.final && last.id == thread_id) return last.frame;
  const bool can_name = thread_id == g_main_thread || PyGILState_Check();
  {
    std::lock_guard lock(g_names_mu);
    auto it = g_thread_frames.find(thread_id);
    if (it != g_thread_frames.end() && (it->second.final() || !can_name)) {
      last = Last{thread_id, it->second.frame, it->second.final()};
      return it->second.frame;
    }
  }
  std::string name;
  if (thread_id == g_main_thread) {
    name = "MainThread";
  } else if (can_name) {
    name = threading_name(thread_id);
  }
  const bool named = !name.empty();
  if (!named) name = "thread " + std::to_string(thread_id);
  uint32_t f = tree().frame(DCTX_FRAME_THREAD, name, "", 0, "");
  std::lock_guard lock(g_names_mu);
  if (g_thread_frames.size() > 100000) g_thread_frames.clear();
  ThreadName &entry = g_thread_frames[thread_id];
  entry.tries = static_cast<uint8_t>(entry.tries + (can_name ? 1 : 0));
  entry.frame = f;
  entry.named = named;
  last = Last{thread_id, f, entry.final()};
  return f;
}

namespace {
// The last path this thread extended. Consecutive operators of a loop share all their Python
// frames but the innermost few, so the shared prefix is compared here (an integer per frame)
// instead of looked up edge by edge. Nodes are never removed, so a cached node stays valid.
constexpr size_t kMaxPythonFrames = 512;  // as captured (capture_python's limit)
struct LastPath {
  dctx_node base;
  uint32_t n;
  uint32_t frames[kMaxPythonFrames];
  dctx_node nodes[kMaxPythonFrames];
};
thread_local LastPath t_last_path;  // plain data: no guard on access
}  // namespace

dctx_node extend(dctx_node base, const uint32_t *frames, size_t n) {
  LastPath &last = t_last_path;
  size_t same = 0;
  if (last.base == base) {
    const size_t m = n < last.n ? n : last.n;
    while (same < m && last.frames[same] == frames[same]) ++same;
  } else {
    last.base = base;
  }
  dctx_node node = same > 0 ? last.nodes[same - 1] : base;
  for (size_t i = same; i < n; ++i) {
    node = tree().child(node, frames[i]);
    if (i < kMaxPythonFrames) {
      last.frames[i] = frames[i];
      last.nodes[i] = node;
    }
  }
  last.n = static_cast<uint32_t>(n < kMaxPythonFrames ? n : kMaxPythonFrames);
  return node;
}

size_t current_python_frames(uint32_t *frames, size_t max, bool drop_openers) {
  _ts *ts = current_python_thread();
  return ts ? capture_python(ts, frames, max, drop_openers) : 0;
}

dctx_node python_path_node(uint32_t *depth_out, bool drop_openers) {
  *depth_out = 0;
  _ts *ts = current_python_thread();
  if (!ts) return 0;
  uint32_t frames[512];
  size_t n = capture_python(ts, frames, 512, drop_openers);
  *depth_out = static_cast<uint32_t>(n);
  dctx_node base = tree().child(0, thread_frame(reinterpret_cast<PyThreadState *>(ts)->thread_id));
  return extend(base, frames, n);
}

}  // namespace dctx
