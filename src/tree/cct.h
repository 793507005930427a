// The calling-context tree: interned strings and frames, nodes (parent, frame) with stable ids,
// and metrics accumulated in per-thread shards that are merged only when the profile is written.
#pragma once

#include <sched.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deepcontext/monitor.h"

namespace dctx {

struct FrameKey {
  uint32_t kind, name, file, line, module;
  bool operator==(const FrameKey &) const = default;
};

struct FrameKeyHash {
  size_t operator()(const FrameKey &k) const noexcept {
    uint64_t h = 1469598103934665603ULL;
    for (uint32_t v : {k.kind, k.name, k.file, k.line, k.module}) h = (h ^ v) * 1099511628211ULL;
    return static_cast<size_t>(h);
  }
};

// One accumulator of a metric at a node.
struct Acc {
  double sum = 0, min = 0, max = 0;
  uint64_t count = 0;
  void add(double v) {
    // A producer's NaN or infinity would poison the node's sums and its ancestors', and SQLite
    // stores NaN as NULL, which the format refuses: such a value is left out.
    if (!std::isfinite(v)) return;
    if (count == 0) {
      min = max = v;
    } else {
      if (v < min) min = v;
      if (v > max) max = v;
    }
    sum += v;
    ++count;
  }
  void merge(const Acc &o) {
    if (o.count == 0) return;
    if (count == 0) {
      *this = o;
      return;
    }
    sum += o.sum;
    count += o.count;
    if (o.min < min) min = o.min;
    if (o.max > max) max = o.max;
  }
};

// Step-sampled tracing: values of traced steps that stand for untraced ones (dctx_add_sampled)
// accumulate under their metric id with this bit set, apart from the rest, and are scaled by the
// sample weight when a snapshot is taken. Shard keys hold 16 bits of metric id, so real ids stay
// below the bit (Tree::metric).
constexpr dctx_metric kSampledBit = 0x8000;
inline dctx_metric sampled_metric(dctx_metric m) { return m | kSampledBit; }

struct MetricInfo {
  std::string name, unit, description;
};

// The lock of a shard: taken by its owner thread per update and by the writer while it merges the
// shard (checkpoints, the final write), so it is almost never contended; an atomic flag costs the
// update path less than a mutex. A waiter yields, since the writer may hold it for a while.
class ShardLock {
 public:
  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire)) {
      while (held_.load(std::memory_order_relaxed)) sched_yield();
    }
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

// A thread's private metric accumulators, keyed by (node, metric). Only its owner thread writes;
// the lock is taken by the owner per update (uncontended) and by the writer at flush.
struct Shard {
  ShardLock mu;
  std::unordered_map<uint64_t, Acc> acc;
  // Peak-style metrics (max of a running value) are merged with max, not sum.
  static uint64_t key(dctx_node n, dctx_metric m) { return (uint64_t(n) << 16) | m; }

  // The accumulator of a key, through a small direct-mapped cache of the ones last used: a
  // thread's updates mostly repeat a few (node, metric) pairs (an operator's time and count), and
  // a hit skips the map's hashing and bucket walk. The map's element addresses are stable until
  // clear(), which empties the cache too. Called under mu.
  Acc &at(uint64_t k) {
    Hot &h = hot[((k >> 16) ^ (k << 3) ^ (k >> 22)) & (kHot - 1)];
    if (h.key == k) return *h.acc;
    Acc &a = acc[k];
    h = Hot{k, &a};
    return a;
  }
  void clear() {
    acc.clear();
    hot.fill(Hot{});
  }

 private:
  static constexpr size_t kHot = 64;
  struct Hot {
    uint64_t key = ~uint64_t{0};
    Acc *acc = nullptr;
  };
  std::array<Hot, kHot> hot{};
};

struct Snapshot;

