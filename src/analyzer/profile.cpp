#include "analyzer/profile.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

namespace dctx::analyzer {

namespace {

constexpr int kFormatVersion = 1;
constexpr int64_t kApplicationId = 0x44435458;  // "DCTX"

const char *const kKindNames[] = {"root",   "python", "scope",  "operator", "native", "gpu_api",
                                  "kernel", "memcpy", "memset", "backward", "module", "thread",
                                  "sync",   "hlo_op", "jax_op", "step"};

std::string basename(const std::string &p) {
  size_t i = p.rfind('/');
  return i == std::string::npos ? p : p.substr(i + 1);
}

struct Db {
  sqlite3 *db = nullptr;
  ~Db() { sqlite3_close(db); }
};

struct Stmt {
  sqlite3_stmt *st = nullptr;
  ~Stmt() { sqlite3_finalize(st); }
};

std::string text(sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  return t ? std::string(reinterpret_cast<const char *>(t),
                         static_cast<size_t>(sqlite3_column_bytes(st, col)))
           : std::string();
}

// The tables a profile must have; each is read whole, so each must be a real table (a view can
// recurse without end).
const char *const kTables[] = {"meta",    "strings",      "frames",    "nodes",
                               "metrics", "node_metrics", "node_props"};

class Loader {
 public:
  Loader(const std::string &path, sqlite3 *db) : path_(path), db_(db) {}

  void prepare(Stmt &s, const char *sql) {
    if (sqlite3_prepare_v2(db_, sql, -1, &s.st, nullptr) != SQLITE_OK) corrupt();
  }
  // Steps a statement; false at its end, throws on an error.
  bool step(Stmt &s) {
    int rc = sqlite3_step(s.st);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    corrupt();
    return false;
  }
  [[noreturn]] void corrupt() { bad(sqlite3_errmsg(db_)); }
  [[noreturn]] void bad(const std::string &what) {
    throw ProfileError(path_ + ": corrupt profile (" + what + ")");
  }
  int64_t pragma(const char *sql) {
    Stmt s;
    prepare(s, sql);
    return step(s) ? sqlite3_column_int64(s.st, 0) : 0;
  }
  // Column col of table's current row as an integer; anything else (text, a real, NULL) is refused.
  int64_t integer(Stmt &s, int col, const char *table) {
    if (sqlite3_column_type(s.st, col) != SQLITE_INTEGER) {
      bad(std::string(table) + "." + sqlite3_column_name(s.st, col) + " is not an integer");
    }
    return sqlite3_column_int64(s.st, col);
  }
  // A finite number (an integer or a real).
  double number(Stmt &s, int col, const char *table) {
    int t = sqlite3_column_type(s.st, col);
    double v = sqlite3_column_double(s.st, col);
    if ((t != SQLITE_INTEGER && t != SQLITE_FLOAT) || !std::isfinite(v)) {
      bad(std::string(table) + "." + sqlite3_column_name(s.st, col) + " is not a finite number");
    }
    return v;
  }
  int64_t rows(const char *sql) {
    Stmt s;
    prepare(s, sql);
    return step(s) ? sqlite3_column_int64(s.st, 0) : 0;
  }

  Profile load();

 private:
  void check_tables();

