// The calling-context tree: interning, stable node ids, and per-thread shards merged at snapshot.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "tree/cct.h"

namespace {

TEST(Tree, InternsStringsAndFrames) {
  dctx::Tree t;
  EXPECT_EQ(t.intern(""), 0u);
  uint32_t a = t.intern("train.py");
  EXPECT_EQ(t.intern("train.py"), a);
  uint32_t f1 = t.frame(DCTX_FRAME_PYTHON, "step", "train.py", 10, "");
  uint32_t f2 = t.frame(DCTX_FRAME_PYTHON, "step", "train.py", 11, "");
  EXPECT_NE(f1, f2);
  EXPECT_EQ(t.frame(DCTX_FRAME_PYTHON, "step", "train.py", 10, ""), f1);
}

TEST(Tree, ChildrenAreStableAndPathsResolve) {
  dctx::Tree t;
  uint32_t f = t.frame(DCTX_FRAME_OPERATOR, "aten::addmm", "", 0, "");
  uint32_t g = t.frame(DCTX_FRAME_KERNEL, "gemm", "", 0, "");
  dctx_node a = t.child(0, f);
  dctx_node b = t.child(a, g);
  EXPECT_EQ(t.child(0, f), a);
  EXPECT_EQ(t.parent(b), a);
  dctx_frame path[4];
  ASSERT_EQ(t.path(b, path, 4), 2u);
  EXPECT_STREQ(path[0].name, "aten::addmm");
  EXPECT_STREQ(path[1].name, "gemm");
  EXPECT_EQ(path[1].kind, DCTX_FRAME_KERNEL);
}

TEST(Tree, ShardsFromManyThreadsMergeExactly) {
  dctx::Tree t;
  dctx_metric m = t.metric("cpu_time", "ns", "");
  dctx_node n = t.child(0, t.frame(DCTX_FRAME_SCOPE, "work", "", 0, ""));
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 10000; ++k) t.add(n, m, double(i + 1));
    });
  }
  for (auto &th : threads) th.join();
  dctx::Snapshot s = t.snapshot();
  const dctx::Acc &acc = s.acc.at(dctx::Shard::key(n, m));
  EXPECT_EQ(acc.count, 80000u);
  EXPECT_DOUBLE_EQ(acc.sum, 10000.0 * (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8));
  EXPECT_DOUBLE_EQ(acc.min, 1.0);
  EXPECT_DOUBLE_EQ(acc.max, 8.0);
}

TEST(Tree, SampledValuesAreScaledByTheWeightAtEachSnapshot) {
  dctx::Tree t;
  dctx_metric m = t.metric("gpu_time", "ns", "");
  dctx_node n = t.child(0, t.frame(DCTX_FRAME_KERNEL, "gemm", "", 0, ""));
  t.add(n, m, 10.0);  // a warm-up step, traced at weight 1
  t.add(n, dctx::sampled_metric(m), 4.0);
  t.add(n, dctx::sampled_metric(m), 6.0);
  t.set_sample_weight(2.5);
  dctx::Snapshot s = t.snapshot();
  EXPECT_EQ(s.acc.count(dctx::Shard::key(n, dctx::sampled_metric(m))), 0u);
  const dctx::Acc &acc = s.acc.at(dctx::Shard::key(n, m));
  EXPECT_DOUBLE_EQ(acc.sum, 10.0 + 2.5 * 10.0);
  EXPECT_EQ(acc.count, 1u + 5u);
  EXPECT_DOUBLE_EQ(acc.min, 4.0);
  EXPECT_DOUBLE_EQ(acc.max, 10.0);
  t.set_sample_weight(4.0);  // a later checkpoint: more steps stand behind the same traced ones
  EXPECT_DOUBLE_EQ(t.snapshot().acc.at(dctx::Shard::key(n, m)).sum, 10.0 + 4.0 * 10.0);
}

