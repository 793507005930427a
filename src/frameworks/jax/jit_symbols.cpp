// XLA:CPU's JIT-compiled kernels as frames of their HLO op (python/deepcontext/jax_support.py
// reads them from the GDB JIT interface after each compilation and adds them here).
//
// The core's native unwinder names code that no loaded object covers through symbolizers
// registered with dctx_register_symbolizer. For a pc inside a kernel, the symbolizer answers the
// frames `op_name components -> HLO op (model source line)`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "deepcontext/monitor.h"

namespace {

constexpr uint32_t kMaxFrames = 32;
struct Range {
  uintptr_t start, end;
  uint32_t count;
  uint32_t frames[kMaxFrames];
};

std::shared_mutex g_mu;
std::vector<Range> g_ranges;  // sorted by start, disjoint
bool g_registered = false;    // the core names JIT frames through this table

size_t symbolize(uintptr_t pc, uint32_t *frames, size_t max, void *) {
  std::shared_lock lock(g_mu);
  auto it = std::upper_bound(g_ranges.begin(), g_ranges.end(), pc,
                             [](uintptr_t p, const Range &r) { return p < r.start; });
  if (it == g_ranges.begin()) return 0;
  --it;
  if (pc < it->start || pc >= it->end) return 0;
  const size_t n = std::min<size_t>(it->count, max);
  std::copy(it->frames, it->frames + n, frames);
  return n;
}

}  // namespace

extern "C" {

/* Adds [start, end) -> frames (outermost first). Returns 1 when the core names JIT frames through
 * this table, 0 when it could not register (no session, or the core's table is full). */
int dctx_jax_add_jit_range(uint64_t start, uint64_t end, const uint32_t *frames, uint32_t count) {
  // Registered outside g_mu: the unwinder calls symbolize() under its own lock, which
  // dctx_register_symbolizer takes too.
  static std::once_flag once;
  std::call_once(once, [] {
    g_registered = dctx_is_active() && dctx_register_symbolizer(&symbolize, nullptr) > 0;
  });
  std::unique_lock lock(g_mu);
  if (start < end && frames && count) {
    Range r{static_cast<uintptr_t>(start),
            static_cast<uintptr_t>(end),
            std::min(count, kMaxFrames),
            {}};
    std::copy(frames, frames + r.count, r.frames);
    auto pos = std::lower_bound(g_ranges.begin(), g_ranges.end(), r.start,
                                [](const Range &a, uintptr_t s) { return a.start < s; });
    // Code memory is reused after an executable is freed: a new range replaces overlapping ones.
    auto first = pos;
    while (first != g_ranges.begin() && std::prev(first)->end > r.start) --first;
    auto last = pos;
    while (last != g_ranges.end() && last->start < r.end) ++last;
    pos = g_ranges.erase(first, last);
    g_ranges.insert(pos, r);
  }
  return g_registered > 0;
}

/* The frames the table gives for pc (tests); returns their count. */
size_t dctx_jax_lookup(uint64_t pc, uint32_t *frames, size_t max) {
  return symbolize(static_cast<uintptr_t>(pc), frames, max, nullptr);
}

size_t dctx_jax_jit_ranges(void) {
  std::shared_lock lock(g_mu);
  return g_ranges.size();
}

}  // extern "C"
