// The bounded timeline (include/deepcontext/timeline.h, docs/format.md "Timeline").
//
// Each thread that records gets one ring of fixed-size Event records, claimed from a fixed pool at
// its first event and mapped once (anonymous memory: pages become resident only as the ring
// fills, and never more than its capacity). A record is written in place and published by
// bumping the ring's head; the writer copies a ring while its owner goes on writing and keeps only
// the records that cannot have been overwritten meanwhile (a seqlock-style check on the head).
// Step boundaries are kept in a ring of N + 2 times. Nothing here allocates or locks on the
// recording path; memory does not grow with the number of steps.
#include "timeline/timeline.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "deepcontext/timeline.h"

extern "C" {
dctx_timeline_state_t dctx_timeline_state = {0, 0};
}

namespace dctx::timeline {
namespace {

constexpr uint32_t kDefaultEvents = 1u << 17;  // 4 MiB per thread at most
constexpr uint32_t kMaxEvents = 1u << 24;
constexpr uint32_t kMaxSteps = 1u << 20;
constexpr size_t kMaxRings = 1024;
constexpr uint32_t kScopeDepth = 64;

struct OpenScope {
  dctx_node node;
  uint32_t step;
  int64_t start_ns;
};

struct Ring {
  std::atomic<uint64_t> head{0};  // records written since the ring was claimed
  uint32_t capacity = 0;          // power of two
  uint32_t generation = 0;
  uint32_t tid = 0;
  char name[16] = {};
  Event *events = nullptr;
  // User scopes open on the owner thread (enter/exit observers).
  uint32_t scope_depth = 0;
  OpenScope scopes[kScopeDepth];
};

std::mutex g_config_mu;  // configure() only
std::atomic<uint32_t> g_generation{1};
std::atomic<uint32_t> g_capacity{kDefaultEvents};
std::atomic<uint32_t> g_steps{0};
std::atomic<Ring *> g_rings[kMaxRings];
std::atomic<uint32_t> g_claimed{0};
std::atomic<uint64_t> g_dropped{0};
// Start time of step k at g_bounds[k % g_nbounds] (step 0: configure time).
std::atomic<std::atomic<int64_t> *> g_bounds{nullptr};
std::atomic<uint32_t> g_nbounds{0};
int g_scope_handle = 0;
bool g_atfork = false;

thread_local Ring *t_ring = nullptr;
thread_local uint32_t t_generation = 0;

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Event *map_events(uint32_t capacity) {
  void *p = mmap(nullptr, size_t(capacity) * sizeof(Event), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<Event *>(p);
}

// The calling thread's ring for this configuration, claimed at its first event. Slots of the pool
// are reused by later configurations (a ring with the wrong capacity is replaced; the old mapping
// is left alone since its former owner may still be inside a record).
Ring *my_ring() {
  const uint32_t gen = g_generation.load(std::memory_order_acquire);
  if (t_ring != nullptr && t_generation == gen) return t_ring;
  t_ring = nullptr;
  t_generation = gen;
  const uint32_t slot = g_claimed.fetch_add(1, std::memory_order_acq_rel);
  if (slot >= kMaxRings) return nullptr;
  const uint32_t capacity = g_capacity.load(std::memory_order_relaxed);
  Ring *r = g_rings[slot].load(std::memory_order_acquire);
  if (r == nullptr || r->capacity != capacity) {
    Event *events = map_events(capacity);
    if (events == nullptr) return nullptr;
    r = new Ring();
    r->capacity = capacity;
    r->events = events;
  }
  r->head.store(0, std::memory_order_relaxed);
  r->scope_depth = 0;
  r->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  std::memset(r->name, 0, sizeof r->name);
  pthread_getname_np(pthread_self(), r->name, sizeof r->name);
  r->generation = gen;
  g_rings[slot].store(r, std::memory_order_release);
  t_ring = r;
  return r;
}

inline void put(const Event &e) {
  Ring *r = my_ring();
  if (r == nullptr) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t h = r->head.load(std::memory_order_relaxed);
  r->events[h & (r->capacity - 1)] = e;
  r->head.store(h + 1, std::memory_order_release);
}

void on_scope_enter(dctx_domain, dctx_node node, void *) {
  Ring *r = my_ring();
  if (r == nullptr) return;
  if (r->scope_depth < kScopeDepth)
    r->scopes[r->scope_depth] = {node, dctx_timeline_step(), now_ns()};
  ++r->scope_depth;
}

void on_scope_exit(dctx_domain, dctx_node, void *) {
  Ring *r = my_ring();
  if (r == nullptr || r->scope_depth == 0) return;
  const uint32_t d = --r->scope_depth;
  if (d >= kScopeDepth || !dctx_timeline_on()) return;
  const OpenScope &s = r->scopes[d];
  put(Event{s.start_ns, now_ns(), s.node, s.step, r->tid, DCTX_FRAME_SCOPE, 0});
}

void after_fork_child() {
  // The parent's other threads are gone; the child records nothing until a session configures the
  // timeline again (a DataLoader worker that profiles does).
  __atomic_store_n(&dctx_timeline_state.active, 0, __ATOMIC_RELAXED);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  g_claimed.store(0, std::memory_order_release);
  t_ring = nullptr;
}

}  // namespace

Window collect(size_t node_count) {
  Window w;
  const uint32_t n = g_steps.load(std::memory_order_acquire);
  w.enabled = n > 0;
  if (!w.enabled) return w;
  w.steps_requested = n;
  w.events_per_thread = g_capacity.load(std::memory_order_relaxed);
  const uint32_t gen = g_generation.load(std::memory_order_acquire);
  const uint32_t cur = dctx_timeline_step();
  w.current_step = cur;
  // Complete steps [lo, hi); with no step boundary yet, the running step 0 (all the rings hold).
  uint32_t lo = cur > n ? cur - n : 0, hi = cur;
  if (cur == 0) {
    hi = 1;
    w.notes.push_back(
        "timeline: no step boundary was marked (deepcontext.step(), dctx_step() or a torch "
        "optimizer.step()); the timeline holds the last events the rings kept");
  }
  const uint32_t nb = g_nbounds.load(std::memory_order_acquire);
  std::atomic<int64_t> *bounds = g_bounds.load(std::memory_order_acquire);
  const int64_t now = now_ns();
  for (uint32_t s = lo; s < hi; ++s) {
    const int64_t start = bounds[s % nb].load(std::memory_order_acquire);
    const int64_t end = s + 1 <= cur ? bounds[(s + 1) % nb].load(std::memory_order_acquire) : now;
    w.steps.push_back(Step{s, start, end});
  }

  std::vector<Event> copy;
  const uint32_t claimed = std::min<uint32_t>(g_claimed.load(std::memory_order_acquire), kMaxRings);
  uint32_t first_complete = lo;  // steps below this lost events to a full ring somewhere
  for (uint32_t i = 0; i < claimed; ++i) {
    Ring *r = g_rings[i].load(std::memory_order_acquire);
    if (r == nullptr || r->generation != gen) continue;
    ++w.threads;
    w.thread_names.emplace_back(r->tid, std::string(r->name, strnlen(r->name, sizeof r->name)));
    const uint64_t cap = r->capacity;
    const uint64_t h1 = r->head.load(std::memory_order_acquire);
    const uint64_t count = std::min(h1, cap);
    copy.resize(count);
    const uint64_t begin = h1 - count;
    for (uint64_t k = 0; k < count; ++k) copy[k] = r->events[(begin + k) & (cap - 1)];
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t h2 = r->head.load(std::memory_order_acquire);
    // A slot j is rewritten by record j + cap, which may be in progress once head reaches j + cap.
    const uint64_t safe = h2 >= cap ? h2 - cap + 1 : 0;
    w.recorded += h2;
    if (h2 > cap) w.overwritten += h2 - cap;
    bool wrapped = h1 > cap;
    uint32_t oldest_step = UINT32_MAX;
    for (uint64_t k = 0; k < count; ++k) {
      if (begin + k < safe) {
        wrapped = true;
        continue;
      }
      const Event &e = copy[k];
      if (oldest_step == UINT32_MAX) oldest_step = e.step;
      if (e.step < lo || e.step >= hi || e.node >= node_count) continue;
      w.events.push_back(e);
    }
    // Records are in completion order, so the oldest one kept tells from which step on this ring
    // still has everything.
    if (wrapped && oldest_step != UINT32_MAX && oldest_step + 1 > first_complete)
      first_complete = std::min(oldest_step + 1, hi);
  }
  w.dropped = g_dropped.load(std::memory_order_relaxed);
  w.incomplete_steps = first_complete - lo;
  if (w.incomplete_steps > 0 && cur > 0) {
    w.notes.push_back("timeline: a thread's ring (" + std::to_string(w.events_per_thread) +
                      " events) filled up within the last " + std::to_string(hi - lo) +
                      " steps; steps " + std::to_string(lo) + ".." +
                      std::to_string(first_complete - 1) +
                      " miss their oldest events (raise --timeline-events)");
  }
  if (w.dropped > 0) {
    w.notes.push_back("timeline: " + std::to_string(w.dropped) +
                      " events of threads beyond the first 1024 were not recorded");
  }
  std::sort(w.events.begin(), w.events.end(), [](const Event &a, const Event &b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  return w;
}

}  // namespace dctx::timeline

using namespace dctx::timeline;

extern "C" {

int dctx_timeline_configure(uint32_t steps, uint32_t events_per_thread) {
  if (steps > kMaxSteps || events_per_thread > kMaxEvents) return -1;
  std::lock_guard lock(g_config_mu);
  if (!g_atfork) {
    pthread_atfork(nullptr, nullptr, after_fork_child);
    g_atfork = true;
  }
  __atomic_store_n(&dctx_timeline_state.active, 0, __ATOMIC_RELAXED);
  uint32_t cap = events_per_thread ? events_per_thread : kDefaultEvents;
  if (cap < 64) cap = 64;
  cap = uint32_t(1) << (32 - __builtin_clz(cap - 1));
  g_capacity.store(cap, std::memory_order_relaxed);
  // Bounds: N + 2 slots cover the N + 1 boundaries of the window plus one being written.
  const uint32_t nb = steps + 2;
  if (g_nbounds.load() < nb) {
    // Grows only (an older array may still be read by a writer): at most once per larger N.
    g_nbounds.store(0, std::memory_order_release);
    g_bounds.store(new std::atomic<int64_t>[nb], std::memory_order_release);
    g_nbounds.store(nb, std::memory_order_release);
  }
  std::atomic<int64_t> *bounds = g_bounds.load();
  for (uint32_t i = 0; i < g_nbounds.load(); ++i) bounds[i].store(0, std::memory_order_relaxed);
  bounds[0].store(now_ns(), std::memory_order_release);
  __atomic_store_n(&dctx_timeline_state.step, 0, __ATOMIC_RELAXED);
  g_dropped.store(0);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  g_claimed.store(0, std::memory_order_release);
  g_steps.store(steps, std::memory_order_release);
  if (steps > 0 && g_scope_handle == 0)
    g_scope_handle =
        dctx_register_callback(DCTX_DOMAIN_SCOPE, on_scope_enter, on_scope_exit, nullptr);
  if (steps == 0 && g_scope_handle != 0) {
    dctx_unregister_callback(DCTX_DOMAIN_SCOPE, g_scope_handle);
    g_scope_handle = 0;
  }
  __atomic_store_n(&dctx_timeline_state.active, steps > 0 ? 1 : 0, __ATOMIC_RELEASE);
  return 0;
}

uint32_t dctx_step(void) {
  const uint32_t s = __atomic_add_fetch(&dctx_timeline_state.step, 1, __ATOMIC_ACQ_REL);
  const uint32_t nb = g_nbounds.load(std::memory_order_acquire);
  std::atomic<int64_t> *bounds = g_bounds.load(std::memory_order_acquire);
  if (nb != 0 && bounds != nullptr) bounds[s % nb].store(now_ns(), std::memory_order_release);
  return s;
}

int64_t dctx_timeline_now(void) { return now_ns(); }

void dctx_timeline_record(dctx_frame_kind kind, dctx_node node, int64_t start_ns, int64_t end_ns,
                          uint32_t step) {
  if (!dctx_timeline_on()) return;
  Ring *r = my_ring();
  put(Event{start_ns, end_ns, node, step, r ? r->tid : 0, static_cast<uint16_t>(kind), 0});
}

void dctx_timeline_record_gpu(dctx_frame_kind kind, dctx_node node, int64_t start_ns,
                              int64_t end_ns, uint32_t step, uint32_t device, uint32_t stream) {
  if (!dctx_timeline_on()) return;
  put(Event{start_ns, end_ns, node, step, stream, static_cast<uint16_t>(kind),
            static_cast<uint16_t>(device + 1)});
}

void dctx_timeline_stats(uint64_t *recorded, uint64_t *overwritten, uint64_t *dropped,
                         uint32_t *threads) {
  uint64_t rec = 0, over = 0;
  uint32_t th = 0;
  const uint32_t gen = g_generation.load(std::memory_order_acquire);
  const uint32_t claimed = std::min<uint32_t>(g_claimed.load(std::memory_order_acquire), kMaxRings);
  for (uint32_t i = 0; i < claimed; ++i) {
    Ring *r = g_rings[i].load(std::memory_order_acquire);
    if (r == nullptr || r->generation != gen) continue;
    const uint64_t h = r->head.load(std::memory_order_acquire);
    rec += h;
    if (h > r->capacity) over += h - r->capacity;
    ++th;
  }
  if (recorded) *recorded = rec;
  if (overwritten) *overwritten = over;
  if (dropped) *dropped = g_dropped.load(std::memory_order_relaxed);
  if (threads) *threads = th;
}

}  // extern "C"