  const std::string &path_;
  sqlite3 *db_;
};

void Loader::check_tables() {
  Stmt s;
  prepare(s, "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE");
  for (const char *t : kTables) {
    sqlite3_reset(s.st);
    sqlite3_bind_text(s.st, 1, t, -1, SQLITE_STATIC);
    if (!step(s)) bad(std::string("no such table: ") + t);
    std::string type = text(s.st, 0);
    if (type != "table") bad(std::string(t) + " is a " + type + ", not a table");
  }
}

Profile Loader::load() {
  static std::atomic<uint64_t> next_uid{1};
  Profile p;
  p.uid = next_uid++;
  p.path = path_;
  {
    Stmt s;
    prepare(s, "PRAGMA quick_check");
    std::string check = step(s) ? text(s.st, 0) : "";
    if (check != "ok")
      throw ProfileError(path_ + ": corrupt profile (integrity check: " + check + ")");
  }
  check_tables();
  {
    Stmt s;
    prepare(s, "SELECT key, value FROM meta");
    while (step(s)) p.meta[text(s.st, 0)] = text(s.st, 1);
  }
  std::unordered_map<int64_t, std::string> strings;
  {
    Stmt s;
    prepare(s, "SELECT id, s FROM strings");
    while (step(s)) strings[integer(s, 0, "strings")] = text(s.st, 1);
  }
  auto str = [&](int64_t id) -> std::string {
    auto it = strings.find(id);
    return it == strings.end() ? std::string() : it->second;
  };
  // Ids index arrays: they are checked against the row counts before anything is sized by them,
  // so a small file cannot ask for a huge allocation.
  std::vector<char> frame_present;
  {
    int64_t count = rows("SELECT COUNT(*) FROM frames");
    p.frames.resize(static_cast<size_t>(std::max<int64_t>(count, 1)));
    frame_present.assign(p.frames.size(), 0);
    frame_present[0] = count == 0;  // no frames at all: the root's frame is implied
    Stmt s;
    prepare(s, "SELECT id, kind, name, file, line, module FROM frames");
    while (step(s)) {
      int64_t id = integer(s, 0, "frames");
      if (id < 0 || id >= count) {
        bad("frame id " + std::to_string(id) + " outside 0.." + std::to_string(count - 1));
      }
      Frame &f = p.frames[static_cast<size_t>(id)];
      frame_present[static_cast<size_t>(id)] = 1;
      int64_t kind = integer(s, 1, "frames");
      if (kind < 0 || kind > INT32_MAX)
        bad("frame " + std::to_string(id) + " has kind " + std::to_string(kind));
      f.kind = static_cast<int>(kind);
      f.kind_name = kind < 16 ? kKindNames[kind] : "kind" + std::to_string(kind);
      f.name = str(integer(s, 2, "frames"));
      f.file = str(integer(s, 3, "frames"));
      f.line = integer(s, 4, "frames");
      f.module = str(integer(s, 5, "frames"));
    }
  }
  {
    int64_t count = rows("SELECT COUNT(*) FROM nodes");
    if (count > INT32_MAX) bad("more nodes than a profile may hold");
    size_t n = static_cast<size_t>(std::max<int64_t>(count, 1));
    p.parent.assign(n, 0);
    p.frame.assign(n, 0);
    std::vector<int32_t> nkids(n + 1, 0);
    Stmt s;
    prepare(s, "SELECT id, parent, frame FROM nodes ORDER BY id");
    int64_t expect = 0;  // ids are dense: 0 (the root), 1, ... count - 1
    while (step(s)) {
      int64_t id = integer(s, 0, "nodes");
      int64_t parent = integer(s, 1, "nodes");
      int64_t frame = integer(s, 2, "nodes");
      if (id != expect++) {
        bad("node ids are not 0.." + std::to_string(count - 1) + " (found " + std::to_string(id) +
            ")");
      }
      if (id == 0) continue;
      if (parent >= id || parent < 0) {
        bad("node " + std::to_string(id) + " has parent " + std::to_string(parent));
      }
      if (frame < 0 || static_cast<size_t>(frame) >= p.frames.size() ||
          !frame_present[static_cast<size_t>(frame)]) {
        bad("node " + std::to_string(id) + " has no frame " + std::to_string(frame));
      }
      p.parent[static_cast<size_t>(id)] = static_cast<int32_t>(parent);
      p.frame[static_cast<size_t>(id)] = static_cast<int32_t>(frame);
      ++nkids[static_cast<size_t>(parent)];
    }
    if (expect != count) bad("the nodes table changed while it was read");
    p.child_begin.assign(n + 1, 0);
    for (size_t i = 0; i < n; ++i) p.child_begin[i + 1] = p.child_begin[i] + nkids[i];
    p.child_list.assign(static_cast<size_t>(p.child_begin[n]), 0);
    std::vector<int32_t> fill(p.child_begin.begin(), p.child_begin.end() - 1);
    for (size_t id = 1; id < n; ++id) {
      p.child_list[static_cast<size_t>(fill[static_cast<size_t>(p.parent[id])]++)] =
          static_cast<int32_t>(id);
    }
  }
  std::unordered_map<int64_t, size_t> by_id;
  {
    Stmt s;
    prepare(s, "SELECT id, name, unit FROM metrics");
    while (step(s)) {
      MetricValues m;
      m.name = text(s.st, 1);
      m.unit = text(s.st, 2);
      // a name the table repeats keeps its first place (reader: a dict by name)
      size_t idx = p.metrics.size();
      for (size_t i = 0; i < p.metrics.size(); ++i) {
        if (p.metrics[i].name == m.name) idx = i;
      }
      if (idx == p.metrics.size()) {
        m.slot.assign(p.size(), -1);
        p.metrics.push_back(std::move(m));
      }
      by_id[integer(s, 0, "metrics")] = idx;
    }
  }
  {
    Stmt s;
    prepare(s, "SELECT node, metric, sum, count, min, max, inc FROM node_metrics");
    while (step(s)) {
      auto it = by_id.find(integer(s, 1, "node_metrics"));
      if (it == by_id.end()) continue;
      int64_t node = integer(s, 0, "node_metrics");
      if (node < 0 || static_cast<size_t>(node) >= p.size()) continue;
      MetricValue v{number(s, 2, "node_metrics"), number(s, 4, "node_metrics"),
                    number(s, 5, "node_metrics"), number(s, 6, "node_metrics"),
                    integer(s, 3, "node_metrics")};
      if (v.count < 0) bad("node " + std::to_string(node) + " has a negative count");
      MetricValues &m = p.metrics[it->second];
      int32_t &slot = m.slot[static_cast<size_t>(node)];
      if (slot >= 0) {
        m.values[static_cast<size_t>(slot)] = v;
      } else {
        slot = static_cast<int32_t>(m.values.size());
        m.nodes.push_back(static_cast<int32_t>(node));
        m.values.push_back(v);
      }
    }
  }
  {
    Stmt s;
    prepare(s, "SELECT node, key, value FROM node_props");
    while (step(s)) {
      int64_t node = integer(s, 0, "node_props");
      if (node < 0 || static_cast<size_t>(node) >= p.size()) continue;
      p.props[static_cast<int>(node)][text(s.st, 1)] = text(s.st, 2);
    }
  }
  return p;
}

}  // namespace

std::string Frame::label() const {
  if (kind == kPython) return name + " (" + basename(file) + ":" + std::to_string(line) + ")";
  if (kind == kNative && !module.empty()) return name + " [" + basename(module) + "]";
  if (kind == kScope || kind == kModule || kind == kBackward || kind == kThread || kind == kStep) {
    return name.empty() ? "[" + kind_name + "]" : "[" + kind_name + "] " + name;
  }
  return name;
}

const MetricValues *Profile::metric(const std::string &name) const {
  for (const auto &m : metrics) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const std::string *Profile::prop(int node, const std::string &key) const {
  auto it = props.find(node);
  if (it == props.end()) return nullptr;
  auto kv = it->second.find(key);
  return kv == it->second.end() ? nullptr : &kv->second;
}

double Profile::inclusive(int node, const std::string &name) const {
  const MetricValues *m = metric(name);
  if (!m) {
    std::string known;
    for (const auto &x : metrics) known += (known.empty() ? "" : ", ") + x.name;
    throw ProfileError("unknown metric '" + name +
                       "' (this profile has: " + (known.empty() ? "none" : known) + ")");
  }
  const MetricValue *v = m->at(node);
  return v ? v->inc : 0.0;
}

Profile load_profile(const std::string &path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) throw ProfileError(path + ": no such file");
  if (S_ISDIR(st.st_mode)) throw ProfileError(path + ": is a directory, not a .dctx profile");
  {
    std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) throw ProfileError(path + ": cannot read (" + std::strerror(errno) + ")");
    char head[16] = {};
    size_t got = std::fread(head, 1, sizeof head, f.get());
    if (got != sizeof head || std::memcmp(head, "SQLite format 3\0", 16) != 0) {
      throw ProfileError(path + ": not a DeepContext profile (not an SQLite database)");
    }
  }
  Db db;
  std::string uri = "file:" + path + "?mode=ro";
  if (sqlite3_open_v2(uri.c_str(), &db.db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) !=
      SQLITE_OK) {
    throw ProfileError(path + ": corrupt profile (" + sqlite3_errmsg(db.db) + ")");
  }
  Loader loader(path, db.db);
  if (loader.pragma("PRAGMA application_id") != kApplicationId) {
    throw ProfileError(path + ": not a DeepContext profile (SQLite file of another application)");
  }
  int64_t version = loader.pragma("PRAGMA user_version");
  if (version != kFormatVersion) {
    throw ProfileError(path + ": profile format version " + std::to_string(version) +
                       ", this reader knows " + std::to_string(kFormatVersion));
  }
  return loader.load();
}

}  // namespace dctx::analyzer
