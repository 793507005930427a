// Distributed training: a straggler rank the others wait for (rank-straggler) and steps bound by
// communication on every rank (communication-bound). They read what deepcontext.distributed
// records (`dist.*` frames, comm_* metrics, the `distributed` metadata summary) and what
// `deepcontext merge` keeps across ranks (`merged_inputs`, `merged_totals`, `M:mean/min/max`).
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "analyzer/engine.h"

namespace dctx::analyzer {

namespace {

constexpr double kMinWaitNs = 10e6;
constexpr double kMinWaitShare = 0.05;
constexpr double kCommBoundShare = 0.30;

bool is_comm(const Query &q, int n) {
  if (q.kind[n] != kOperator) return false;
  const std::string &name = q.name(n);
  for (const char *p :
       {"dist.", "c10d::", "_c10d_functional::", "c10d_functional::", "nccl:", "gloo:"}) {
    if (name.starts_with(p)) return true;
  }
  return false;
}

std::string time_metric(const Query &q) {
  for (const char *m : {"wall_time", "cpu_time", "op_time"}) {
    if (q.has(m)) return m;
  }
  return "";
}

std::vector<int> comm_nodes(const Query &q) {
  std::vector<int> out;
  for (int n = 0; n < q.size(); ++n) {
    if (is_comm(q, n)) out.push_back(n);
  }
  return out;
}

Value parsed_meta(const std::string *text, const char *fallback) {
  Value v;
  if (!Value::parse(text ? *text : fallback, v)) return Value();
  return v;
}

std::vector<Value> inputs_of(const Query &q) {
  Value v = parsed_meta(q.profile().meta_value("merged_inputs"), "[]");
  std::vector<Value> out;
  if (!v.is_list()) return out;
  for (const Value &i : v.items()) {
    if (i.is_dict()) out.push_back(i);
  }
  return out;
}

Value input_meta(const Value &inp) {
  const Value *m = inp.get("meta");
  return m && m->is_dict() ? *m : Value::dict();
}

std::string rank_label(const Value &inp, size_t i) {
  const Value *r = input_meta(inp).get("rank");
  if (r && !r->is_null() && !(r->is_string() && r->as_string().empty())) return "rank " + r->str();
  const Value *label = inp.get("label");
  if (label && label->truthy()) return label->str();
  return "input " + std::to_string(i);
}

// The `distributed` summary of a profile's metadata (a JSON object), {} when absent or not JSON.
Value summary_of(const Value &meta) {
  const Value *s = meta.get("distributed");
  if (!s) return Value::dict();
  if (!s->is_string()) throw std::runtime_error("the distributed summary is not a JSON string");
  Value v;
  if (!Value::parse(s->as_string(), v) || !v.is_dict()) return Value::dict();
  return v;
}

Value summary_of(const Profile &p) {
  const std::string *s = p.meta_value("distributed");
  Value v;
  if (!s || !Value::parse(*s, v) || !v.is_dict()) return Value::dict();
  return v;
}

double py_float_or(const Value *v, double fallback) {
  if (!v) return fallback;
  auto f = py_float(*v);
  if (!f) throw std::runtime_error("not a number: " + v->str());
  return *f;
}

// Communication time of the training loop when it is known (DDP), else of the whole run.
double loop_comm(const Value &s) {
  const Value *loop = s.get("ddp_loop_time");
  const Value *total = s.get("comm_total_time");
  if (loop && loop->truthy()) {
    const Value *c = s.get("ddp_loop_comm_time");
    return py_float_or(c ? c : total, 0.0);
  }
  return py_float_or(total, 0.0);
}

// Where the steps run: the line nodes of the innermost source loop (for/while, read from the
// user's file) around a call path of communication, the one with the most collective calls; else
// the lowest common ancestor of the collectives' user lines.
std::vector<int> region(const Query &q, const Context &ctx, const std::vector<int> &nodes) {
  using Key = std::tuple<int, std::string, std::string, int64_t, int64_t>;
  std::vector<std::pair<Key, double>> weight;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> loops_cache;
  for (int n : nodes) {
    double w = q.inc(n, "comm_calls");
    if (w == 0) w = q.inc(n, "op_count");
    if (w == 0) w = 1.0;
    std::vector<int> chain{n};
    for (int a : q.ancestors(n)) chain.push_back(a);
    for (int a : chain) {
      if (q.kind[a] != kPython) continue;
      const Frame &f = q.frame(a);
      if (!is_user_file(f.file, q.pkg_dir())) continue;
      auto it = loops_cache.find(f.file);
      if (it == loops_cache.end()) {
        it = loops_cache
                 .emplace(f.file, ctx.source_loops ? ctx.source_loops(f.file)
                                                   : std::vector<std::pair<int64_t, int64_t>>{})
                 .first;
      }
      std::optional<std::pair<int64_t, int64_t>> inner;
      for (const auto &lp : it->second) {
        if (lp.first <= f.line && f.line <= lp.second && (!inner || lp > *inner)) inner = lp;
      }
      if (inner) {
        Key key{q.parent(a), f.file, f.name, inner->first, inner->second};
        auto w_it = std::find_if(weight.begin(), weight.end(),
                                 [&](const auto &kv) { return kv.first == key; });
        if (w_it == weight.end()) {
          weight.emplace_back(key, w);
        } else {
          w_it->second += w;
        }
        break;
      }
    }
  }
  if (!weight.empty()) {
    auto best = weight.begin();
    for (auto it = weight.begin(); it != weight.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const auto &[par, file, fn, lo, hi] = best->first;
    std::vector<int> out;
    for (int c : q.children(par)) {
      const Frame &f = q.frame(c);
      if (q.kind[c] == kPython && f.file == file && f.name == fn && lo <= f.line && f.line <= hi) {
        out.push_back(c);
      }
    }
    return out;
  }
  std::vector<int> anchors;
  anchors.reserve(nodes.size());
  for (int n : nodes) anchors.push_back(q.user_line[n] >= 0 ? q.user_line[n] : n);
  return {anchors.empty() ? 0 : q.common_ancestor(anchors)};
}

bool is_file(const std::string &p) {
  struct stat st{};
  return !p.empty() && stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string &base, const std::string &p) {
  if (!p.empty() && p[0] == '/') return p;
  if (base.empty() || base.back() == '/') return base + p;
  return base + "/" + p;
}

std::string dirname(const std::string &p) {
  size_t i = p.rfind('/');
  if (i == std::string::npos) return "";
  std::string d = p.substr(0, i + 1);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

std::string basename(const std::string &p) {
  size_t i = p.rfind('/');
  return i == std::string::npos ? p : p.substr(i + 1);
}

// The rank profiles named in merged_inputs, next to the merged one or where they were; empty when
// any is missing.
std::vector<std::unique_ptr<Profile>> load_rank_profiles(const Query &q,
                                                         const std::vector<Value> &inputs) {
  std::string base = dirname(abspath(q.profile().path));
  std::vector<std::unique_ptr<Profile>> out;
  for (const Value &inp : inputs) {
    const Value *pv = inp.get("path");
    std::string p = pv && pv->truthy() ? pv->str() : "";
    bool loaded = false;
    for (const std::string &cand : {p, join(base, p), join(base, basename(p))}) {
      if (!is_file(cand)) continue;
      try {
        out.push_back(std::make_unique<Profile>(load_profile(cand)));
        loaded = true;
        break;
      } catch (const ProfileError &) {
        continue;  // not a readable profile: try the next place
      }
    }
    if (!loaded) return {};
  }
  return out;
}

std::string frame_key(int parent, const Frame &f) {
  std::string k = std::to_string(parent);
  for (const std::string *s : {&f.kind_name, &f.name, &f.file, &f.module}) {
    k += '\x1f';
    k += *s;
  }
  k += '\x1f' + std::to_string(f.line);
  return k;
}

// For each node of `prof`, the node of q's profile with the same call path (-1: none).
std::vector<int> map_to(const Query &q, const Profile &prof) {
  std::unordered_map<std::string, int> key;
  const Profile &qp = q.profile();
  for (int n = 1; n < static_cast<int>(qp.size()); ++n)
    key[frame_key(qp.parent[n], qp.frame_of(n))] = n;
  std::vector<int> out(prof.size(), -1);
  out[0] = 0;
  for (int n = 1; n < static_cast<int>(prof.size()); ++n) {
    int par = out[static_cast<size_t>(prof.parent[n])];
    if (par >= 0) {
      auto it = key.find(frame_key(par, prof.frame_of(n)));
      out[static_cast<size_t>(n)] = it == key.end() ? -1 : it->second;
    }
  }
  return out;
}

// Nodes of the region's subtree that are not communication (nor below it), nor the direct callers
// of a collective (their exclusive time is the wait inside collectives that run in C++).
std::vector<int> candidates(const Query &q, const std::vector<int> &tops) {
  std::vector<int> out, stack(tops.begin(), tops.end());
  while (!stack.empty()) {
    int n = stack.back();
    stack.pop_back();
    if (is_comm(q, n)) continue;
    auto kids = q.children(n);
    if (std::none_of(kids.begin(), kids.end(), [&](int c) { return is_comm(q, c); })) {
      out.push_back(n);
    }
    for (int c : kids) stack.push_back(c);
  }
  return out;
}

bool merged(const Query &q) {
  const std::string *v = q.profile().meta_value("merged_count");
  if (!v) return false;
  try {
    size_t used = 0;
    long long c = std::stoll(*v, &used);
    std::string rest = v->substr(used);
    if (rest.find_first_not_of(" \t\n\r") != std::string::npos) return false;
    return c >= 2;
  } catch (const std::exception &) {
    return false;
  }
}

// Per-rank facts of a merged profile.
struct Ranks {
  Ranks(const Query &q, const Context &ctx, const std::string &metric) : q(q), metric(metric) {
    inputs = inputs_of(q);
    n = inputs.size();
    for (size_t i = 0; i < n; ++i) labels.push_back(rank_label(inputs[i], i));
    comm = comm_nodes(q);
    reg = region(q, ctx, comm);
    if (n) profiles = load_rank_profiles(q, inputs);
    for (const auto &p : profiles) maps.push_back(map_to(q, *p));
    Value totals = parsed_meta(q.profile().meta_value("merged_totals"), "{}");
    const Value *t = totals.get("comm_wait_time");
    if (t && t->is_list() && t->items().size() == n) {
      for (const Value &v : t->items()) waits.push_back(py_float_or(&v, 0.0));
    } else {
      for (const Value &inp : inputs) {
        waits.push_back(py_float_or(summary_of(input_meta(inp)).get("comm_wait_time"), 0.0));
      }
    }
    for (size_t i = 0; i < n; ++i) region_time.push_back(compute_region_time(i));
    for (const Value &inp : inputs) {
      Value s = summary_of(input_meta(inp));
      comm_total.push_back(loop_comm(s));
      int64_t syncs = 0;
      const Value *by = s.get("by_collective");
      const Value *ddp = by ? by->get("ddp_all_reduce") : nullptr;
      if (ddp && ddp->truthy()) {
        if (const Value *c = ddp->get("comm_calls"))
          syncs = static_cast<int64_t>(py_float_or(c, 0));
      }
      ddp_syncs.push_back(syncs);
    }
  }

  double compute_region_time(size_t i) const {
    const Value *loop = summary_of(input_meta(inputs[i])).get("ddp_loop_time");
    if (loop && loop->truthy()) return py_float_or(loop, 0.0);
    if (!maps.empty()) {
      const Profile &prof = *profiles[i];
      const std::vector<int> &m = maps[i];
      std::unordered_set<int> want(reg.begin(), reg.end());
      double s = 0;
      for (size_t nd = 0; nd < m.size(); ++nd) {
        if (want.count(m[nd])) s += prof.inclusive(static_cast<int>(nd), metric);
      }
      return s;
    }
    double s = 0;
    for (int nd : reg) {
      double v = q.inc(nd, metric + ":mean");
      s += v != 0 ? v : q.inc(nd, metric);
    }
    return s;
  }

  // Exclusive values of the metric by rank, on q's nodes; empty without the rank profiles.
  std::vector<std::unordered_map<int, double>> exclusive_by_rank() const {
    std::vector<std::unordered_map<int, double>> out;
    for (size_t i = 0; i < maps.size(); ++i) {
      std::unordered_map<int, double> vals;
      if (const MetricValues *mv = profiles[i]->metric(metric)) {
        for (size_t k = 0; k < mv->nodes.size(); ++k) {
          size_t node = static_cast<size_t>(mv->nodes[k]);
          int g = node < maps[i].size() ? maps[i][node] : -1;
          if (g >= 0 && mv->values[k].sum != 0) vals[g] += mv->values[k].sum;
        }
      }
      out.push_back(std::move(vals));
    }
    return out;
  }

  const Query &q;
  std::string metric;
  std::vector<Value> inputs;
  size_t n = 0;
  std::vector<std::string> labels;
  std::vector<int> comm, reg;
  std::vector<std::unique_ptr<Profile>> profiles;
  std::vector<std::vector<int>> maps;
  std::vector<double> waits, region_time, comm_total;
  std::vector<int64_t> ddp_syncs;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  if (n == 0) throw std::runtime_error("no median for no data points");
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void straggler(const Query &q, const Context &ctx, std::vector<Finding> &out) {
  if (!merged(q)) {
    throw NotApplicable("not a merged profile of several ranks (deepcontext merge rank*.dctx)");
  }
  std::string m = time_metric(q);
  if (m.empty()) throw NotApplicable("profile has no wall_time, cpu_time or op_time");
  Ranks r(q, ctx, m);
  if (r.n < 2 || r.waits.size() != r.n) {
    throw NotApplicable("the merged profile does not list its inputs' waits");
  }
  size_t s = 0;
  for (size_t i = 1; i < r.n; ++i) {
    if (r.waits[i] < r.waits[s]) s = i;
  }
  std::vector<double> excess(r.n);
  for (size_t i = 0; i < r.n; ++i) excess[i] = r.waits[i] - r.waits[s];
  std::vector<size_t> others;
  for (size_t i = 0; i < r.n; ++i) {
    if (i != s) others.push_back(i);
  }
  double mean_excess = 0, mean_time = 0;
  for (size_t i : others) mean_excess += excess[i];
  for (size_t i : others) mean_time += r.region_time[i];
  mean_excess /= static_cast<double>(others.size());
  mean_time /= static_cast<double>(others.size());
  if (mean_excess < kMinWaitNs || mean_excess < kMinWaitShare * std::max(mean_time, 1.0)) return;
  // the path that makes the straggler slow
  std::vector<int> cands = candidates(q, r.reg);
  struct Path {
    double excess;
    int node;
    double mine, rest;
  };
  std::vector<Path> paths;
  std::string how;
  if (!r.maps.empty()) {
    auto per_rank = r.exclusive_by_rank();
    for (int n : cands) {
      auto it = per_rank[s].find(n);
      double mine = it == per_rank[s].end() ? 0.0 : it->second;
      if (mine <= 0) continue;
      std::vector<double> rest_v;
      for (size_t i : others) {
        auto jt = per_rank[i].find(n);
        rest_v.push_back(jt == per_rank[i].end() ? 0.0 : jt->second);
      }
      double rest = median(rest_v);
      if (mine - rest > 0) paths.push_back({mine - rest, n, mine, rest});
    }
    how = "per-rank profiles";
  } else {
    std::string key = m + ":max_input";
    for (int n : cands) {
      double mx = q.exc(n, m + ":max"), mean = q.exc(n, m + ":mean");
      const std::string *who = q.profile().prop(n, key);
      if (mx - mean > 0 && (!who || *who == r.labels[s])) paths.push_back({mx - mean, n, mx, mean});
    }
    how = "merged maxima (per-rank profiles not found)";
  }
  std::stable_sort(paths.begin(), paths.end(),
                   [](const Path &a, const Path &b) { return a.excess > b.excess; });
  std::optional<int> node;
  if (!paths.empty()) {
    node = paths[0].node;
  } else if (!r.reg.empty() && r.reg[0] != 0) {
    node = r.reg[0];
  }
  Value top = Value::list();
  for (size_t i = 0; i < paths.size() && i < 3; ++i) {
    Value labels = Value::list();
    for (auto &l : q.path_labels(paths[i].node)) labels.push(std::move(l));
    Value t = Value::dict();
    t.set("path", std::move(labels))
        .set("source", q.source_label(paths[i].node))
        .set("straggler_time", paths[i].mine)
        .set("others_median", paths[i].rest)
        .set("excess", paths[i].excess);
    top.push(std::move(t));
  }
  std::string where = node && *node ? " at " + q.source_label(*node) : "";
  std::string extra = paths.empty() ? "" : " (+" + fmt_ns(paths[0].excess) + " there)";
  int64_t syncs =
      r.ddp_syncs.empty() ? 0 : *std::max_element(r.ddp_syncs.begin(), r.ddp_syncs.end());
  std::string per_step =
      syncs ? ", " + fmt_ns(mean_excess / static_cast<double>(syncs)) + " per step" : "";
  size_t slowest = others[0];
  for (size_t i : others) {
    if (excess[i] > excess[slowest]) slowest = i;
  }
  double sum_excess = 0;
  for (double e : excess) sum_excess += e;
  Finding f;
  f.summary = r.labels[s] + " is a straggler: the other ranks wait " + fmt_ns(mean_excess) +
              " more than it in collectives (" + pct(mean_excess / std::max(mean_time, 1.0), 0) +
              " of their time" + per_step + "); it is slow" + where + extra;
  f.suggestion = "Make " + r.labels[s] +
                 " as fast as the others at the path below: balance the work across ranks (equal "
                 "batch shapes and sequence lengths per rank, an even DistributedSampler), take "
                 "slow input loading or logging/checkpointing off the step (DataLoader workers, do "
                 "it on every rank or asynchronously), and check that rank's host/GPU for "
                 "contention.";
  f.metric = m;
  f.time = sum_excess;
  f.saving = sum_excess;
  f.estimate =
      "the other ranks' extra wait in collectives over the straggler's, summed over ranks: it goes "
      "away when the straggler is as fast as the rest";
  Value waits = Value::dict(), rank_time = Value::dict();
  for (size_t i = 0; i < r.n; ++i) {
    waits.set(r.labels[i], r.waits[i]);
    rank_time.set(r.labels[i], r.region_time[i]);
  }
  f.evidence.set("straggler_rank", r.labels[s])
      .set("waits", std::move(waits))
      .set("rank_time", std::move(rank_time))
      .set("mean_extra_wait", mean_excess)
      .set("most_waiting_rank", r.labels[slowest])
      .set("ddp_steps", syncs)
      .set("slow_paths", std::move(top))
      .set("slow_path_from", how);
  f.node = node;
  for (size_t i = 0; i < paths.size() && i < 3; ++i) f.nodes.push_back(paths[i].node);
  out.push_back(std::move(f));
}

void communication_bound(const Query &q, const Context &ctx, std::vector<Finding> &out) {
  std::string m = time_metric(q);
  if (m.empty()) throw NotApplicable("profile has no wall_time, cpu_time or op_time");
  std::vector<int> comm = comm_nodes(q);
  if (comm.empty()) return;
  std::vector<int> top;
  for (int n : comm) {
    if (q.name(n).starts_with("dist.") && q.name(n) != "dist.wait") top.push_back(n);
  }
  for (int n : comm) {
    if (q.name(n) != "dist.wait") continue;
    bool nested = false;
    for (int a = q.parent(n); a != 0 && !nested; a = q.parent(a)) nested = is_comm(q, a);
    if (!nested) top.push_back(n);
  }
  std::vector<std::string> labels;
  std::vector<double> totals, times;
  if (merged(q)) {
    Ranks r(q, ctx, m);
    labels = r.labels;
    totals = r.comm_total;
    times = r.region_time;
  } else {
    Value s = summary_of(q.profile());
    std::vector<int> reg = region(q, ctx, comm);
    const std::string *rank = q.profile().meta_value("rank");
    labels = {rank ? "rank " + *rank : "this process"};
    totals = {loop_comm(s)};
    const Value *loop = s.get("ddp_loop_time");
    double t = 0;
    if (loop && loop->truthy()) {
      t = py_float_or(loop, 0.0);
    } else {
      for (int n : reg) t += q.inc(n, m);
    }
    times = {t};
  }
  std::vector<double> shares;
  shares.reserve(totals.size());
  for (size_t i = 0; i < totals.size(); ++i) {
    shares.push_back(times[i] > 0 ? totals[i] / times[i] : 0.0);
  }
  if (shares.empty() || *std::min_element(shares.begin(), shares.end()) < kCommBoundShare) return;
  auto value = [&](int n) {
    const std::string &name = q.name(n);
    if (name == "dist.wait" || name == "dist.ddp_wait") return q.inc(n, "comm_wait_time");
    return q.inc(n, "comm_time");
  };
  std::stable_sort(top.begin(), top.end(), [&](int a, int b) { return value(a) > value(b); });
  int node = top.empty() ? comm[0] : top[0];
  Value heaviest = Value::list();
  for (size_t i = 0; i < top.size() && i < 5; ++i) {
    int n = top[i];
    Value h = Value::dict();
    h.set("frame", q.name(n))
        .set("source", q.source_label(n))
        .set("time", value(n))
        .set("bytes", q.inc(n, "comm_bytes"))
        .set("calls", q.inc(n, "comm_calls"));
    heaviest.push(std::move(h));
  }
  double total = 0;
  for (double t : totals) total += t;
  std::string who, caveat;
  if (labels.size() > 1) {
    who = "every rank spends >= " + pct(*std::min_element(shares.begin(), shares.end()), 0) +
          " of its time in collectives";
  } else {
    who = labels[0] + " spends " + pct(shares[0], 0) + " of its time in collectives";
    caveat =
        " One rank's profile cannot tell slow communication from waiting for a slower rank: merge "
        "the ranks' profiles (deepcontext merge) and analyze the merged one.";
  }
  Finding f;
  f.summary = "communication-bound: " + who + "; the heaviest is " + q.name(node) + " at " +
              q.source_label(node);
  f.suggestion =
      "Communicate less often or overlap it: gradient accumulation with DDP's no_sync() for all "
      "but the last micro-batch, a larger bucket_cap_mb, a bf16/fp16 compression comm hook, a "
      "larger per-rank batch; collectives in the loop for logging (loss all_reduce) every N steps "
      "or with async_op=True." +
      caveat;
  f.metric = m;
  f.time = total;
  f.saving = 0.5 * total;
  f.estimate = "half of the communication time: overlapped with compute or halved in volume";
  Value share_v = Value::dict(), time_v = Value::dict();
  for (size_t i = 0; i < labels.size(); ++i) {
    share_v.set(labels[i], shares[i]);
    time_v.set(labels[i], totals[i]);
  }
  f.evidence.set("comm_share", std::move(share_v))
      .set("comm_time", std::move(time_v))
      .set("heaviest", std::move(heaviest));
  f.node = node;
  for (size_t i = 0; i < top.size() && i < 5; ++i) f.nodes.push_back(top[i]);
  out.push_back(std::move(f));
}

}  // namespace

void add_distributed(std::vector<RuleInfo> &r) {
  r.push_back({"rank-straggler",
               "A slow rank the other ranks wait for in collectives",
               {"comm_wait_time"},
               "",
               false,
               straggler});
  r.push_back({"communication-bound",
               "Steps bound by communication on every rank",
               {"comm_time", "comm_wait_time"},
               "",
               false,
               communication_bound});
}

}  // namespace dctx::analyzer
