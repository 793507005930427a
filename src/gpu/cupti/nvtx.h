/* XLA's NVTX ranges (domain "TSL") as calling context for the kernels launched inside them.
 *
 * XLA's GPU runtime wraps each module run in `XlaModule:#hlo_module=<name>,program_id=<id>#` and
 * each thunk in `Thunk:#name=<op_name>,hlo_op=<instruction>,...#`, both registered strings. With
 * this library as the NVTX injection (NVTX_INJECTION64_PATH, set by deepcontext.jax_support;
 * nvtx_injection.cpp) our handlers are NVTX's push/pop themselves; with CUPTI as the injection
 * (the user's choice) our subscriber's NVTX callbacks see them. Hot paths, no lock and no
 * allocation: a push stores the string handle on a per-thread stack and a pop drops it; a launch
 * inside a thunk takes the launching thread's call path once per open XlaModule range (the thread
 * runs XLA's C++ while the range is open) and finds the thunk's node in a per-thread hash table
 * keyed by (call-site node, handle). Registered strings are parsed once, at registration, into a
 * table read without a lock. Only a table miss looks the thunk up: its HLO op's frame chain
 * (op_name path -> HLO op with the model's source line) comes from the module tables that
 * jax_support registers at compile time, else from the thunk string alone (op_name path -> HLO op,
 * no source line). */
#ifndef DEEPCONTEXT_GPU_CUPTI_NVTX_H
#define DEEPCONTEXT_GPU_CUPTI_NVTX_H

#include <stdint.h>

#include "deepcontext/monitor.h"

namespace dctx::gpu {

/* nvtxEventAttributes_t v2 up to the message (nvToolsExt.h), as both the CUPTI NVTX callback and
 * our own injection receive it. Mirrored so that the layer builds without the nvtx3 headers. */
struct NvtxEventAttributes {
  uint16_t version, size;
  uint32_t category;
  int32_t color_type;
  uint32_t color;
  int32_t payload_type, reserved0;
  uint64_t payload;
  int32_t message_type;  // 1 ascii, 2 unicode, 3 registered
  union {
    const char *ascii;
    const void *registered;
  } message;
};
constexpr int32_t kNvtxMessageRegistered = 3;

/* CUPTI_CBID_NVTX_* ids that nvtx_callback handles. */
extern const uint32_t kNvtxCallbacks[4];

/* A CUPTI NVTX-domain callback (cbid, CUpti_NvtxData*). */
void nvtx_callback(uint32_t cbid, const void *nvtx_data);
/* The node a launch on this thread goes under: context itself unless an XLA thunk range is
 * open here. */
dctx_node nvtx_context(dctx_node context);
/* The node a kernel launched on this thread goes under: its call path (dctx_current, else the
 * worker context), below the XLA thunk range open here; what the tracer calls per launch. */
dctx_node nvtx_launch_context();
/* Forget per-thread stacks of an earlier session (called at tracer start). */
void nvtx_reset();

/* The pieces, for the replay entry points (tests without a GPU). */
void nvtx_register_string(uint64_t domain, uint64_t handle, const char *text);
int nvtx_push(uint64_t domain,
              uint64_t handle);  // the range's level (0: outermost) in XLA's domain
int nvtx_pop(uint64_t domain);   // the level left (-1: nothing was open)
/* The domain handle taken as XLA's ("TSL"), from CUPTI's callback or from our own injection. */
void nvtx_set_xla_domain(uint64_t domain);
void nvtx_count_injection();

}  // namespace dctx::gpu

extern "C" {
/* Frame chains of one compiled module: rows "instruction\tframe,frame,...\n" (dctx frame ids:
 * op_name components, then the HLO op). */
void dctx_cupti_hlo_module(const char *module, int64_t program_id, const char *rows);
/* pushes, registered strings, launches, launches inside a thunk, thunks resolved with source. */
void dctx_cupti_nvtx_stats(uint64_t *out5);
/* The same five, then: thunk table misses (lookups of a thunk's path), TSL pushes whose message
 * was no registered string, pushes in other domains, call paths taken inside an XLA range, NVTX
 * copies initialised with our own injection. Fills min(n, count) values; returns count (10). */
uint32_t dctx_cupti_nvtx_counters(uint64_t *out, uint32_t n);
/* Replay (tests): the same handling as the CUPTI callbacks, fed by the caller. */
void dctx_cupti_nvtx_replay_string(uint64_t domain, uint64_t handle, const char *text);
void dctx_cupti_nvtx_replay_push(uint64_t domain, uint64_t handle);
void dctx_cupti_nvtx_replay_pop(uint64_t domain);
dctx_node dctx_cupti_nvtx_replay_context(dctx_node context);
/* The tracer's per-launch context (nvtx_launch_context), the CUPTI NVTX callback itself, and the
 * domain taken as XLA's (0 before any; tests replay in it when a real one exists). */
dctx_node dctx_cupti_nvtx_replay_launch(void);
void dctx_cupti_nvtx_replay_callback(uint32_t cbid, const void *nvtx_data);
uint64_t dctx_cupti_nvtx_replay_domain(void);
}

#endif
