#include "cct.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace dctx {

Tree &tree() {
  // Leaked on purpose: used by threads and atexit after main. Lock order at fork: the code
  // cache's handler (python_stack.cpp) is registered after this one, so it locks first.
  static Tree *t = [] {
    auto *tr = new Tree();
    pthread_atfork([] { tree().lock_all(); }, [] { tree().unlock_all(); },
                   [] { tree().unlock_all(); });
    return tr;
  }();
  return *t;
}

namespace {
std::atomic<uint64_t> g_next_tree_id{1};
}  // namespace

Tree::Tree() : id_(g_next_tree_id.fetch_add(1)) {
  intern("");
  frames_.push_back({DCTX_FRAME_ROOT, 0, 0, 0, 0});
  frame_ids_.emplace(frames_[0], 0);
  parent_.push_back(0);
  node_frame_.push_back(0);
  nodes_.store(1, std::memory_order_release);
}

void Tree::reject(std::string_view what) {
  note("monitor API: calls with an unknown " + std::string(what) + " id were ignored");
}

uint32_t Tree::intern(std::string_view s) {
  std::lock_guard lock(mu_);
  auto it = string_ids_.find(s);
  if (it != string_ids_.end()) return it->second;
  strings_.emplace_back(s);
  auto id = static_cast<uint32_t>(strings_.size() - 1);
  string_ids_.emplace(strings_.back(), id);
  return id;
}

uint32_t Tree::frame(const FrameKey &k) {
  std::lock_guard lock(mu_);
  auto it = frame_ids_.find(k);
  if (it != frame_ids_.end()) return it->second;
  frames_.push_back(k);
  auto id = static_cast<uint32_t>(frames_.size() - 1);
  frame_ids_.emplace(k, id);
  return id;
}

uint32_t Tree::frame(dctx_frame_kind kind, std::string_view name, std::string_view file,
                     uint32_t line, std::string_view module) {
  FrameKey k{static_cast<uint32_t>(kind), intern(name), intern(file), line, intern(module)};
  return frame(k);
}

namespace {
// Each thread keeps the edges it used in a direct-mapped table, so repeated paths take no lock
// and no hash-map walk (a probe of one slot; a collision just falls back to the shared map).
struct Edge {
  uint64_t key;  // (parent << 32 | frame) + 1; 0: empty
  dctx_node node;
};
constexpr size_t kEdgeSlots = 8192;
}  // namespace

dctx_node Tree::child(dctx_node parent, uint32_t frame) {
  thread_local std::unique_ptr<Edge[]> cache(new Edge[kEdgeSlots]());
  thread_local uint64_t cache_tree = 0;
  if (cache_tree != id_) {  // another tree's edges (tests build several)
    std::fill(cache.get(), cache.get() + kEdgeSlots, Edge{});
    cache_tree = id_;
  }
  const uint64_t key = ((uint64_t(parent) << 32) | frame) + 1;
  uint64_t h = key * 0x9E3779B97F4A7C15ULL;
  Edge &slot = cache[(h >> 40) & (kEdgeSlots - 1)];
  if (slot.key == key) return slot.node;
  dctx_node n;
  {
    std::lock_guard lock(mu_);
    auto it = children_.find(key - 1);
    if (it != children_.end()) {
      n = it->second;
    } else if (parent >= parent_.size() || frame >= frames_.size()) {
      n = 0;  // the writer needs every parent below its child and every frame to exist
    } else {
      n = static_cast<dctx_node>(parent_.size());
      parent_.push_back(parent);
      node_frame_.push_back(frame);
      children_.emplace(key - 1, n);
      nodes_.store(static_cast<uint32_t>(parent_.size()), std::memory_order_release);
    }
  }
  if (n == 0) {
    reject(parent >= nodes_.load(std::memory_order_acquire) ? "node" : "frame");
    return 0;
  }
  slot = Edge{key, n};
  return n;
}

bool Tree::known_node(dctx_node n) {
  if (n < nodes_.load(std::memory_order_acquire)) return true;
  reject("node");
  return false;
}

dctx_node Tree::parent(dctx_node n) {
  std::lock_guard lock(mu_);
  return n < parent_.size() ? parent_[n] : 0;
}

uint32_t Tree::frame_of(dctx_node n) {
  std::lock_guard lock(mu_);
  return n < node_frame_.size() ? node_frame_[n] : 0;
}

size_t Tree::node_count() {
  std::lock_guard lock(mu_);
  return parent_.size();
}

size_t Tree::path(dctx_node n, dctx_frame *out, size_t max) {
  std::lock_guard lock(mu_);
  std::vector<dctx_node> chain;
  // A parent's id is below its child's (child() keeps it so), which also ends any walk.
  while (n != 0 && n < parent_.size()) {
    chain.push_back(n);
    if (parent_[n] >= n) break;
    n = parent_[n];
  }
  size_t len = chain.size();
  for (size_t i = 0; i < len && i < max; ++i) {
    const FrameKey &k = frames_[node_frame_[chain[len - 1 - i]]];
    out[i] = dctx_frame{static_cast<dctx_frame_kind>(k.kind), strings_[k.name].c_str(),
                        strings_[k.file].c_str(), k.line, strings_[k.module].c_str()};
  }
  return len;
}

