// The analyzer's C++ core on a small profile (written with SQLite, docs/format.md): the loader, the
// query layer's per-node context, grouping, and a built-in rule ranked by the engine.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "analyzer/engine.h"
#include "store/writer.h"

namespace {

using namespace dctx::analyzer;

struct Small {
  std::string path;
  int loop = 1, module = 2, index = 3, bwd = 4, put = 5, lib = 7;
};

void exec(sqlite3 *db, const std::string &sql) {
  char *err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
}

// A profile as docs/format.md defines it, written with SQLite directly:
// train.py:10 (loop) -> [module] model -> aten::index (fwd 10) -> [backward] -> index_put_ (90);
// train.py:12 -> torch/nn/functional.py:5 (library) -> aten::relu (50)
Small write_small() {
  Small s;
  s.path = testing::TempDir() + "/analyzer-" + std::to_string(getpid()) + ".dctx";
  std::remove(s.path.c_str());
  sqlite3 *db = nullptr;
  EXPECT_EQ(sqlite3_open(s.path.c_str(), &db), SQLITE_OK);
  exec(db, "PRAGMA application_id = 1145263192; PRAGMA user_version = 1;");
  exec(db, dctx::profile_schema());
  exec(db, R"(
    INSERT INTO meta VALUES ('cpu_count', '8'), ('torch_num_threads', '16');
    INSERT INTO strings VALUES (0, ''), (1, 'train'), (2, '/src/train.py'), (3, 'model'),
      (4, 'aten::index'), (5, 'backward'), (6, 'aten::index_put_'), (7, 'relu'),
      (8, '/usr/lib/python3.11/site-packages/torch/nn/functional.py'), (9, 'aten::relu');
    INSERT INTO frames VALUES (0, 0, 0, 0, 0, 0), (1, 1, 1, 2, 10, 0), (2, 10, 3, 0, 0, 0),
      (3, 3, 4, 0, 0, 0), (4, 9, 5, 0, 0, 0), (5, 3, 6, 0, 0, 0), (6, 1, 1, 2, 12, 0),
      (7, 1, 7, 8, 5, 0), (8, 3, 9, 0, 0, 0);
    INSERT INTO nodes VALUES (0, 0, 0), (1, 0, 1), (2, 1, 2), (3, 2, 3), (4, 3, 4), (5, 4, 5),
      (6, 0, 6), (7, 6, 7), (8, 7, 8);
    INSERT INTO metrics VALUES (1, 'op_time', 'ns', ''), (2, 'op_count', 'count', '');
    INSERT INTO node_metrics VALUES (0, 1, 0, 0, 0, 0, 150), (1, 1, 0, 0, 0, 0, 100),
      (2, 1, 0, 0, 0, 0, 100), (3, 1, 10, 1, 10, 10, 100), (4, 1, 0, 0, 0, 0, 90),
      (5, 1, 90, 1, 90, 90, 90), (6, 1, 0, 0, 0, 0, 50), (7, 1, 0, 0, 0, 0, 50),
      (8, 1, 50, 1, 50, 50, 50), (3, 2, 20, 1, 20, 20, 20), (0, 2, 0, 0, 0, 0, 20);
  )");
  sqlite3_close(db);
  return s;
}

// Written once (a process writes one session's tree), read by every test.
const Small &small() {
  static const Small s = write_small();
  return s;
}

TEST(AnalyzerLoader, ReadsTreeMetricsAndMeta) {
  const Small &s = small();
  Profile p = load_profile(s.path);
  EXPECT_EQ(p.size(), 9u);
  EXPECT_EQ(p.parent[s.put], s.bwd);
  EXPECT_EQ(p.frame_of(s.index).kind, kOperator);
  EXPECT_EQ(p.frame_of(s.loop).label(), "train (train.py:10)");
  EXPECT_EQ(p.frame_of(s.module).label(), "[module] model");
  EXPECT_DOUBLE_EQ(p.inclusive(0, "op_time"), 150);
  EXPECT_DOUBLE_EQ(p.inclusive(s.index, "op_time"), 100);
  EXPECT_EQ(*p.meta_value("cpu_count"), "8");
  EXPECT_THROW(p.inclusive(0, "gpu_time"), ProfileError);
  EXPECT_THROW(load_profile(s.path + ".missing"), ProfileError);
}

TEST(AnalyzerQuery, ContextOfEveryNode) {
  const Small &s = small();
  Profile p = load_profile(s.path);
  Query q(p, "/pkg/deepcontext");
  EXPECT_EQ(q.backward[s.put], (s.bwd));
  EXPECT_EQ(q.top_op[s.put], (s.index));
  EXPECT_EQ(q.leaf_op[s.put], (s.put));
  EXPECT_EQ(q.forward_operator(s.put), (s.index));
  EXPECT_EQ(*q.module_path(s.put), "model");
  EXPECT_EQ(q.source_label(s.put), "/src/train.py:10 (train)");
  // a library frame is skipped: the user line is the caller's
  EXPECT_EQ(q.user_line[s.lib], q.parent(s.lib));
  EXPECT_EQ(q.operators(s.put), (std::vector<std::string>{"aten::index", "aten::index_put_"}));
  EXPECT_EQ(q.find("aten::index", kOperator), (std::vector<int>{(s.index)}));
  EXPECT_EQ(q.calls(s.index), 20);
  auto by_line = q.group_by(GroupBy::kLine, "op_time");
  ASSERT_EQ(by_line.size(), 2u);
  EXPECT_EQ(by_line[0].key, (std::vector<std::string>{"/src/train.py", "10", "train"}));
  EXPECT_DOUBLE_EQ(by_line[0].value, 100);
  EXPECT_DOUBLE_EQ(by_line[0].share, 100.0 / 150);
  auto by_op = q.group_by(GroupBy::kOperator, "op_time");
  EXPECT_EQ(by_op[0].key[0], "aten::index");
  EXPECT_EQ(by_op[0].anchors, (std::vector<int>{(s.index)}));
}

TEST(AnalyzerEngine, BuiltinRulesFireAndRank) {
  const Small &s = small();
  Analyzer a(s.path, Context{});
  EXPECT_EQ(a.run_builtin("index-backward").state, RuleStatus::State::kRun);
  EXPECT_EQ(a.run_builtin("thread-oversubscription").state, RuleStatus::State::kRun);
  EXPECT_EQ(a.run_builtin("channels-last").state, RuleStatus::State::kSkipped);
  auto found = a.finish(0.0);
  ASSERT_EQ(found.size(), 2u);
  // index-backward: 40 % of the 90 ns backward of 150; threads: 13 % x (1 - 8/16) / 0.5 of 150
  EXPECT_EQ(found[0].rule, "index-backward");
  EXPECT_DOUBLE_EQ(found[0].saving, 36);
  EXPECT_DOUBLE_EQ(found[0].share, 90.0 / 150);
  EXPECT_EQ(found[0].summary,
            "the backward of `x[idx]` (aten::index) at /src/train.py:10 (train) takes 90 ns, "
            "9.0x its forward");
  EXPECT_EQ(found[1].rule, "thread-oversubscription");
  EXPECT_NEAR(found[1].saving, 150 * 0.13, 1e-9);
  std::remove(s.path.c_str());
}

}  // namespace

