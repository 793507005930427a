/* DeepContext bounded timeline: the events of the last N steps (operators, user scopes, GPU API
 * calls, GPU kernels, copies, memsets) kept in fixed-size per-thread ring buffers beside the
 * calling-context tree, and written into the profile's `timeline` table (docs/format.md).
 * Implemented by libdeepcontext.so; see docs/api.md.
 *
 * Hot path: check dctx_timeline_on() (one load of an exported word, one predictable branch) and
 * only then call dctx_timeline_record*. Recording allocates nothing and takes no lock: the calling
 * thread's ring (claimed, and mapped once, at its first event) gets one 32-byte record. */
#ifndef DEEPCONTEXT_TIMELINE_H
#define DEEPCONTEXT_TIMELINE_H

#include <stdint.h>

#include "deepcontext/monitor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DCTX_TIMELINE_API_VERSION 1

/* Read through the inline functions below. active: nonzero while the timeline records. step: the
 * number of the running step (0 before the first dctx_step()). */
typedef struct dctx_timeline_state_t {
  uint32_t active;
  uint32_t step;
} dctx_timeline_state_t;
extern dctx_timeline_state_t dctx_timeline_state;

static inline int dctx_timeline_on(void) {
  return __atomic_load_n(&dctx_timeline_state.active, __ATOMIC_RELAXED) != 0;
}
static inline uint32_t dctx_timeline_step(void) {
  return __atomic_load_n(&dctx_timeline_state.step, __ATOMIC_RELAXED);
}

/* Keep the events of the last `steps` complete steps (0 turns the timeline off), in rings of
 * `events_per_thread` records (0: the default, 131072; rounded up to a power of two). Resets the
 * rings and the step counter. Called by the Python package at session start. Returns 0, or -1 on
 * bad arguments. */
int dctx_timeline_configure(uint32_t steps, uint32_t events_per_thread);

/* Marks the end of the running step (and the start of the next one); returns the new step's
 * number. Cheap (one atomic add and a clock read); safe from any thread. */
uint32_t dctx_step(void);

/* CLOCK_MONOTONIC in ns: the clock of every timeline time. */
int64_t dctx_timeline_now(void);

/* A CPU event of the calling thread: kind is the frame kind of node (DCTX_FRAME_OPERATOR,
 * DCTX_FRAME_SCOPE, ...), step the step it started in (dctx_timeline_step() at its start). */
void dctx_timeline_record(dctx_frame_kind kind, dctx_node node, int64_t start_ns, int64_t end_ns,
                          uint32_t step);
/* A GPU event (DCTX_FRAME_KERNEL, DCTX_FRAME_MEMCPY, DCTX_FRAME_MEMSET) on device/stream, with
 * times already on CLOCK_MONOTONIC; step: the step its launch was made in. Recorded in the calling
 * thread's ring (the activity-buffer thread's). */
void dctx_timeline_record_gpu(dctx_frame_kind kind, dctx_node node, int64_t start_ns,
                              int64_t end_ns, uint32_t step, uint32_t device, uint32_t stream);

/* Counters: events recorded, events overwritten in full rings, events dropped (no ring left:
 * more than 1024 threads), threads with a ring. Any pointer may be NULL. */
void dctx_timeline_stats(uint64_t *recorded, uint64_t *overwritten, uint64_t *dropped,
                         uint32_t *threads);

#ifdef __cplusplus
}
#endif

#endif /* DEEPCONTEXT_TIMELINE_H */
