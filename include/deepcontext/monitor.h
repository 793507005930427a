/* DeepContext monitor API: the C interface that framework and GPU layers (and other tools) plug
 * into. Implemented by libdeepcontext.so. Every function is safe to call from any thread; none may
 * be called from a signal handler. See docs/api.md. */
#ifndef DEEPCONTEXT_MONITOR_H
#define DEEPCONTEXT_MONITOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DCTX_API_VERSION 1

/* A node of the calling-context tree. 0 is the root; ids are stable for the process lifetime. */
typedef uint32_t dctx_node;
/* A metric id from dctx_metric_id(). */
typedef uint32_t dctx_metric;

typedef enum dctx_frame_kind {
  DCTX_FRAME_ROOT = 0,
  DCTX_FRAME_PYTHON = 1,
  DCTX_FRAME_SCOPE = 2,
  DCTX_FRAME_OPERATOR = 3,
  DCTX_FRAME_NATIVE = 4,
  DCTX_FRAME_GPU_API = 5,
  DCTX_FRAME_KERNEL = 6,
  DCTX_FRAME_MEMCPY = 7,
  DCTX_FRAME_MEMSET = 8,
  DCTX_FRAME_BACKWARD = 9,
  DCTX_FRAME_MODULE = 10,
  DCTX_FRAME_THREAD = 11,
  DCTX_FRAME_SYNC = 12,
  DCTX_FRAME_HLO_OP = 13,
  DCTX_FRAME_JAX_OP = 14,
  DCTX_FRAME_STEP = 15,
} dctx_frame_kind;

/* A frame as callers describe it; strings are copied (interned) by the callee. */
typedef struct dctx_frame {
  dctx_frame_kind kind;
  const char *name;
  const char *file;   /* may be NULL */
  uint32_t line;      /* 0 = unknown */
  const char *module; /* may be NULL */
} dctx_frame;

/* Domains of enter/exit events. Producers report events with dctx_enter/dctx_exit; observers
 * registered for a domain are called on the producing thread. */
typedef enum dctx_domain {
  DCTX_DOMAIN_OPERATOR = 0, /* framework operators (PyTorch RecordFunction, XLA ops) */
  DCTX_DOMAIN_GPU_API = 1,  /* GPU runtime/driver API calls */
  DCTX_DOMAIN_SCOPE = 2,    /* user scopes */
  DCTX_DOMAIN_SAMPLE = 3,   /* CPU samples (exit is never reported) */
  DCTX_DOMAIN_COUNT = 4,
} dctx_domain;

typedef void (*dctx_event_fn)(dctx_domain domain, dctx_node node, void *user);

/* Lifecycle. dctx_init is idempotent; returns 0 on success. */
int dctx_init(void);
int dctx_is_active(void);
void dctx_finalize(void);

/* Observers: enter is called after the context frame is pushed, exit before it is popped.
 * Either may be NULL. Returns a handle > 0, or 0 when the table (16 per domain) is full. */
int dctx_register_callback(dctx_domain domain, dctx_event_fn enter, dctx_event_fn exit, void *user);
void dctx_unregister_callback(dctx_domain domain, int handle);

/* Producers. dctx_enter pushes a frame onto the calling thread's context stack. When the stack
 * is empty, the thread's Python stack is captured first (once, at this outermost entry) and the
 * frame goes below it. Returns the new context node. Each enter must be matched by an exit on the
 * same thread. */
dctx_node dctx_enter(dctx_domain domain, const dctx_frame *frame);
/* Same, with a frame id from dctx_frame_id() (no string interning on the hot path). */
dctx_node dctx_enter_id(dctx_domain domain, uint32_t frame_id);
/* Same for a framework's own scope opened from Python around Python code (torch's
 * record_function): like a DCTX_DOMAIN_SCOPE entry, the Python code run inside it goes below it,
 * and the innermost frames of the code that opened it on the caller's behalf (files registered
 * with dctx_add_scope_opener) are left out of its path. Observers see it in `domain`. */
dctx_node dctx_enter_scope_id(dctx_domain domain, uint32_t frame_id);
/* Python files (matched as a path suffix, e.g. "torch/autograd/profiler.py") whose frames open
 * scopes for their caller: left out at the innermost end of a dctx_enter_scope_id path. */
void dctx_add_scope_opener(const char *file_suffix);
/* Pushes an already resolved node (e.g. backward work placed under its forward operator's node);
 * the thread's own Python stack is not consulted. */
dctx_node dctx_enter_node(dctx_domain domain, dctx_node node);
void dctx_exit(dctx_domain domain);
/* Moves the calling thread's open top frame to another node (a layer that learns late where the
 * frame belongs: the engine's evaluate_function record, once its backward function is matched to a
 * forward operator). Frames entered afterwards go below the new node. */
