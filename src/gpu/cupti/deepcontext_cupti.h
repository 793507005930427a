/* C entry points of libdeepcontext_cupti.so, called by python/deepcontext/gpu.py through ctypes.
 * start/stop from the thread that starts and stops the session; the replay_* functions drive the
 * buffer processor with recorded records (tests), with the core active and no GPU needed. */
#ifndef DEEPCONTEXT_GPU_CUPTI_H
#define DEEPCONTEXT_GPU_CUPTI_H

#include <stddef.h>
#include <stdint.h>

#include "deepcontext/monitor.h"
#include "records.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DCTX_CUPTI_OK = 0,
  DCTX_CUPTI_NOT_FOUND = 1, /* no libcupti could be loaded */
  DCTX_CUPTI_CONFLICT = 2,  /* another CUPTI subscriber is active */
  DCTX_CUPTI_NO_GPU = 3,    /* CUPTI loaded but refused (no driver or device) */
  DCTX_CUPTI_NO_CORE = 4,   /* the core is not active */
  DCTX_CUPTI_ACTIVE = 5,    /* already started */
};

/* candidates: newline-separated library paths or names, tried in order. record_path: NULL, or a
 * file that receives every callback and record as JSON lines (fixture capture). Returns a
 * DCTX_CUPTI_* code; dctx_cupti_message() says what happened in one line. */
int dctx_cupti_start(const char *candidates, const char *record_path);
/* Waits for the outstanding records, processes them, unsubscribes. Idempotent. */
void dctx_cupti_stop(void);
const char *dctx_cupti_message(void);
/* Step-sampled tracing (deepcontext.step_sampling): 0 turns launch callbacks and activity records
 * off until the next call; 1 traces at weight 1; 2 traces a step that stands for untraced ones.
 * Returns 0, or -1 when not tracing or when --cuda-graphs sample drives the records. */
int dctx_cupti_set_tracing(int mode);
/* The loaded library's path, or "" */
const char *dctx_cupti_library(void);

typedef struct dctx_cupti_replay dctx_cupti_replay;
dctx_cupti_replay *dctx_cupti_replay_open(void);
void dctx_cupti_replay_device(dctx_cupti_replay *r, const dctx_gpu_device *device);
void dctx_cupti_replay_api_enter(dctx_cupti_replay *r, uint64_t thread, const char *cupti_name,
                                 uint32_t correlation, dctx_node context, uint64_t now_ns);
void dctx_cupti_replay_api_exit(dctx_cupti_replay *r, uint64_t thread, uint64_t now_ns, int failed);
void dctx_cupti_replay_graph_node(dctx_cupti_replay *r, uint64_t thread, uint64_t graph_node,
                                  uint64_t original, dctx_node context);
void dctx_cupti_replay_buffer(dctx_cupti_replay *r, const dctx_gpu_activity *records, size_t n,
                              uint64_t dropped);
/* Sampled tracing: a window of records opens (open=1) or closes (open=0) at ts; scale: the
 * nominal weight; open=0 with scale 0: the end of the run (the last window's weight). */
void dctx_cupti_replay_window(dctx_cupti_replay *r, int open, uint64_t ts, double scale);
/* Step-sampled tracing: a span begins (mode 1 or 2) or tracing stops (0), as set_tracing. */
void dctx_cupti_replay_span(dctx_cupti_replay *r, int mode);
/* Finishes (metadata, notes) and frees. */
void dctx_cupti_replay_close(dctx_cupti_replay *r);

#ifdef __cplusplus
}
#endif

#endif
