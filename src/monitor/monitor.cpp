// The public monitor API (include/deepcontext/monitor.h) and the profiling session: start, the
// periodic checkpoint, and the final write.
#include "deepcontext/monitor.h"

#include <Python.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "collect/sampler.h"
#include "context/python_stack.h"
#include "context/thread_context.h"
#include "monitor/session.h"
#include "store/writer.h"
#include "tree/cct.h"

namespace dctx {
namespace {

struct Callback {
  std::atomic<dctx_event_fn> enter{nullptr}, exit{nullptr};
  std::atomic<void *> user{nullptr};
};
constexpr int kSlots = 16;
std::array<std::array<Callback, kSlots>, DCTX_DOMAIN_COUNT> g_callbacks;
std::atomic<int> g_callback_count[DCTX_DOMAIN_COUNT];
std::mutex g_callbacks_mu;

struct FlushHook {
  dctx_flush_fn fn = nullptr;
  void *user = nullptr;
};
std::mutex g_hooks_mu;
std::array<FlushHook, kSlots> g_hooks;

std::atomic<bool> g_active{false};

struct Session {
  SessionOptions opts;
  std::mutex mu;  // serializes writes
  std::condition_variable cv;
  std::mutex cv_mu;
  bool stop_checkpoint = false;
  std::thread checkpoint;
};
Session *g_session = nullptr;

void notify(dctx_domain d, dctx_node node, bool enter) {
  if (g_callback_count[d].load(std::memory_order_relaxed) == 0) return;
  for (auto &cb : g_callbacks[d]) {
    dctx_event_fn fn = enter ? cb.enter.load() : cb.exit.load();
    if (fn) fn(d, node, cb.user.load());
  }
}

std::string iso_now() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string write_now(bool final) {
  Session *s = g_session;
  if (!s) return "profiling is not active";
  std::lock_guard lock(s->mu);
  {
    std::lock_guard hooks(g_hooks_mu);
    for (auto &h : g_hooks)
      if (h.fn) h.fn(final ? 1 : 0, h.user);
  }
  tree().set_meta("end_time", iso_now());
  tree().set_meta("complete", final ? "1" : "0");
  return write_profile(tree().snapshot(), s->opts.output);
}

void checkpoint_loop(Session *s) {
  pthread_setname_np(pthread_self(), "dctx-checkpoint");
  std::unique_lock lock(s->cv_mu);
  double seconds = std::min(s->opts.first_checkpoint_s, s->opts.checkpoint_s);
  while (!s->stop_checkpoint) {
    auto period = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    seconds = s->opts.checkpoint_s;
    if (s->cv.wait_for(lock, period, [&] { return s->stop_checkpoint; })) break;
    lock.unlock();
    std::string err = write_now(false);
    if (!err.empty()) tree().note("checkpoint failed: " + err);
    lock.lock();
  }
}

}  // namespace

std::string session_start(const SessionOptions &opts) {
  if (g_active.load()) return "profiling is already active";
  static bool first_session = true;
  if (!first_session) tree().reset_session();
  first_session = false;
  g_session = new Session();
  g_session->opts = opts;
  set_main_thread_id(opts.main_thread_id);
  set_hidden_prefix(opts.hidden_prefix);
  tree().set_meta("start_time", iso_now());
  tree().set_meta("pid", std::to_string(getpid()));
  tree().set_meta("sampling_interval_ns", std::to_string(opts.sampler.interval_ns));
  tree().set_meta("complete", "0");
  g_active.store(true);
  if (opts.sample) sampler_start(opts.sampler);
  if (opts.checkpoint_s > 0) g_session->checkpoint = std::thread(checkpoint_loop, g_session);
  return "";
}

std::string session_flush() { return write_now(false); }

std::string session_stop(bool write) {
  if (!g_active.load() || !g_session) return "profiling is not active";
  Session *s = g_session;
  sampler_stop();
  {
    std::lock_guard lock(s->cv_mu);
    s->stop_checkpoint = true;
  }
  s->cv.notify_all();
  if (s->checkpoint.joinable()) {
    bool has_gil = python_present() && Py_IsInitialized() && PyGILState_Check();
    PyThreadState *save = has_gil ? PyEval_SaveThread() : nullptr;
    s->checkpoint.join();
    if (save) PyEval_RestoreThread(save);
  }
  std::string err = write ? write_now(true) : "";
  g_active.store(false);
  return err;
}

std::string session_write_final_to(const std::string &path) {
  if (!g_session || g_active.load()) return "no stopped session to write";
  g_session->opts.output = path;
  return write_now(true);
}

void session_after_fork_child() {
  // Threads of the parent (sampler, checkpoint) do not exist here; their locks may be held.
  sampler_after_fork();
  g_session = nullptr;
  g_active.store(false);
}

const std::string &session_output() {
  static const std::string none;
  return g_session ? g_session->opts.output : none;
}

// Pushes frame_id below the calling thread's current path. python_inside: Python code runs inside
// the entry (a scope), so the frame that opened it goes on, at later lines, in the paths below it;
// drop_openers: the opener's own machinery frames are left out (dctx_add_scope_opener).
static dctx_node push_entry(dctx_domain domain, uint32_t frame_id, bool python_inside,
                            bool drop_openers) {
  ThreadContext &ctx = this_thread_context();
  dctx_node base;
  uint32_t depth;
  if (ctx.stack.empty()) {
    base = python_path_node(&depth, drop_openers);
  } else if (ctx.stack.back().python_inside) {
    // The code inside a scope is Python: extend the scope's node with the frames run since
    // (operators nested in operators skip this walk).
    const ContextEntry &top = ctx.stack.back();
    uint32_t frames[512];
    size_t n = current_python_frames(frames, 512, drop_openers);
    base = top.python_depth < n ? extend(top.node, frames + top.python_depth, n - top.python_depth)
                                : top.node;
    depth = static_cast<uint32_t>(n);
  } else {
    base = ctx.stack.back().node;
    depth = ctx.stack.back().python_depth;
  }
  dctx_node node = tree().child(base, frame_id);
  if (python_inside && depth > 0 && depth != UINT32_MAX) --depth;
  ctx.stack.push_back({node, domain, depth, python_inside});
  ctx.top.store((uint64_t(node) << 32 | depth) + 1, std::memory_order_release);
  notify(domain, node, true);
  return node;
}

}  // namespace dctx

