// The .dctx writer: schema identity, inclusive sums over subtrees, atomic rename.
#include "store/writer.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace {

double query(sqlite3 *db, const std::string &sql) {
  sqlite3_stmt *st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
  double v = -1;
  if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_double(st, 0);
  sqlite3_finalize(st);
  return v;
}

TEST(Writer, WritesInclusiveValuesAndIdentity) {
  dctx::Tree t;
  dctx_metric m = t.metric("cpu_time", "ns", "cpu");
  dctx_node a = t.child(0, t.frame(DCTX_FRAME_PYTHON, "main", "m.py", 1, ""));
  dctx_node b = t.child(a, t.frame(DCTX_FRAME_PYTHON, "f", "m.py", 5, ""));
  dctx_node c = t.child(a, t.frame(DCTX_FRAME_PYTHON, "g", "m.py", 9, ""));
  t.add(a, m, 1);
  t.add(b, m, 10);
  t.add(b, m, 20);
  t.add(c, m, 100);
  t.set_meta("pid", "42");
  t.note("a note");
  std::string path = testing::TempDir() + "/w-" + std::to_string(getpid()) + ".dctx";
  ASSERT_EQ(dctx::write_profile(t.snapshot(), path), "");
  EXPECT_NE(access((path + ".tmp-" + std::to_string(getpid())).c_str(), F_OK), 0);
  sqlite3 *db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(query(db, "PRAGMA application_id"), double(0x44435458));
  EXPECT_EQ(query(db, "PRAGMA user_version"), 1);
  EXPECT_EQ(query(db, "SELECT inc FROM node_metrics WHERE node=0"), 131);
  EXPECT_EQ(query(db, "SELECT inc FROM node_metrics WHERE node=" + std::to_string(a)), 131);
  EXPECT_EQ(query(db, "SELECT sum FROM node_metrics WHERE node=" + std::to_string(a)), 1);
  EXPECT_EQ(query(db, "SELECT count FROM node_metrics WHERE node=" + std::to_string(b)), 2);
  EXPECT_EQ(query(db, "SELECT max FROM node_metrics WHERE node=" + std::to_string(b)), 20);
  EXPECT_EQ(query(db, "SELECT count FROM node_metrics WHERE node=0"), 0);
  EXPECT_EQ(query(db, "SELECT COUNT(*) FROM meta WHERE key='notes' AND value='[\"a note\"]'"), 1);
  sqlite3_close(db);
  std::remove(path.c_str());
}

TEST(Writer, NotesAreJsonWhateverBytesTheyHold) {
  dctx::Tree t;
  t.note("quote \" backslash \\ newline \n");
  t.note("not UTF-8: \xff");
  std::string path = testing::TempDir() + "/n-" + std::to_string(getpid()) + ".dctx";
  ASSERT_EQ(dctx::write_profile(t.snapshot(), path), "");
  sqlite3 *db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt *st = nullptr;
  sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='notes'", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  const auto notes =
      nlohmann::json::parse(reinterpret_cast<const char *>(sqlite3_column_text(st, 0)));
  sqlite3_finalize(st);
  sqlite3_close(db);
  std::remove(path.c_str());
  EXPECT_EQ(notes, nlohmann::json(
                       {"quote \" backslash \\ newline \n", "not UTF-8: \xEF\xBF\xBD"}));  // U+FFFD
}

TEST(Writer, WritesATreeThatWasGivenUnknownIds) {
  // dctx_child(1000000, f) made a node whose parent id exceeded its own, and the inclusive pass
  // indexed past the end at the final write.
  dctx::Tree t;
  dctx_metric m = t.metric("cpu_time", "ns", "cpu");
  uint32_t f = t.frame(DCTX_FRAME_SCOPE, "s", "", 0, "");
  dctx_node bad = t.child(1000000, f);
  t.add(bad, m, 5);
  dctx_node a = t.child(0, f);
  t.add(a, m, 1);
  t.add(a, 65536 + m, 7);
  std::string path = testing::TempDir() + "/u-" + std::to_string(getpid()) + ".dctx";
  ASSERT_EQ(dctx::write_profile(t.snapshot(), path), "");
  sqlite3 *db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(query(db, "SELECT COUNT(*) FROM nodes"), 2);
  EXPECT_EQ(query(db, "SELECT inc FROM node_metrics WHERE node=0"), 6);  // bad's 5 at the root
  EXPECT_EQ(query(db, "SELECT sum FROM node_metrics WHERE node=" + std::to_string(a)), 1);
  sqlite3_close(db);
  std::remove(path.c_str());
}

TEST(Writer, FailsCleanlyOnUnwritableDirectory) {
  dctx::Tree t;
  std::string err = dctx::write_profile(t.snapshot(), "/nonexistent-dir/x.dctx");
  EXPECT_NE(err, "");
}

}  // namespace
