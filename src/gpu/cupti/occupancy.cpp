#include "occupancy.h"

#include <algorithm>

namespace dctx::gpu {
namespace {

constexpr uint64_t kRegisterAllocationUnit = 256;  // registers, per warp
constexpr uint64_t kSharedAllocationUnit = 128;    // bytes, per block
constexpr uint64_t kWarpSchedulers = 4;            // register file partitions per SM (sm_70+)
constexpr uint32_t kMaxRegistersPerThread = 255;

uint64_t round_up(uint64_t value, uint64_t unit) { return (value + unit - 1) / unit * unit; }

}  // namespace

OccupancyLimits theoretical_occupancy(const dctx_gpu_device &device, uint64_t threads_per_block,
                                      uint32_t registers_per_thread, uint64_t shared_bytes) {
  const uint64_t warp = device.warp_size ? device.warp_size : 32;
  const uint64_t max_warps = device.max_threads_per_sm / warp;
  const uint64_t warps_per_block = (threads_per_block + warp - 1) / warp;
  if (max_warps == 0 || warps_per_block == 0 || warps_per_block > max_warps ||
      registers_per_thread > kMaxRegistersPerThread)
    return {};

  uint64_t blocks = std::min<uint64_t>(max_warps / warps_per_block, device.max_blocks_per_sm);
  if (registers_per_thread > 0) {
    // Registers are allocated per warp, and each scheduler partition holds whole warps.
    const uint64_t per_warp =
        round_up(uint64_t{registers_per_thread} * warp, kRegisterAllocationUnit);
    const uint64_t per_partition = device.regs_per_sm / kWarpSchedulers;
    const uint64_t warps_by_registers = per_partition / per_warp * kWarpSchedulers;
    blocks = std::min(blocks, warps_by_registers / warps_per_block);
  }
  const uint64_t shared_per_block =
      round_up(shared_bytes + device.reserved_smem_per_block, kSharedAllocationUnit);
  if (shared_per_block > 0)
    blocks = std::min<uint64_t>(blocks, device.smem_per_sm / shared_per_block);

  OccupancyLimits limits;
  limits.blocks_per_sm = static_cast<uint32_t>(blocks);
  limits.occupancy = static_cast<double>(blocks * warps_per_block) / static_cast<double>(max_warps);
  return limits;
}

}  // namespace dctx::gpu