void dctx_retarget(dctx_node node);

/* The unified call path of the calling thread: the top of its context stack, or, when the stack is
 * empty, its current Python stack (root if it runs no Python). */
dctx_node dctx_current(void);
/* Work done meanwhile by threads that run no Python and push no context of their own (XLA's and
 * OpenMP's pools, intra-op threads) is attributed under this node, below a thread frame; 0 clears.
 * A layer sets it around a call that fans out to such threads (e.g. a jitted JAX call). */
void dctx_set_worker_context(dctx_node node);
dctx_node dctx_worker_context(void);

/* Depth of the calling thread's context stack (0 = no framework/GPU/scope frame open). */
size_t dctx_stack_depth(void);

/* Tree building.
 * Ids are checked: a node, frame or metric id that this process's tree never handed out is not
 * used, and the profile's notes say once that calls with an unknown id were ignored. dctx_child
 * (and dctx_enter/dctx_enter_id with an unknown frame id) then returns 0, the root; dctx_enter_node
 * pushes the root; dctx_retarget, dctx_set_worker_context, dctx_set_prop and the dctx_add family
 * do nothing; dctx_parent returns 0 and dctx_path 0. */
uint32_t dctx_frame_id(const dctx_frame *frame);
dctx_node dctx_child(dctx_node parent, uint32_t frame_id);
dctx_node dctx_parent(dctx_node node);
/* Writes the path root->node (excluding root) into out; returns its full length. */
size_t dctx_path(dctx_node node, dctx_frame *out, size_t max);

/* Metrics. Values are summed at the node (exclusive); inclusive values are computed on write. */
dctx_metric dctx_metric_id(const char *name, const char *unit, const char *description);
void dctx_add(dctx_node node, dctx_metric metric, double value);
/* dctx_add of two metrics of one node in one call (per-operator time and count). */
void dctx_add2(dctx_node node, dctx_metric m1, double v1, dctx_metric m2, double v2);
/* Step-sampled tracing (docs/design.md): values measured in a traced step that stands for
 * untraced ones. They are kept apart from dctx_add's and scaled at every write by the weight
 * last given to dctx_set_sample_weight (the steps of the sampled phase over those traced). */
void dctx_add_sampled(dctx_node node, dctx_metric metric, double value);
void dctx_add2_sampled(dctx_node node, dctx_metric m1, double v1, dctx_metric m2, double v2);
void dctx_set_sample_weight(double weight);
/* Folds the sampled values added so far into their metrics at this weight (a phase of sampling
 * ends; later ones get the weight set afterwards). */
void dctx_commit_sampled(double weight);
/* A per-node property (e.g. input shapes, kernel grid); the last value wins. */
void dctx_set_prop(dctx_node node, const char *key, const char *value);
/* Called on the writer's thread before every write of the profile (checkpoint or final), so a
 * layer with buffered data (e.g. CUPTI activity buffers) can add it to the tree first. final is 1
 * for the last write. Returns a handle > 0, or 0 when full (16 hooks). */
typedef void (*dctx_flush_fn)(int final, void *user);
int dctx_register_flush_hook(dctx_flush_fn fn, void *user);
void dctx_unregister_flush_hook(int handle);

/* Called on the sampler thread at every tick of a Python process, with the GIL held, before the
 * CPU time of threads without Python is placed: a layer that tracks asynchronous work (JAX's
 * dispatched executions) moves the worker context to the work running now. fn must be quick and
 * must not call dctx_register_tick_hook. Returns a handle > 0, or 0 when the table (8) is full. */
typedef void (*dctx_tick_fn)(void *user);
int dctx_register_tick_hook(dctx_tick_fn fn, void *user);
void dctx_unregister_tick_hook(int handle);

/* Names native code that no loaded object covers (JIT-compiled code such as XLA:CPU's kernels).
 * With native unwinding, fn is asked about such a pc on the sampler thread (never in a signal
 * handler), once per pc (the answer is cached): it writes up to max frame ids, outermost first,
 * that stand for the pc and returns their count, or 0 if the pc is not its code. fn must not call
 * dctx_register_symbolizer. Returns a handle > 0, or 0 when the table (8 entries) is full. */
typedef size_t (*dctx_symbolizer_fn)(uintptr_t pc, uint32_t *frames, size_t max, void *user);
int dctx_register_symbolizer(dctx_symbolizer_fn fn, void *user);

/* Run metadata (the profile's meta table); the last value per key wins. */
void dctx_set_meta(const char *key, const char *value);

/* Add a line to the profile's notes (shown by report); repeated identical notes are kept once. */
void dctx_note(const char *message);

#ifdef __cplusplus
}
#endif

#endif /* DEEPCONTEXT_MONITOR_H */
