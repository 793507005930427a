// Live allocations by address for the torch layer's memory attribution: each entry points at the
// counters (T) of the context that allocated it. Open addressing with linear probing and
// backward-shift deletion: an allocation or a free is a probe or two and allocates nothing (a
// node-based map allocated and freed a node per tensor). Doubled at half load; never shrinks, so
// its size follows the most allocations live at once, not the number of iterations.
// Not thread-safe: the adapter holds its memory lock around every call.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dctx {

template <typename T>
class LiveTable {
 public:
  struct Slot {
    uintptr_t key;  // 0: empty (a null pointer is never reported)
    T *mem;
    int64_t size;
  };

  void put(uintptr_t key, T *mem, int64_t size) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    size_t i = index(key);
    while (slots_[i].key != 0 && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == 0) ++used_;
    slots_[i] = Slot{key, mem, size};
  }

  // Removes key into *out; false when it is not there (allocated before we started).
  bool take(uintptr_t key, Slot *out) {
    if (used_ == 0) return false;
    size_t i = index(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return false;
      i = (i + 1) & mask_;
    }
    *out = slots_[i];
    // Backward shift: move later entries of the run into the hole when their home allows it.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const size_t home = index(slots_[j].key);
      // j may fill the hole unless its home lies cyclically in (hole, j].
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].key = 0;
    --used_;
    return true;
  }

  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{0, nullptr, 0});
    used_ = 0;
  }
  size_t size() const { return used_; }
  size_t capacity() const { return slots_.size(); }

 private:
  size_t index(uintptr_t key) const {
    return size_t((uint64_t(key) * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    const size_t n = old.empty() ? 4096 : old.size() * 2;
    slots_.assign(n, Slot{0, nullptr, 0});
    mask_ = n - 1;
    shift_ = 64 - unsigned(std::countr_zero(n));
    used_ = 0;
    for (const Slot &s : old)
      if (s.key != 0) put(s.key, s.mem, s.size);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t used_ = 0;
};

}  // namespace dctx
