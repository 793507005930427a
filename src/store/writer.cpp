#include "writer.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "timeline/timeline.h"

namespace dctx {
namespace {

constexpr int kFormatVersion = 1;
constexpr int kApplicationId = 0x44435458;  // "DCTX"

constexpr const char *kSchema = R"sql(
CREATE TABLE meta    (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE strings (id INTEGER PRIMARY KEY, s TEXT NOT NULL);
CREATE TABLE frames  (id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, name INTEGER NOT NULL,
                      file INTEGER NOT NULL, line INTEGER NOT NULL, module INTEGER NOT NULL);
CREATE TABLE nodes   (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, frame INTEGER NOT NULL);
CREATE TABLE metrics (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, unit TEXT NOT NULL,
                      description TEXT NOT NULL);
CREATE TABLE node_metrics (node INTEGER NOT NULL, metric INTEGER NOT NULL, sum REAL NOT NULL,
                      count INTEGER NOT NULL, min REAL NOT NULL, max REAL NOT NULL,
                      inc REAL NOT NULL, PRIMARY KEY (node, metric)) WITHOUT ROWID;
CREATE TABLE node_props (node INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
                      PRIMARY KEY (node, key)) WITHOUT ROWID;
)sql";

// The first sqlite3 call that fails sets `error` (SQLite's message and the system's, e.g. "disk
// I/O error (File too large)"); every later call is skipped, so that message is the one the user
// sees, not a consequence of it (after a failed write SQLite rolls the transaction back, and COMMIT
// would say "no transaction is active").
struct Db {
  sqlite3 *db = nullptr;
  std::string error;
  ~Db() {
    if (db) sqlite3_close(db);
  }
  bool ok() const { return error.empty(); }
  bool fail() {
    if (error.empty()) {
      error = db ? sqlite3_errmsg(db) : "cannot open the database";
      const int sys = db ? sqlite3_system_errno(db) : 0;
      if (sys != 0) error += std::string(" (") + std::strerror(sys) + ")";
    }
    return false;
  }
  bool exec(const char *sql) {
    if (!ok()) return false;
    return sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK || fail();
  }
  bool close() {
    const int rc = sqlite3_close(db);
    if (rc != SQLITE_OK) return fail();
    db = nullptr;
    return true;
  }
};

struct Stmt {
  Db &d;
  sqlite3_stmt *st = nullptr;
  Stmt(Db &db, const char *sql) : d(db) {
    if (d.ok() && sqlite3_prepare_v2(d.db, sql, -1, &st, nullptr) != SQLITE_OK) d.fail();
  }
  ~Stmt() { sqlite3_finalize(st); }
  // Runs the bound insert; false (and d.error set) if it, or an earlier call, failed.
  bool step() {
    if (!d.ok()) return false;
    const int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || d.fail();
  }
};

// Metadata that holds JSON is written with nlohmann/json. Thread names and notes come from the
// program: bytes that are not UTF-8 are replaced, not refused, so the profile is still written.
std::string json_text(const nlohmann::ordered_json &j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// The bounded timeline (docs/format.md, "Timeline"): its events, its steps and a few meta keys.
bool write_timeline(Db &d, const timeline::Window &w) {
  if (!d.exec(R"sql(
CREATE TABLE timeline (step INTEGER NOT NULL, kind INTEGER NOT NULL, node INTEGER NOT NULL,
                       start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, tid INTEGER NOT NULL,
                       device INTEGER NOT NULL, stream INTEGER NOT NULL);
CREATE TABLE timeline_steps (step INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL,
                             end_ns INTEGER NOT NULL);
)sql"))
    return false;
  {
    Stmt st(d, "INSERT INTO timeline VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    for (const timeline::Event &e : w.events) {
      const bool gpu = e.device != 0;
      sqlite3_bind_int64(st.st, 1, e.step);
      sqlite3_bind_int64(st.st, 2, e.kind);
      sqlite3_bind_int64(st.st, 3, e.node);
      sqlite3_bind_int64(st.st, 4, e.start_ns);
      sqlite3_bind_int64(st.st, 5, e.end_ns);
      const sqlite3_int64 lane = e.lane;
      sqlite3_bind_int64(st.st, 6, gpu ? 0 : lane);
      sqlite3_bind_int64(st.st, 7, gpu ? sqlite3_int64{e.device} - 1 : -1);
      sqlite3_bind_int64(st.st, 8, gpu ? lane : -1);
      if (!st.step()) return false;
    }
  }
  {
    Stmt st(d, "INSERT INTO timeline_steps VALUES (?, ?, ?)");
    for (const timeline::Step &s : w.steps) {
      sqlite3_bind_int64(st.st, 1, s.step);
      sqlite3_bind_int64(st.st, 2, s.start_ns);
      sqlite3_bind_int64(st.st, 3, s.end_ns);
      if (!st.step()) return false;
    }
  }
  Stmt st(d, "INSERT OR REPLACE INTO meta VALUES (?, ?)");
  auto put = [&](const char *k, const std::string &v) {
    sqlite3_bind_text(st.st, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(st.st, 2, v.c_str(), -1, SQLITE_TRANSIENT);
    st.step();
  };
  nlohmann::ordered_json threads = nlohmann::ordered_json::object();
  for (const auto &[tid, name] : w.thread_names) threads[std::to_string(tid)] = name;
  put("timeline_version", "1");
  put("timeline_clock", "CLOCK_MONOTONIC");
  put("timeline_steps", std::to_string(w.steps_requested));
  put("timeline_current_step", std::to_string(w.current_step));
  put("timeline_events_per_thread", std::to_string(w.events_per_thread));
  put("timeline_recorded", std::to_string(w.recorded));
  put("timeline_overwritten", std::to_string(w.overwritten));
  put("timeline_dropped", std::to_string(w.dropped));
  put("timeline_incomplete_steps", std::to_string(w.incomplete_steps));
  put("timeline_threads", json_text(threads));
  return d.ok();
}

}  // namespace

const char *profile_schema() { return kSchema; }

std::string write_profile(const Snapshot &snap, const std::string &path) {
  const timeline::Window tl = timeline::collect(snap.parent.size());
  std::string tmp = path + ".tmp-" + std::to_string(getpid());
  std::remove(tmp.c_str());
  // A write that fails (disk full, folder removed) leaves no half-written file behind.
  struct RemoveUnlessRenamed {
    const std::string &tmp;
    bool renamed = false;
    ~RemoveUnlessRenamed() {
      if (!renamed) std::remove(tmp.c_str());
    }
  } cleanup{tmp};
  Db d;
  if (sqlite3_open(tmp.c_str(), &d.db) != SQLITE_OK) {
    d.fail();
    return "cannot create " + tmp + ": " + d.error;
  }
  std::string pragmas = "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA application_id=" +
                        std::to_string(kApplicationId) +
                        "; PRAGMA user_version=" + std::to_string(kFormatVersion) + ";";
  if (!d.exec(pragmas.c_str()) || !d.exec(kSchema) || !d.exec("BEGIN")) return d.error;

  {
    Stmt st(d, "INSERT INTO meta VALUES (?, ?)");
    auto put = [&](const std::string &k, const std::string &v) {
      sqlite3_bind_text(st.st, 1, k.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(st.st, 2, v.c_str(), -1, SQLITE_TRANSIENT);
      st.step();
    };
    nlohmann::ordered_json notes = snap.notes;
    for (const std::string &n : tl.notes) notes.push_back(n);
    for (auto &[k, v] : snap.meta)
      if (k != "notes" && k != "format_version") put(k, v);
    put("format_version", std::to_string(kFormatVersion));
    put("notes", json_text(notes));
  }
  if (!d.ok()) return d.error;
  {
    Stmt st(d, "INSERT INTO strings VALUES (?, ?)");
    for (size_t i = 0; i < snap.strings.size(); ++i) {
      sqlite3_bind_int64(st.st, 1, static_cast<sqlite3_int64>(i));
      sqlite3_bind_text(st.st, 2, snap.strings[i].data(), static_cast<int>(snap.strings[i].size()),
                        SQLITE_STATIC);
      if (!st.step()) return d.error;
    }
  }
  {
    Stmt st(d, "INSERT INTO frames VALUES (?, ?, ?, ?, ?, ?)");
    for (size_t i = 0; i < snap.frames.size(); ++i) {
      const FrameKey &f = snap.frames[i];
      sqlite3_bind_int64(st.st, 1, static_cast<sqlite3_int64>(i));
      sqlite3_bind_int(st.st, 2, static_cast<int>(f.kind));
      sqlite3_bind_int64(st.st, 3, f.name);
      sqlite3_bind_int64(st.st, 4, f.file);
      sqlite3_bind_int64(st.st, 5, f.line);
      sqlite3_bind_int64(st.st, 6, f.module);
      if (!st.step()) return d.error;
    }
  }
  {
    Stmt st(d, "INSERT INTO nodes VALUES (?, ?, ?)");
    for (size_t i = 0; i < snap.parent.size(); ++i) {
      sqlite3_bind_int64(st.st, 1, static_cast<sqlite3_int64>(i));
      sqlite3_bind_int64(st.st, 2, snap.parent[i]);
      sqlite3_bind_int64(st.st, 3, snap.node_frame[i]);
      if (!st.step()) return d.error;
    }
  }
  {
    Stmt st(d, "INSERT INTO metrics VALUES (?, ?, ?, ?)");
    for (size_t i = 0; i < snap.metrics.size(); ++i) {
      sqlite3_bind_int64(st.st, 1, static_cast<sqlite3_int64>(i));
      sqlite3_bind_text(st.st, 2, snap.metrics[i].name.c_str(), -1, SQLITE_STATIC);
      sqlite3_bind_text(st.st, 3, snap.metrics[i].unit.c_str(), -1, SQLITE_STATIC);
      sqlite3_bind_text(st.st, 4, snap.metrics[i].description.c_str(), -1, SQLITE_STATIC);
      if (!st.step()) return d.error;
    }
  }
  {
    // Inclusive values: children have larger ids than their parents, so one reverse pass sums
    // each subtree into its root.
    size_t n = snap.parent.size();
    Stmt st(d, "INSERT INTO node_metrics VALUES (?, ?, ?, ?, ?, ?, ?)");
    std::vector<double> inc(n);
    std::vector<char> touched(n);
    std::vector<const Acc *> own(n);
    for (size_t m = 0; m < snap.metrics.size(); ++m) {
      std::fill(inc.begin(), inc.end(), 0.0);
      std::fill(touched.begin(), touched.end(), 0);
      std::fill(own.begin(), own.end(), nullptr);
      for (auto &[key, acc] : snap.acc) {
        if ((key & 0xFFFF) != m) continue;
        size_t node = key >> 16;
        if (node >= n) continue;
        own[node] = &acc;
        inc[node] += acc.sum;
        touched[node] = 1;
      }
      for (size_t i = n; i-- > 1;) {
        if (!touched[i]) continue;
        inc[snap.parent[i]] += inc[i];
        touched[snap.parent[i]] = 1;
      }
      for (size_t i = 0; i < n; ++i) {
        if (!touched[i]) continue;
        const Acc *a = own[i];
        sqlite3_bind_int64(st.st, 1, static_cast<sqlite3_int64>(i));
        sqlite3_bind_int64(st.st, 2, static_cast<sqlite3_int64>(m));
        sqlite3_bind_double(st.st, 3, a ? a->sum : 0);
        sqlite3_bind_int64(st.st, 4, a ? static_cast<sqlite3_int64>(a->count) : 0);
        sqlite3_bind_double(st.st, 5, a ? a->min : 0);
        sqlite3_bind_double(st.st, 6, a ? a->max : 0);
        sqlite3_bind_double(st.st, 7, inc[i]);
        if (!st.step()) return d.error;
      }
    }
  }
  {
    Stmt st(d, "INSERT INTO node_props VALUES (?, ?, ?)");
    for (auto &[k, v] : snap.props) {
      sqlite3_bind_int64(st.st, 1, k.first);
      sqlite3_bind_text(st.st, 2, k.second.c_str(), -1, SQLITE_STATIC);
      sqlite3_bind_text(st.st, 3, v.c_str(), -1, SQLITE_STATIC);
      if (!st.step()) return d.error;
    }
  }
  if (tl.enabled && !write_timeline(d, tl)) return d.error;
  if (!d.exec("COMMIT") || !d.close()) return d.error;
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return "cannot rename " + tmp + " to " + path;
  cleanup.renamed = true;
  return "";
}

}  // namespace dctx