// Metadata JSON as Python's json.dumps writes it: objects keep their order, integers stay
// integers, escapes decode to UTF-8; what is not JSON (Python's NaN included) is refused.
TEST(AnalyzerValue, ParsesMetadataJson) {
  Value v;
  ASSERT_TRUE(Value::parse(
      R"({"b": 1, "a": [2.5, -3, true, null], "s": "caf\u00e9 \ud83d\ude00", "big": 18446744073709551615})",
      v));
  ASSERT_TRUE(v.is_dict());
  ASSERT_EQ(v.fields().size(), 4u);
  EXPECT_EQ(v.fields()[0].first, "b");
  EXPECT_EQ(v.fields()[1].first, "a");
  EXPECT_EQ(v.get("b")->type(), Value::Type::kInt);
  const Value &a = *v.get("a");
  ASSERT_EQ(a.items().size(), 4u);
  EXPECT_EQ(a.items()[0].type(), Value::Type::kFloat);
  EXPECT_DOUBLE_EQ(a.items()[0].as_float(), 2.5);
  EXPECT_EQ(a.items()[1].as_int(), -3);
  EXPECT_EQ(a.items()[2].type(), Value::Type::kBool);
  EXPECT_TRUE(a.items()[3].is_null());
  EXPECT_EQ(v.get("s")->as_string(), "caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(v.get("big")->type(), Value::Type::kFloat);
  EXPECT_FALSE(Value::parse("{\"a\": 1,}", v));
  EXPECT_FALSE(Value::parse("[1] 2", v));
  EXPECT_FALSE(Value::parse("{\"a\": NaN}", v));
  EXPECT_TRUE(Value::parse(std::string(500, '[') + std::string(500, ']'), v));
  EXPECT_FALSE(Value::parse(std::string(100000, '[') + std::string(100000, ']'), v));
}
