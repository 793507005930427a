// CPU microbenchmark of the CUPTI layer's NVTX path (src/gpu/cupti/nvtx.cpp): the code that
// runs for each XLA range push/pop and for each kernel launch inside a thunk range on the GPU.
//
// Built by bench/jax_nvtx/run.py as a shared library that the benchmark process preloads
// (LD_PRELOAD): it interposes malloc/calloc/realloc and pthread mutex/rwlock locking to count
// allocations and locks taken on the timing thread inside the timed loops. It reaches the layer
// through libdeepcontext_cupti.so's replay entry points (the functions the CUPTI callbacks call);
// with a layer that has them, through dctx_cupti_nvtx_replay_callback (the CUPTI NVTX callback
// itself, fed CUpti_NvtxData-shaped blocks) and dctx_cupti_nvtx_replay_launch (the tracer's
// launch-side context function).
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <string>
#include <vector>

extern "C" {
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
}

namespace {
thread_local bool t_counting = false;
thread_local uint64_t t_allocs = 0, t_locks = 0;

using LockFn = int (*)(void *);
LockFn real(const char *name) { return reinterpret_cast<LockFn>(dlsym(RTLD_NEXT, name)); }
}  // namespace

extern "C" {
void *malloc(size_t n) {
  if (t_counting) ++t_allocs;
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  if (t_counting) ++t_allocs;
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  if (t_counting) ++t_allocs;
  return __libc_realloc(p, n);
}
int pthread_mutex_lock(pthread_mutex_t *m) {
  static LockFn fn = real("pthread_mutex_lock");
  if (t_counting) ++t_locks;
  return fn(m);
}
int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
  static LockFn fn = real("pthread_rwlock_rdlock");
  if (t_counting) ++t_locks;
  return fn(l);
}
int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
  static LockFn fn = real("pthread_rwlock_wrlock");
  if (t_counting) ++t_locks;
  return fn(l);
}
}

namespace {

// CUpti_NvtxData and the nvtx parameter blocks (same layout as in nvtx.cpp).
struct EventAttributes {
  uint16_t version, size;
  uint32_t category;
  int32_t color_type;
  uint32_t color;
  int32_t payload_type, reserved0;
  uint64_t payload;
  int32_t message_type;
  const void *message;
};
struct PushExParams {
  const void *domain;
  const EventAttributes *attributes;
};
struct PopParams {
  const void *domain;
};
struct NvtxData {
  const char *function_name;
  const void *params;
  const void *return_value;
};
constexpr uint32_t kPushEx = 33, kPop = 34;

struct Layer {
  void (*string)(uint64_t, uint64_t, const char *);
  void (*push)(uint64_t, uint64_t);
  void (*pop)(uint64_t);
  uint32_t (*context)(uint32_t);
  void (*callback)(uint32_t, const void *);  // optional (newer layer)
  uint32_t (*launch)();                      // optional (newer layer)
  uint64_t (*domain)();                      // optional (newer layer)
  uint32_t (*current)();                     // core: dctx_current
};

uint64_t now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

struct Result {
  double ns;
  double allocs, locks;
};

template <class F>
Result timed(uint64_t ops, F &&body) {
  body();  // warm-up (fills caches)
  t_allocs = t_locks = 0;
  t_counting = true;
  const uint64_t t0 = now();
  body();
  const uint64_t t1 = now();
  t_counting = false;
  return {double(t1 - t0) / double(ops), double(t_allocs) / double(ops),
          double(t_locks) / double(ops)};
}

}  // namespace

