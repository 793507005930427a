/* Plain GPU activity types shared by the CUPTI tracer, the buffer processor and the replay entry
 * points. No CUPTI header here: the processor is built and tested on machines without a GPU. */
#ifndef DEEPCONTEXT_GPU_CUPTI_RECORDS_H
#define DEEPCONTEXT_GPU_CUPTI_RECORDS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dctx_gpu_activity_kind {
  DCTX_GPU_KERNEL = 1,
  DCTX_GPU_MEMCPY = 2,
  DCTX_GPU_MEMSET = 3,
  /* A whole graph launch (CUPTI graph-level tracing): graph_id, correlation, start, end, device,
   * stream; its kernels have no records of their own. */
  DCTX_GPU_GRAPH = 4,
} dctx_gpu_activity_kind;

/* One decoded activity record (a CUPTI kernel, memcpy, memset or graph-trace record). Times are
 * CUPTI timestamps in ns. Fields that do not apply to the kind are 0. */
typedef struct dctx_gpu_activity {
  uint32_t kind; /* dctx_gpu_activity_kind */
  uint32_t correlation;
  uint64_t start;
  uint64_t end;
  uint32_t device;
  uint32_t context;
  uint32_t stream;
  uint32_t graph_id;
  uint64_t graph_node;
  uint64_t bytes;
  /* memcpy: CUpti_ActivityMemcpyKind, source/destination CUpti_ActivityMemoryKind */
  uint32_t copy_kind;
  uint32_t src_kind;
  uint32_t dst_kind;
  /* kernel */
  int32_t grid[3];
  int32_t block[3];
  uint32_t registers;
  int32_t static_smem;
  int32_t dynamic_smem;
  const char *name; /* mangled kernel name; valid for the duration of the call */
} dctx_gpu_activity;

/* What the occupancy computation and the profile metadata need of a device. */
typedef struct dctx_gpu_device {
  uint32_t ordinal;
  char name[128];
  uint32_t cc_major, cc_minor;
  uint32_t sm_count;
  uint32_t max_threads_per_sm;
  uint32_t max_blocks_per_sm;
  uint32_t regs_per_sm;
  uint32_t smem_per_sm;
  uint32_t reserved_smem_per_block;
  uint32_t warp_size;
  uint32_t clock_khz;
  uint32_t mem_clock_khz;
  uint64_t total_mem;
} dctx_gpu_device;

/* What an intercepted API call does, decided once per callback id at start. */
typedef enum dctx_gpu_api_kind {
  DCTX_GPU_API_OTHER = 0,
  DCTX_GPU_API_LAUNCH = 1,
  DCTX_GPU_API_GRAPH_LAUNCH = 2,
  DCTX_GPU_API_MEMCPY = 3,
  DCTX_GPU_API_MEMSET = 4,
  DCTX_GPU_API_SYNC = 5,
} dctx_gpu_api_kind;

#ifdef __cplusplus
}
#endif

#endif
