// The torch layer's table of live allocations against a reference map: random allocations and
// frees (many colliding in the same probe runs), growth, and frees of unknown addresses.
#include "frameworks/torch/live_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace {

struct Counter {
  int64_t live = 0;
};

TEST(LiveTable, MatchesAReferenceMapUnderRandomAllocationsAndFrees) {
  dctx::LiveTable<Counter> table;
  std::unordered_map<uintptr_t, std::pair<Counter *, int64_t>> ref;
  std::vector<uintptr_t> live;
  Counter counters[4];
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const bool alloc = live.empty() || rng() % 100 < (i < 100000 ? 60 : 40);
    if (alloc) {
      // Addresses 64 bytes apart, as an allocator hands them out: many share low bits.
      const uintptr_t key = 0x7f0000000000ull + (rng() % 50000) * 64;
      if (ref.count(key)) continue;
      Counter *c = &counters[rng() % 4];
      const int64_t size = int64_t(rng() % 4096) + 1;
      table.put(key, c, size);
      ref[key] = {c, size};
      live.push_back(key);
    } else {
      const size_t at = rng() % live.size();
      const uintptr_t key = live[at];
      live[at] = live.back();
      live.pop_back();
      dctx::LiveTable<Counter>::Slot s{};
      ASSERT_TRUE(table.take(key, &s)) << "lost key " << key << " at step " << i;
      EXPECT_EQ(s.key, key);
      EXPECT_EQ(s.mem, ref[key].first);
      EXPECT_EQ(s.size, ref[key].second);
      ref.erase(key);
      EXPECT_FALSE(table.take(key, &s));  // freed twice: not there any more
    }
    ASSERT_EQ(table.size(), ref.size());
  }
  // Everything still live comes back exactly once.
  for (uintptr_t key : live) {
    dctx::LiveTable<Counter>::Slot s{};
    ASSERT_TRUE(table.take(key, &s));
    EXPECT_EQ(s.size, ref[key].second);
  }
  EXPECT_EQ(table.size(), 0u);
}

TEST(LiveTable, UnknownAddressesAreNotFoundAndCapacityFollowsTheLiveCount) {
  dctx::LiveTable<Counter> table;
  Counter c;
  dctx::LiveTable<Counter>::Slot s{};
  EXPECT_FALSE(table.take(0x1000, &s));  // empty table
  // The same 1000 allocations made and freed over many iterations: no growth past the first.
  size_t capacity = 0;
  for (int iter = 0; iter < 50; ++iter) {
    for (uintptr_t k = 1; k <= 1000; ++k) table.put(k * 256, &c, 1);
    EXPECT_FALSE(table.take(0xdead0000, &s));  // allocated before profiling started
    for (uintptr_t k = 1; k <= 1000; ++k) ASSERT_TRUE(table.take(k * 256, &s));
    if (iter == 0) capacity = table.capacity();
    EXPECT_EQ(table.capacity(), capacity);
  }
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