extern "C" {

/* Runs the benchmark against the layer at `layer_path`, whose strings the caller registered:
 * string i has handle hbase + hstride * i, string 1 the XlaModule range, 2..thunks+1 the thunks
 * (TSL domain `domain`).
 * out[3*k + {0,1,2}] = ns, allocations, locks per op for the cases:
 *   0 push+pop of a registered TSL thunk string (the CUPTI callback when the layer has it)
 *   1 push+pop in another domain
 *   2 launch inside a thunk, launch-side context only, fixed call-site node (cache hit)
 *   3 launch inside a thunk, what the tracer does per launch (call path + thunk lookup)
 *   4 dctx_current() alone on this thread (the Python call path)
 *   5 one simulated step: module range, `thunks` thunk ranges with one launch each, and
 *     `extra` more push/pop pairs; ns per step
 * Returns 1 when cases 0 and 3 ran through the callback/launch entry points, 0 otherwise. */
int nvtx_bench(const char *layer_path, uint64_t domain, uint64_t hbase, uint64_t hstride,
               int thunks, int extra, int iters, double *out) {
  auto H = [&](uint64_t i) { return hbase + hstride * i; };
  void *lib = dlopen(layer_path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = dlopen(layer_path, RTLD_NOW);
  if (!lib) return -1;
  Layer L{};
  L.string = reinterpret_cast<decltype(L.string)>(dlsym(lib, "dctx_cupti_nvtx_replay_string"));
  L.push = reinterpret_cast<decltype(L.push)>(dlsym(lib, "dctx_cupti_nvtx_replay_push"));
  L.pop = reinterpret_cast<decltype(L.pop)>(dlsym(lib, "dctx_cupti_nvtx_replay_pop"));
  L.context = reinterpret_cast<decltype(L.context)>(dlsym(lib, "dctx_cupti_nvtx_replay_context"));
  L.callback =
      reinterpret_cast<decltype(L.callback)>(dlsym(lib, "dctx_cupti_nvtx_replay_callback"));
  L.launch = reinterpret_cast<decltype(L.launch)>(dlsym(lib, "dctx_cupti_nvtx_replay_launch"));
  L.domain = reinterpret_cast<decltype(L.domain)>(dlsym(lib, "dctx_cupti_nvtx_replay_domain"));
  L.current = reinterpret_cast<decltype(L.current)>(dlsym(lib, "dctx_current"));
  if (!L.push || !L.pop || !L.context || !L.current) return -2;
  const bool full = L.callback && L.launch;

  // The callback's argument blocks, prepared once (XLA's nvtxDomainRangePushEx passes these).
  const void *dom = reinterpret_cast<const void *>(domain);
  const void *other = reinterpret_cast<const void *>(domain + 0x100);
  std::vector<EventAttributes> attrs(size_t(thunks) + 2);
  std::vector<PushExParams> pushes(attrs.size()), other_pushes(attrs.size());
  std::vector<NvtxData> push_data(attrs.size()), other_data(attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) {
    attrs[i] = EventAttributes{};
    attrs[i].version = 3;
    attrs[i].size = sizeof(EventAttributes);
    attrs[i].message_type = 3;                                // registered string
    attrs[i].message = reinterpret_cast<const void *>(H(i));  // handle of string i
    pushes[i] = PushExParams{dom, &attrs[i]};
    other_pushes[i] = PushExParams{other, &attrs[i]};
    push_data[i] = NvtxData{"nvtxDomainRangePushEx", &pushes[i], nullptr};
    other_data[i] = NvtxData{"nvtxDomainRangePushEx", &other_pushes[i], nullptr};
  }
  PopParams pop_params{dom}, other_pop{other};
  NvtxData pop_data{"nvtxDomainRangePop", &pop_params, nullptr};
  NvtxData other_pop_data{"nvtxDomainRangePop", &other_pop, nullptr};

  auto push = [&](size_t h) {
    if (full)
      L.callback(kPushEx, &push_data[h]);
    else
      L.push(domain, H(h));
  };
  auto pop = [&]() {
    if (full)
      L.callback(kPop, &pop_data);
    else
      L.pop(domain);
  };
  auto launch = [&]() -> uint32_t {
    if (full) return L.launch();
    return L.context(L.current());
  };
  volatile uint32_t sink = 0;
  const uint64_t n = uint64_t(iters);

  Result r[6];
  // 0: push+pop of thunk strings, nested in the module range.
  push(1);
  r[0] = timed(n, [&] {
    for (uint64_t i = 0; i < n; ++i) {
      push(2 + i % uint64_t(thunks));
      pop();
    }
  });
  // 1: another domain.
  r[1] = timed(n, [&] {
    for (uint64_t i = 0; i < n; ++i) {
      if (full) {
        L.callback(kPushEx, &other_data[2]);
        L.callback(kPop, &other_pop_data);
      } else {
        L.push(domain + 0x100, H(2));
        L.pop(domain + 0x100);
      }
    }
  });
  // 2: the thunk lookup alone, one call-site node, cycling through the thunks (as a step does).
  const uint32_t site = L.current();
  r[2] = timed(n, [&] {
    for (uint64_t i = 0; i < n; ++i) {
      L.push(domain, H(2 + i % uint64_t(thunks)));
      sink = sink + L.context(site);
      L.pop(domain);
    }
  });
  // 3: per launch as the tracer does it (minus the push/pop of case 0, timed apart).
  uint64_t push_pop_ns = 0;
  {
    const uint64_t t0 = now();
    for (uint64_t i = 0; i < n; ++i) {
      L.push(domain, H(2 + i % uint64_t(thunks)));
      L.pop(domain);
    }
    push_pop_ns = now() - t0;
  }
  r[3] = timed(n, [&] {
    for (uint64_t i = 0; i < n; ++i) {
      L.push(domain, H(2 + i % uint64_t(thunks)));
      sink = sink + launch();
      L.pop(domain);
    }
  });
  r[3].ns -= double(push_pop_ns) / double(n);
  r[2].ns -= double(push_pop_ns) / double(n);
  pop();  // the module range
  // 4: the call path alone.
  r[4] = timed(n, [&] {
    for (uint64_t i = 0; i < n; ++i) sink = sink + L.current();
  });
  // 5: steps.
  const uint64_t steps = n / uint64_t(thunks + extra) + 1;
  r[5] = timed(steps, [&] {
    for (uint64_t s = 0; s < steps; ++s) {
      push(1);
      for (int k = 0; k < thunks; ++k) {
        push(2 + size_t(k));
        sink = sink + launch();
        pop();
      }
      for (int k = 0; k < extra; ++k) {
        push(2 + size_t(k % thunks));
        pop();
      }
      pop();
    }
  });
  for (int k = 0; k < 6; ++k) {
    out[3 * k] = r[k].ns;
    out[3 * k + 1] = r[k].allocs;
    out[3 * k + 2] = r[k].locks;
  }
  (void)sink;
  return full ? 1 : 0;
}

}  // extern "C"
