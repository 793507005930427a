// Per-thread context stack: the frames pushed by operators, GPU API calls and user scopes on top
// of the Python stack captured at the outermost entry. The sampler reads the top of another
// thread's stack through the registry.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "deepcontext/monitor.h"

namespace dctx {

struct ContextEntry {
  dctx_node node;
  dctx_domain domain;
  uint32_t python_depth;  // visible Python frames when the outermost entry captured the stack
  // Python code runs inside this entry (a scope): entries nested in it extend its path with the
  // Python frames run since, instead of reusing its stale python_depth.
  bool python_inside;
};

struct ThreadContext {
  pthread_t thread;
  pid_t tid;
  std::vector<ContextEntry> stack;
  // (node << 32 | python_depth) of the top entry + 1, or 0 when the stack is empty; read by the
  // sampler thread.
  std::atomic<uint64_t> top{0};
  ThreadContext();
  ~ThreadContext();
};

ThreadContext &this_thread_context();

// Calls fn with the context of the given thread (nullptr if it never pushed a frame) while the
// registry lock keeps it alive.
void with_thread_context(pthread_t thread, const std::function<void(ThreadContext *)> &fn);
// The same, by kernel thread id (threads without Python).
void with_thread_context_tid(pid_t tid, const std::function<void(ThreadContext *)> &fn);

// The worker context (see dctx_set_worker_context): node + 1, or 0.
extern std::atomic<uint64_t> g_worker_context;

// Whether this process has a Python runtime (false when the core is preloaded into a native
// executable): every Python C API call is behind it, so lazy binding never needs libpython.
bool python_present();

// The node of the calling thread's Python stack (thread frame first); root if no Python.
// drop_openers: without the innermost frames of registered scope openers (capture_python).
dctx_node python_path_node(uint32_t *depth_out, bool drop_openers = false);
// The calling thread's visible Python frames, outermost first; returns how many.
size_t current_python_frames(uint32_t *frames, size_t max, bool drop_openers = false);

// Appends frames to a node.
dctx_node extend(dctx_node base, const uint32_t *frames, size_t n);

// The frame id of a thread marker: the threading name of the thread when known (resolved only
// while holding the GIL), else "thread <id>".
uint32_t thread_frame(unsigned long thread_id);
// Whether a Python thread is the profiler's own (threading name "deepcontext-..."); needs the GIL.
bool profiler_thread(unsigned long thread_id);
void set_main_thread_id(unsigned long id);

}  // namespace dctx