using namespace dctx;

extern "C" {

int dctx_init(void) { return 0; }
int dctx_is_active(void) { return g_active.load() ? 1 : 0; }
void dctx_finalize(void) {
  if (g_active.load()) session_stop();
}

int dctx_register_callback(dctx_domain domain, dctx_event_fn enter, dctx_event_fn exit,
                           void *user) {
  if (domain < 0 || domain >= DCTX_DOMAIN_COUNT) return 0;
  std::lock_guard lock(g_callbacks_mu);
  for (int i = 0; i < kSlots; ++i) {
    Callback &cb = g_callbacks[domain][i];
    if (!cb.enter.load() && !cb.exit.load()) {
      cb.user.store(user);
      cb.enter.store(enter);
      cb.exit.store(exit);
      g_callback_count[domain].fetch_add(1);
      return i + 1;
    }
  }
  return 0;
}

void dctx_unregister_callback(dctx_domain domain, int handle) {
  if (domain < 0 || domain >= DCTX_DOMAIN_COUNT || handle < 1 || handle > kSlots) return;
  std::lock_guard lock(g_callbacks_mu);
  Callback &cb = g_callbacks[domain][handle - 1];
  if (cb.enter.load() || cb.exit.load()) g_callback_count[domain].fetch_sub(1);
  cb.enter.store(nullptr);
  cb.exit.store(nullptr);
}

uint32_t dctx_frame_id(const dctx_frame *f) {
  return tree().frame(f->kind, f->name ? f->name : "", f->file ? f->file : "", f->line,
                      f->module ? f->module : "");
}

dctx_node dctx_enter_id(dctx_domain domain, uint32_t frame_id) {
  return push_entry(domain, frame_id, domain == DCTX_DOMAIN_SCOPE, false);
}

dctx_node dctx_enter_scope_id(dctx_domain domain, uint32_t frame_id) {
  return push_entry(domain, frame_id, true, true);
}

void dctx_add_scope_opener(const char *file_suffix) {
  if (file_suffix && *file_suffix) add_scope_opener(file_suffix);
}

dctx_node dctx_enter(dctx_domain domain, const dctx_frame *frame) {
  return dctx_enter_id(domain, dctx_frame_id(frame));
}

dctx_node dctx_enter_node(dctx_domain domain, dctx_node node) {
  if (!tree().known_node(node)) node = 0;
  ThreadContext &ctx = this_thread_context();
  // Python frames run below this node (e.g. a Python hook in backward) are not appended: its
  // path is the forward's.
  ctx.stack.push_back({node, domain, UINT32_MAX, false});
  ctx.top.store((uint64_t(node) << 32 | UINT32_MAX) + 1, std::memory_order_release);
  notify(domain, node, true);
  return node;
}

void dctx_retarget(dctx_node node) {
  ThreadContext &ctx = this_thread_context();
  if (ctx.stack.empty() || !tree().known_node(node)) return;
  ContextEntry &e = ctx.stack.back();
  e.node = node;
  e.python_depth = UINT32_MAX;  // like dctx_enter_node: the path is the forward's
  ctx.top.store((uint64_t(node) << 32 | UINT32_MAX) + 1, std::memory_order_release);
}

void dctx_exit(dctx_domain domain) {
  ThreadContext &ctx = this_thread_context();
  if (ctx.stack.empty()) return;
  notify(domain, ctx.stack.back().node, false);
  ctx.stack.pop_back();
  if (ctx.stack.empty()) {
    ctx.top.store(0, std::memory_order_release);
  } else {
    const ContextEntry &e = ctx.stack.back();
    ctx.top.store((uint64_t(e.node) << 32 | e.python_depth) + 1, std::memory_order_release);
  }
}

dctx_node dctx_current(void) {
  ThreadContext &ctx = this_thread_context();
  if (!ctx.stack.empty()) {
    const ContextEntry &top = ctx.stack.back();
    if (!top.python_inside) return top.node;
    uint32_t frames[512];
    size_t n = current_python_frames(frames, 512);
    return top.python_depth < n ? extend(top.node, frames + top.python_depth, n - top.python_depth)
                                : top.node;
  }
  uint32_t depth;
  return python_path_node(&depth);
}

void dctx_set_worker_context(dctx_node node) {
  if (!tree().known_node(node)) return;
  g_worker_context.store(node ? uint64_t(node) + 1 : 0, std::memory_order_release);
}

dctx_node dctx_worker_context(void) {
  uint64_t v = g_worker_context.load(std::memory_order_acquire);
  return v ? static_cast<dctx_node>(v - 1) : 0;
}

size_t dctx_stack_depth(void) { return this_thread_context().stack.size(); }

dctx_node dctx_child(dctx_node parent, uint32_t frame_id) { return tree().child(parent, frame_id); }
dctx_node dctx_parent(dctx_node node) { return tree().parent(node); }
size_t dctx_path(dctx_node node, dctx_frame *out, size_t max) {
  return tree().path(node, out, max);
}

dctx_metric dctx_metric_id(const char *name, const char *unit, const char *description) {
  return tree().metric(name ? name : "", unit ? unit : "", description ? description : "");
}
// A caller's metric id: kSampledBit is the core's own mark (dctx_add_sampled), so an id that
// carries it was never handed out; it becomes one the tree rejects.
static dctx_metric caller_metric(dctx_metric m) {
  return (m & dctx::kSampledBit) ? ~dctx_metric{0} : m;
}
void dctx_add(dctx_node node, dctx_metric metric, double value) {
  tree().add(node, caller_metric(metric), value);
}
void dctx_add2(dctx_node node, dctx_metric m1, double v1, dctx_metric m2, double v2) {
  tree().add2(node, caller_metric(m1), v1, caller_metric(m2), v2);
}
void dctx_add_sampled(dctx_node node, dctx_metric metric, double value) {
  tree().add(node, dctx::sampled_metric(caller_metric(metric)), value);
}
void dctx_add2_sampled(dctx_node node, dctx_metric m1, double v1, dctx_metric m2, double v2) {
  tree().add2(node, dctx::sampled_metric(caller_metric(m1)), v1,
              dctx::sampled_metric(caller_metric(m2)), v2);
}
void dctx_set_sample_weight(double weight) { tree().set_sample_weight(weight); }
void dctx_commit_sampled(double weight) { tree().commit_sampled(weight); }
void dctx_set_prop(dctx_node node, const char *key, const char *value) {
  tree().set_prop(node, key ? key : "", value ? value : "");
}
void dctx_set_meta(const char *key, const char *value) {
  tree().set_meta(key ? key : "", value ? value : "");
}
void dctx_note(const char *message) { tree().note(message ? message : ""); }

int dctx_register_flush_hook(dctx_flush_fn fn, void *user) {
  std::lock_guard lock(g_hooks_mu);
  for (int i = 0; i < kSlots; ++i) {
    if (!g_hooks[i].fn) {
      g_hooks[i] = {fn, user};
      return i + 1;
    }
  }
  return 0;
}

void dctx_unregister_flush_hook(int handle) {
  if (handle < 1 || handle > kSlots) return;
  std::lock_guard lock(g_hooks_mu);
  g_hooks[handle - 1] = {};
}

}  // extern "C"