TEST(Tree, CommittedSampledValuesKeepTheirWeight) {
  dctx::Tree t;
  dctx_metric m = t.metric("op_count", "count", "");
  dctx_node n = t.child(0, t.frame(DCTX_FRAME_OPERATOR, "aten::mm", "", 0, ""));
  t.add(n, dctx::sampled_metric(m), 1.0);  // a time window of a run that had no steps yet
  t.commit_sampled(10.0);
  t.add(n, dctx::sampled_metric(m), 1.0);  // a sampled step afterwards
  t.set_sample_weight(3.0);
  EXPECT_DOUBLE_EQ(t.snapshot().acc.at(dctx::Shard::key(n, m)).sum, 10.0 + 3.0);
  EXPECT_DOUBLE_EQ(t.snapshot().acc.at(dctx::Shard::key(n, m)).sum, 13.0);  // snapshots repeat
}

TEST(Tree, ClearMetricsKeepsTheTree) {
  dctx::Tree t;
  dctx_metric m = t.metric("samples", "count", "");
  dctx_node n = t.child(0, t.frame(DCTX_FRAME_SCOPE, "x", "", 0, ""));
  t.add(n, m, 1);
  t.clear_metrics();
  dctx::Snapshot s = t.snapshot();
  EXPECT_TRUE(s.acc.empty());
  EXPECT_EQ(s.parent.size(), 2u);
}

TEST(Tree, UpdatesAfterClearGoToNewAccumulators) {
  // A thread's shard caches where its recent accumulators are; after clear_metrics (a forked
  // child starting its own profile) that cache must not point into the emptied map.
  dctx::Tree t;
  dctx_metric a = t.metric("op_time", "ns", "");
  dctx_metric b = t.metric("op_count", "count", "");
  std::vector<dctx_node> nodes;
  for (int i = 0; i < 200; ++i)
    nodes.push_back(t.child(0, t.frame(DCTX_FRAME_OPERATOR, "op" + std::to_string(i), "", 0, "")));
  for (int round = 0; round < 3; ++round)
    for (dctx_node n : nodes) t.add2(n, a, 2.0, b, 1.0);
  t.clear_metrics();
  for (dctx_node n : nodes) t.add2(n, a, 5.0, b, 1.0);
  t.add(nodes[7], a, 1.0);
  dctx::Snapshot s = t.snapshot();
  ASSERT_EQ(s.acc.size(), 2 * nodes.size());
  for (dctx_node n : nodes) {
    EXPECT_DOUBLE_EQ(s.acc.at(dctx::Shard::key(n, a)).sum, n == nodes[7] ? 6.0 : 5.0);
    EXPECT_EQ(s.acc.at(dctx::Shard::key(n, b)).count, 1u);
  }
}

TEST(Tree, UnknownIdsAreIgnoredWithOneNote) {
  // A node id past the tree's end would give a node whose parent id exceeds its own (the writer
  // sums children into parents by id order); a metric id past 16 bits would alias another node.
  dctx::Tree t;
  uint32_t f = t.frame(DCTX_FRAME_SCOPE, "s", "", 0, "");
  std::vector<dctx_metric> metrics;
  for (int i = 0; i < 4; ++i) metrics.push_back(t.metric("m" + std::to_string(i), "count", ""));
  std::vector<dctx_node> nodes{0};
  for (int i = 1; i <= 5; ++i) nodes.push_back(t.child(nodes.back(), f));
  ASSERT_EQ(nodes[5], 5u);
  EXPECT_EQ(t.child(1000000, f), 0u);
  EXPECT_EQ(t.child(nodes[5], 1000000), 0u);
  EXPECT_EQ(t.child(1000000, f), 0u);  // the thread's edge cache holds no rejected edge
  EXPECT_EQ(t.node_count(), 6u);
  t.add(4, 65545, 1.0);  // (4 << 16 | 65545) is the key of node 5, metric 9
  t.add(4, 65539, 1.0);  // ... node 5, metric 3
  t.add(4, dctx::sampled_metric(65539), 1.0);
  t.add(1000000, metrics[0], 1.0);
  t.add2(4, metrics[0], 1.0, 70000, 1.0);
  t.set_prop(1000000, "k", "v");
  EXPECT_FALSE(t.known_node(6));
  EXPECT_TRUE(t.known_node(5));
  t.add(4, metrics[3], 2.0);
  dctx::Snapshot s = t.snapshot();
  ASSERT_EQ(s.acc.size(), 1u);
  EXPECT_DOUBLE_EQ(s.acc.at(dctx::Shard::key(4, metrics[3])).sum, 2.0);
  EXPECT_TRUE(s.props.empty());
  for (size_t i = 1; i < s.parent.size(); ++i) EXPECT_LT(s.parent[i], i);
  EXPECT_EQ(s.notes, (std::vector<std::string>{
                         "monitor API: calls with an unknown node id were ignored",
                         "monitor API: calls with an unknown frame id were ignored",
                         "monitor API: calls with an unknown metric id were ignored"}));
  dctx_frame path[8];
  EXPECT_EQ(t.path(1000000, path, 8), 0u);
}

