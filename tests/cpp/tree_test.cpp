// The calling-context tree: interning, stable node ids, and per-thread shards merged at snapshot.
#include <gtest/gtest.h>

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

}  // namespace