class Tree {
 public:
  Tree();
  uint32_t intern(std::string_view s);
  uint32_t frame(const FrameKey &k);
  uint32_t frame(dctx_frame_kind kind, std::string_view name, std::string_view file, uint32_t line,
                 std::string_view module);
  // 0 (the root) for an unknown parent or frame id, with a note in the profile.
  dctx_node child(dctx_node parent, uint32_t frame);
  // False for a node id the tree has not handed out (and a note in the profile).
  bool known_node(dctx_node n);
  dctx_node parent(dctx_node n);
  uint32_t frame_of(dctx_node n);
  size_t path(dctx_node n, dctx_frame *out, size_t max);
  size_t node_count();

  dctx_metric metric(std::string_view name, std::string_view unit, std::string_view desc);
  // Values of an unknown node or metric id (kSampledBit aside) are left out, with a note.
  void add(dctx_node n, dctx_metric m, double v);
  // Two metrics of one node under one lock (an operator's time and count).
  void add2(dctx_node n, dctx_metric m1, double v1, dctx_metric m2, double v2);
  // A property of an unknown node is left out, with a note.
  void set_prop(dctx_node n, std::string_view key, std::string_view value);
  // The factor applied to sampled values (kSampledBit) at each snapshot.
  void set_sample_weight(double w) { sample_weight_.store(w, std::memory_order_relaxed); }
  // Folds the sampled values added so far into their metrics with this weight (a phase of
  // sampling that ends: what is added afterwards gets the weight set then).
  void commit_sampled(double w);
  void note(std::string_view msg);
  void set_meta(std::string_view key, std::string_view value);

  // A consistent copy of everything the writer needs; shards are merged into it.
  Snapshot snapshot();
  // Forget all metric values (a forked child that writes its own profile starts from zero).
  void clear_metrics();
  // A new session in the same process: metrics, notes and run metadata start from zero; nodes,
  // frames and props stay (layers cache node ids).
  void reset_session();
  // pthread_atfork handlers: hold every lock across fork so the child never sees one held.
  void lock_all();
  void unlock_all();

 private:
  Shard &my_shard();
  bool known(dctx_node n, dctx_metric m) const {
    return n < nodes_.load(std::memory_order_acquire) && (m >> 16) == 0 &&
           (m & ~kSampledBit) < metrics_count_.load(std::memory_order_acquire);
  }
  // Notes (once) that a caller passed an id the tree never handed out.
  void reject(std::string_view what);

  // Distinct for every tree: the per-thread caches (edges, shard) belong to one tree.
  const uint64_t id_;
  std::mutex mu_;  // guards strings, frames, nodes, children, metrics, props, notes, meta
  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, uint32_t> string_ids_;
  std::vector<FrameKey> frames_;
  std::unordered_map<FrameKey, uint32_t, FrameKeyHash> frame_ids_;
  std::vector<dctx_node> parent_;
  std::vector<uint32_t> node_frame_;
  std::unordered_map<uint64_t, dctx_node> children_;
  std::vector<MetricInfo> metrics_;
  std::map<std::pair<dctx_node, std::string>, std::string> props_;
  std::vector<std::string> notes_;
  std::map<std::string, std::string, std::less<>> meta_;
  // parent_.size() and metrics_.size(), read without mu_ by the update path's id check.
  std::atomic<uint32_t> nodes_{0};
  std::atomic<uint32_t> metrics_count_{0};

  std::atomic<double> sample_weight_{1.0};
  std::mutex shards_mu_;
  std::vector<Shard *> shards_;  // never freed: a thread's shard outlives the thread
};

struct Snapshot {
  std::vector<std::string> strings;
  std::vector<FrameKey> frames;
  std::vector<dctx_node> parent;
  std::vector<uint32_t> node_frame;
  std::vector<MetricInfo> metrics;
  std::map<uint64_t, Acc> acc;  // ordered by (node, metric)
  std::map<std::pair<dctx_node, std::string>, std::string> props;
  std::vector<std::string> notes;
  std::map<std::string, std::string, std::less<>> meta;
};

// Merges the sampled accumulators (kSampledBit) of a snapshot into their metrics, scaled by
// weight: sum and count times weight, min and max as measured.
void fold_sampled(std::map<uint64_t, Acc> &acc, double weight);

Tree &tree();

}  // namespace dctx