dctx_metric Tree::metric(std::string_view name, std::string_view unit, std::string_view desc) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < metrics_.size(); ++i)
    if (metrics_[i].name == name) return static_cast<dctx_metric>(i);
  if (metrics_.size() >= kSampledBit - 1) return static_cast<dctx_metric>(kSampledBit - 1);
  metrics_.push_back({std::string(name), std::string(unit), std::string(desc)});
  metrics_count_.store(static_cast<uint32_t>(metrics_.size()), std::memory_order_release);
  return static_cast<dctx_metric>(metrics_.size() - 1);
}

Shard &Tree::my_shard() {
  // One shard per thread and tree: the profiler has one tree, tests build several. A tree that
  // falls out of this small table gets a fresh shard when it comes back (its values stay merged).
  struct Mine {
    uint64_t tree;
    Shard *shard;
  };
  thread_local std::array<Mine, 4> mine{};
  thread_local size_t next = 0;
  for (const Mine &e : mine)
    if (e.tree == id_) return *e.shard;
  auto *shard = new Shard();
  {
    std::lock_guard lock(shards_mu_);
    shards_.push_back(shard);
  }
  mine[next++ % mine.size()] = Mine{id_, shard};
  return *shard;
}

void Tree::add(dctx_node n, dctx_metric m, double v) {
  if (!known(n, m)) return reject(n < nodes_.load() ? "metric" : "node");
  Shard &s = my_shard();
  std::lock_guard lock(s.mu);
  s.at(Shard::key(n, m)).add(v);
}

void Tree::add2(dctx_node n, dctx_metric m1, double v1, dctx_metric m2, double v2) {
  if (!known(n, m1) || !known(n, m2)) return reject(n < nodes_.load() ? "metric" : "node");
  Shard &s = my_shard();
  std::lock_guard lock(s.mu);
  s.at(Shard::key(n, m1)).add(v1);
  s.at(Shard::key(n, m2)).add(v2);
}

void Tree::set_prop(dctx_node n, std::string_view key, std::string_view value) {
  if (!known_node(n)) return;
  std::lock_guard lock(mu_);
  auto &slot = props_[{n, std::string(key)}];
  if (slot != value) slot.assign(value);
}

void Tree::note(std::string_view msg) {
  std::lock_guard lock(mu_);
  for (auto &n : notes_)
    if (n == msg) return;
  notes_.emplace_back(msg);
}

void Tree::set_meta(std::string_view key, std::string_view value) {
  std::lock_guard lock(mu_);
  meta_[std::string(key)] = std::string(value);
}

void fold_sampled(std::map<uint64_t, Acc> &acc, double weight) {
  std::vector<std::pair<uint64_t, Acc>> sampled;
  for (auto it = acc.begin(); it != acc.end();) {
    if ((it->first & kSampledBit) != 0) {
      sampled.emplace_back(it->first & ~uint64_t{kSampledBit}, it->second);
      it = acc.erase(it);
    } else {
      ++it;
    }
  }
  for (auto &[key, a] : sampled) {
    if (a.count == 0) continue;  // emptied by commit_sampled
    // A mean (sum / count) and the extremes stay those measured; sum and count stand for more.
    // Whole units (ns, bytes, calls) stay whole: exporters and readers sum integers exactly.
    const bool whole = a.sum == std::floor(a.sum);
    a.sum *= weight;
    if (whole) a.sum = std::round(a.sum);
    a.count = static_cast<uint64_t>(std::llround(static_cast<double>(a.count) * weight));
    if (a.count == 0) a.count = 1;
    acc[key].merge(a);
  }
}

void Tree::commit_sampled(double w) {
  std::lock_guard lock(shards_mu_);
  for (Shard *sh : shards_) {
    std::lock_guard l(sh->mu);
    std::map<uint64_t, Acc> sampled;
    for (auto &[k, a] : sh->acc)
      if ((k & kSampledBit) != 0 && a.count != 0) {
        sampled[k] = a;
        a = Acc{};  // stays in the map: the shard's cache may point at it
      }
    if (sampled.empty()) continue;
    fold_sampled(sampled, w);
    for (auto &[k, a] : sampled) sh->at(k).merge(a);
  }
}

Snapshot Tree::snapshot() {
  Snapshot s;
  {
    std::lock_guard lock(mu_);
    s.strings.assign(strings_.begin(), strings_.end());
    s.frames = frames_;
    s.parent = parent_;
    s.node_frame = node_frame_;
    s.metrics = metrics_;
    s.props = props_;
    s.notes = notes_;
    s.meta = meta_;
  }
  std::vector<Shard *> shards;
  {
    std::lock_guard lock(shards_mu_);
    shards = shards_;
  }
  for (Shard *sh : shards) {
    std::lock_guard lock(sh->mu);
    for (auto &[k, a] : sh->acc) s.acc[k].merge(a);
  }
  fold_sampled(s.acc, sample_weight_.load(std::memory_order_relaxed));
  return s;
}

void Tree::clear_metrics() {
  std::lock_guard lock(shards_mu_);
  for (Shard *sh : shards_) {
    std::lock_guard l(sh->mu);
    sh->clear();
  }
}

void Tree::reset_session() {
  clear_metrics();
  sample_weight_.store(1.0, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  notes_.clear();
  meta_.clear();
}

void Tree::lock_all() {
  mu_.lock();
  shards_mu_.lock();
  for (Shard *sh : shards_) sh->mu.lock();
}

void Tree::unlock_all() {
  for (Shard *sh : shards_) sh->mu.unlock();
  shards_mu_.unlock();
  mu_.unlock();
}

}  // namespace dctx