TEST(Tree, TreesInOneThreadKeepTheirOwnEdgesAndValues) {
  // The per-thread caches (edges, shard) must not carry one tree's ids or values into another:
  // the C++ tests build many trees in one process.
  dctx_metric m;
  dctx_node n;
  {
    dctx::Tree first;
    m = first.metric("samples", "count", "");
    n = first.child(0, first.frame(DCTX_FRAME_SCOPE, "x", "", 0, ""));
    first.add(n, m, 1.0);
  }
  dctx::Tree a, b;
  uint32_t fb = b.frame(DCTX_FRAME_SCOPE, "other", "", 0, "");
  ASSERT_EQ(b.child(0, fb), 1u);
  uint32_t fa = a.frame(DCTX_FRAME_SCOPE, "y", "", 0, "");
  uint32_t fa2 = a.frame(DCTX_FRAME_SCOPE, "z", "", 0, "");
  ASSERT_EQ(fa2, 2u);
  ASSERT_EQ(fb, 1u);
  dctx_node y = a.child(0, fa2);
  dctx_node z = b.child(0, 2);  // b has no frame 2: not a's cached edge
  EXPECT_EQ(z, 0u);
  EXPECT_EQ(a.child(0, fa), 2u);
  EXPECT_EQ(y, 1u);
  dctx_metric ma = a.metric("samples", "count", "");
  a.add(y, ma, 3.0);
  dctx_metric mb = b.metric("samples", "count", "");
  b.add(1, mb, 5.0);
  EXPECT_DOUBLE_EQ(a.snapshot().acc.at(dctx::Shard::key(y, ma)).sum, 3.0);
  EXPECT_DOUBLE_EQ(b.snapshot().acc.at(dctx::Shard::key(1, mb)).sum, 5.0);
}

TEST(Tree, CApiIgnoresUnknownIdsAndTheCoresSampledBit) {
  dctx_frame fr{DCTX_FRAME_SCOPE, "c-api-ids", nullptr, 0, nullptr};
  uint32_t f = dctx_frame_id(&fr);
  dctx_metric m = dctx_metric_id("c_api_ids", "count", "");
  dctx_node n = dctx_child(0, f);
  ASSERT_NE(n, 0u);
  EXPECT_EQ(dctx_child(1000000, f), 0u);
  EXPECT_EQ(dctx_parent(1000000), 0u);
  dctx_add(n, m | dctx::kSampledBit, 1.0);  // not a sampled value of m: an unknown id
  dctx_add_sampled(n, m + 65536, 1.0);
  dctx_add2(n, m, 2.0, 70000, 3.0);
  dctx_add(n, m, 4.0);
  dctx::Snapshot s = dctx::tree().snapshot();
  EXPECT_DOUBLE_EQ(s.acc.at(dctx::Shard::key(n, m)).sum, 4.0);
  for (auto &[key, acc] : s.acc) EXPECT_LT(key >> 16, s.parent.size());
  EXPECT_NE(std::find(s.notes.begin(), s.notes.end(),
                      "monitor API: calls with an unknown metric id were ignored"),
            s.notes.end());
}

}  // namespace
