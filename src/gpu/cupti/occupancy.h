/* Theoretical occupancy of a kernel launch from the device's limits: the share of the SM's warp
 * slots that resident blocks of this launch can fill. Pure function, any thread. */
#ifndef DEEPCONTEXT_GPU_CUPTI_OCCUPANCY_H
#define DEEPCONTEXT_GPU_CUPTI_OCCUPANCY_H

#include <cstdint>

#include "records.h"

namespace dctx::gpu {

struct OccupancyLimits {
  uint32_t blocks_per_sm = 0; /* resident blocks of this launch per SM */
  double occupancy = 0.0;     /* active warps / maximum warps per SM, 0..1 */
};

OccupancyLimits theoretical_occupancy(const dctx_gpu_device &device, uint64_t threads_per_block,
                                      uint32_t registers_per_thread, uint64_t shared_bytes);

}  // namespace dctx::gpu

#endif
