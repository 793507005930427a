// XLA's NVTX thunk ranges -> calling context of the kernels launched inside them (see nvtx.h).
#include "nvtx.h"

#include <pthread.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dctx::gpu {
namespace {

// CUPTI_CBID_NVTX_* (cupti_nvtx_cbid.h; stable numbers across CUPTI 11-13).
constexpr uint32_t kPushEx = 33, kPop = 34, kRegisterStringA = 39, kDomainCreateA = 41;

// The NVTX structures the callbacks receive (nvToolsExt.h v2 ABI; generated_nvtx_meta.h
// parameter blocks). Mirrored here so that the layer builds without the nvtx3 headers.
struct PushExParams {
  const void *domain;
  const NvtxEventAttributes *attributes;
};
struct PopParams {
  const void *domain;
};
struct RegisterStringParams {
  const void *domain;
  const char *text;
};
struct DomainCreateParams {
  const char *name;
};
struct NvtxData {  // CUpti_NvtxData
  const char *function_name;
  const void *params;
  const void *return_value;
};

enum class Kind : uint8_t { Other, Module, Thunk };
struct StringInfo {
  Kind kind = Kind::Other;
  std::string a;  // module: hlo_module; thunk: hlo_op
  std::string b;  // module: program_id; thunk: op_name (name=)
};

uint64_t mix(uint64_t x) {  // all input bits reach the high bits (handles are aligned pointers)
  x ^= x >> 31;
  x *= 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 29);
}

// Registered strings, read without a lock: an open-addressing table handle -> StringInfo that
// registrations (rare: once per string, at compile time) fill under g_mu. A full table is copied
// into one twice the size and published; old tables and the StringInfos stay until exit (they
// are small: a few thousand strings), so a reader never sees freed memory.
struct StringTable {
  explicit StringTable(size_t capacity)
      : mask(capacity - 1),
        keys(new std::atomic<uint64_t>[capacity]),
        values(new std::atomic<const StringInfo *>[capacity]) {
    for (size_t i = 0; i < capacity; ++i) {
      keys[i].store(0, std::memory_order_relaxed);
      values[i].store(nullptr, std::memory_order_relaxed);
    }
  }
  const StringInfo *find(uint64_t handle) const {
    for (size_t i = mix(handle) & mask;; i = (i + 1) & mask) {
      const uint64_t k = keys[i].load(std::memory_order_acquire);
      if (k == handle) return values[i].load(std::memory_order_acquire);
      if (k == 0) return nullptr;
    }
  }
  void put(uint64_t handle, const StringInfo *info) {  // under g_mu
    for (size_t i = mix(handle) & mask;; i = (i + 1) & mask) {
      const uint64_t k = keys[i].load(std::memory_order_relaxed);
      if (k == handle || k == 0) {
        values[i].store(info, std::memory_order_release);
        if (k == 0) {
          keys[i].store(handle, std::memory_order_release);
          ++used;
        }
        return;
      }
    }
  }
  const size_t mask;
  size_t used = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> keys;
  std::unique_ptr<std::atomic<const StringInfo *>[]> values;
};

std::atomic<uint64_t> g_xla_domain{0};
std::mutex g_mu;  // registrations and module tables (writers; the hot paths take no lock)
std::atomic<const StringTable *> g_table{nullptr};
std::vector<std::unique_ptr<StringTable>> g_tables;               // every table published (kept)
std::vector<std::unique_ptr<StringInfo>> g_infos;                 // every string parsed (kept)
std::unordered_map<std::string, std::vector<uint32_t>> g_chains;  // module\x1fpid\x1fop
std::atomic<uint64_t> g_generation{1};
std::atomic<uint64_t> g_pushes{0}, g_strings_n{0}, g_launches{0}, g_in_thunk{0}, g_sourced{0};
// Diagnostics (dctx_cupti_nvtx_counters): table misses, TSL pushes without a registered string
// (XLA built the message for that push), pushes in other domains, call paths taken in a range.
std::atomic<uint64_t> g_lookups{0}, g_unregistered{0}, g_other{0}, g_paths{0};
std::atomic<uint64_t> g_injections{0};  // NVTX copies that took our own injection

const StringInfo *find_string(uint64_t handle) {
  const StringTable *t = g_table.load(std::memory_order_acquire);
  return t && handle ? t->find(handle) : nullptr;
}

constexpr uint32_t kDepth = 64;
struct Range {
  uint64_t handle, serial;  // serial: this thread's push count when it was pushed
};
// Launch-side nodes of one thread: open addressing (context, thunk handle) -> node, allocated on
// the thread's first launch inside a thunk and grown when half full; cleared when the module
// tables or the session change (generation).
struct Slot {
  uint64_t handle;
  dctx_node context, node;
};
struct NodeCache {
  uint64_t generation = 0;
  size_t mask = 0, used = 0;
  std::vector<Slot> slots;
};
// Zero-initialised plain data: thread_local access needs no guard on the hot paths.
struct NvtxThread {
  uint32_t depth;
  uint64_t serial;
  Range stack[kDepth];
  // The launching thread's own context (call path), taken at the first launch inside an XLA
  // module range and kept while that range stays open (the thread runs XLA's C++ meanwhile,
  // so its Python call path cannot change): a module run's launches walk the Python stack once.
  uint64_t ctx_generation, ctx_serial;
  uint32_t ctx_index;
  dctx_node ctx;
  NodeCache *cache;
};
thread_local NvtxThread t_nvtx;

pthread_key_t g_cache_key;
void free_cache(void *p) {  // on the exiting thread: a later launch there starts a new one
  if (t_nvtx.cache == p) t_nvtx.cache = nullptr;
  delete static_cast<NodeCache *>(p);
}
NodeCache &thread_cache(NvtxThread &t) {
  if (!t.cache) {
    static const bool key = pthread_key_create(&g_cache_key, free_cache) == 0;
    t.cache = new NodeCache();
    if (key) pthread_setspecific(g_cache_key, t.cache);  // freed when the thread exits
  }
  return *t.cache;
}

void cache_reset(NodeCache &c, size_t capacity, uint64_t generation) {
  c.slots.assign(capacity, Slot{0, 0, 0});
  c.mask = capacity - 1;
  c.used = 0;
  c.generation = generation;
}

dctx_node *cache_find(NodeCache &c, uint64_t handle, dctx_node context) {
  for (size_t i = mix(handle ^ (uint64_t(context) << 40)) & c.mask;; i = (i + 1) & c.mask) {
    Slot &s = c.slots[i];
    if (s.handle == handle && s.context == context) return &s.node;
    if (s.handle == 0) return nullptr;
  }
}

void cache_put(NodeCache &c, uint64_t handle, dctx_node context, dctx_node node) {
  if ((c.used + 1) * 2 > c.slots.size()) {
    if (c.slots.size() >= (size_t{1} << 16)) {
      cache_reset(c, c.slots.size(), c.generation);  // bound: start over
    } else {
      std::vector<Slot> old = std::move(c.slots);
      cache_reset(c, old.size() * 2, c.generation);
      for (const Slot &s : old)
        if (s.handle) cache_put(c, s.handle, s.context, s.node);
    }
  }
  for (size_t i = mix(handle ^ (uint64_t(context) << 40)) & c.mask;; i = (i + 1) & c.mask) {
    Slot &s = c.slots[i];
    if (s.handle == 0) {
      s = Slot{handle, context, node};
      ++c.used;
      return;
    }
    if (s.handle == handle && s.context == context) {
      s.node = node;
      return;
    }
  }
}

std::string field(std::string_view s, std::string_view key) {
  // key=value up to the next ',' or '#'; key must start the string or follow '#' or ','.
  size_t pos = 0;
  while ((pos = s.find(key, pos)) != std::string_view::npos) {
    if (pos == 0 || s[pos - 1] == '#' || s[pos - 1] == ',') {
      size_t start = pos + key.size();
      size_t end = s.find_first_of(",#", start);
      return std::string(
          s.substr(start, end == std::string_view::npos ? s.size() - start : end - start));
    }
    pos += key.size();
  }
  return {};
}

StringInfo parse(std::string_view s) {
  StringInfo info;
  if (s.rfind("Thunk:", 0) == 0) {
    info.kind = Kind::Thunk;
    info.a = field(s, "hlo_op=");
    // name= holds the op_name, which may itself contain ','; it ends where ",hlo_op=" starts.
    size_t n = s.find("name=");
    if (n != std::string_view::npos && (s[n - 1] == '#' || s[n - 1] == ',')) {
      size_t start = n + 5;
      size_t end = s.find(",hlo_op=", start);
      if (end == std::string_view::npos) end = s.find_first_of(",#", start);
      if (end != std::string_view::npos) info.b = std::string(s.substr(start, end - start));
    }
    if (info.a.empty()) info.kind = Kind::Other;
  } else if (s.rfind("XlaModule:", 0) == 0) {
    info.kind = Kind::Module;
    info.a = field(s, "hlo_module=");
    info.b = field(s, "program_id=");
  }
  return info;
}

std::string chain_key(const std::string &module, const std::string &pid, const std::string &op) {
  std::string k;
  k.reserve(module.size() + pid.size() + op.size() + 2);
  k += module;
  k += '\x1f';
  k += pid;
  k += '\x1f';
  k += op;
  return k;
}

uint32_t frame(dctx_frame_kind kind, const std::string &name, const char *module) {
  dctx_frame f{kind, name.c_str(), "", 0, module};
  return dctx_frame_id(&f);
}

// The op_name split at '/' outside brackets: jit(step)/transpose(jvp(layer0))/dot_general.
std::vector<uint32_t> fallback_chain(const StringInfo &thunk, const std::string &module) {
  std::vector<uint32_t> out;
  const std::string &op = thunk.b;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= op.size(); ++i) {
    char c = i < op.size() ? op[i] : '/';
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    if (c == '/' && depth == 0) {
      if (i > start) out.push_back(frame(DCTX_FRAME_JAX_OP, op.substr(start, i - start), ""));
      start = i + 1;
    }
  }
  out.push_back(frame(DCTX_FRAME_HLO_OP, thunk.a, module.c_str()));
  return out;
}

// The innermost open XlaModule range below the top one, or -1.
int module_index(const NvtxThread &t, uint32_t d) {
  for (uint32_t i = d - 1; i-- > 0;) {
    const StringInfo *m = find_string(t.stack[i].handle);
    if (m && m->kind == Kind::Module) return static_cast<int>(i);
  }
  return -1;
}

// A cache miss: the node of the thunk on top of the stack below context (context itself when
// the top range is no thunk).
dctx_node resolve(const NvtxThread &t, dctx_node context) {
  g_lookups.fetch_add(1, std::memory_order_relaxed);
  const uint32_t d = t.depth < kDepth ? t.depth : kDepth;
  const StringInfo *top = find_string(t.stack[d - 1].handle);
  if (!top || top->kind != Kind::Thunk) return context;
  static const std::string none;
  const int m = module_index(t, d);
  const StringInfo *mod = m >= 0 ? find_string(t.stack[m].handle) : nullptr;
  const std::string &module = mod ? mod->a : none, &pid = mod ? mod->b : none;
  std::vector<uint32_t> chain;
  {
    std::lock_guard lock(g_mu);
    auto c = g_chains.find(chain_key(module, pid, top->a));
    if (c == g_chains.end()) c = g_chains.find(chain_key(module, "", top->a));
    if (c != g_chains.end()) {
      chain = c->second;
      g_sourced.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (chain.empty()) chain = fallback_chain(*top, module);
  dctx_node node = context;
  for (uint32_t f : chain) node = dctx_child(node, f);
  return node;
}

// The node for a launch inside the thunk on top of this thread's stack, below context.
dctx_node thunk_node(NvtxThread &t, dctx_node context, uint64_t generation) {
  const uint64_t top = t.stack[(t.depth < kDepth ? t.depth : kDepth) - 1].handle;
  if (top == 0) return context;
  NodeCache &c = thread_cache(t);
  if (c.generation != generation || c.slots.empty()) cache_reset(c, 256, generation);
  if (dctx_node *hit = cache_find(c, top, context)) {
    if (*hit != context) g_in_thunk.fetch_add(1, std::memory_order_relaxed);
    return *hit;
  }
  const dctx_node node = resolve(t, context);
  if (node != context) g_in_thunk.fetch_add(1, std::memory_order_relaxed);
  cache_put(c, top, context, node);
  return node;
}

// The launching thread's call path (a worker context when it runs no Python, e.g. a per-device
// thread of a multi-device jitted call).
dctx_node own_context() {
  dctx_node context = dctx_current();
  return context != 0 ? context : dctx_worker_context();
}

}  // namespace

const uint32_t kNvtxCallbacks[4] = {kPushEx, kPop, kRegisterStringA, kDomainCreateA};

void nvtx_register_string(uint64_t domain, uint64_t handle, const char *text) {
  if (!text || !handle) return;
  StringInfo info = parse(text);
  if (info.kind == Kind::Other) return;
  uint64_t expected = 0;
  g_xla_domain.compare_exchange_strong(expected, domain);
  std::lock_guard lock(g_mu);
  g_infos.push_back(std::make_unique<StringInfo>(std::move(info)));
  const StringTable *cur = g_table.load(std::memory_order_relaxed);
  StringTable *t = cur ? g_tables.back().get() : nullptr;
  if (!t || (t->used + 1) * 2 > t->mask + 1) {
    auto bigger = std::make_unique<StringTable>(t ? (t->mask + 1) * 2 : 4096);
    if (t)
      for (size_t i = 0; i <= t->mask; ++i)
        if (uint64_t k = t->keys[i].load(std::memory_order_relaxed))
          bigger->put(k, t->values[i].load(std::memory_order_relaxed));
    t = bigger.get();
    g_tables.push_back(std::move(bigger));
    t->put(handle, g_infos.back().get());
    g_table.store(t, std::memory_order_release);
  } else {
    t->put(handle, g_infos.back().get());
  }
  g_strings_n.fetch_add(1, std::memory_order_relaxed);
}

int nvtx_push(uint64_t domain, uint64_t handle) {
  if (domain != g_xla_domain.load(std::memory_order_relaxed) || domain == 0) {
    g_other.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  if (handle == 0) g_unregistered.fetch_add(1, std::memory_order_relaxed);
  NvtxThread &t = t_nvtx;
  if (t.depth < kDepth) t.stack[t.depth] = Range{handle, ++t.serial};
  g_pushes.fetch_add(1, std::memory_order_relaxed);
  return static_cast<int>(t.depth++);
}

int nvtx_pop(uint64_t domain) {
  if (domain != g_xla_domain.load(std::memory_order_relaxed) || domain == 0) return 0;
  NvtxThread &t = t_nvtx;
  if (t.depth == 0) return -1;
  return static_cast<int>(--t.depth);
}

void nvtx_set_xla_domain(uint64_t domain) { g_xla_domain.store(domain); }
void nvtx_count_injection() { g_injections.fetch_add(1, std::memory_order_relaxed); }

void nvtx_callback(uint32_t cbid, const void *nvtx_data) {
  const auto *data = static_cast<const NvtxData *>(nvtx_data);
  if (!data || !data->params) return;
  switch (cbid) {
    case kPushEx: {
      const auto *p = static_cast<const PushExParams *>(data->params);
      // A message that is not a registered string (ascii) keeps the stack balanced as 0.
      uint64_t handle = 0;
      if (p->attributes && p->attributes->message_type == kNvtxMessageRegistered)
        handle = reinterpret_cast<uint64_t>(p->attributes->message.registered);
      nvtx_push(reinterpret_cast<uint64_t>(p->domain), handle);
      break;
    }
    case kPop:
      nvtx_pop(reinterpret_cast<uint64_t>(static_cast<const PopParams *>(data->params)->domain));
      break;
    case kRegisterStringA: {
      const auto *p = static_cast<const RegisterStringParams *>(data->params);
      if (!data->return_value) break;
      const uint64_t handle =
          reinterpret_cast<uint64_t>(*static_cast<const void *const *>(data->return_value));
      nvtx_register_string(reinterpret_cast<uint64_t>(p->domain), handle, p->text);
      break;
    }
    case kDomainCreateA: {
      const auto *p = static_cast<const DomainCreateParams *>(data->params);
      if (p->name && std::strcmp(p->name, "TSL") == 0 && data->return_value) {
        const void *domain = *static_cast<const void *const *>(data->return_value);
        if (domain) nvtx_set_xla_domain(reinterpret_cast<uint64_t>(domain));
      }
      break;
    }
    default:
      break;
  }
}

dctx_node nvtx_context(dctx_node context) {
  NvtxThread &t = t_nvtx;
  if (t.depth == 0) return context;
  g_launches.fetch_add(1, std::memory_order_relaxed);
  return thunk_node(t, context, g_generation.load(std::memory_order_relaxed));
}

dctx_node nvtx_launch_context() {
  NvtxThread &t = t_nvtx;
  if (t.depth == 0) return own_context();
  g_launches.fetch_add(1, std::memory_order_relaxed);
  const uint64_t gen = g_generation.load(std::memory_order_relaxed);
  const uint32_t d = t.depth < kDepth ? t.depth : kDepth;
  dctx_node context;
  bool cached =
      t.ctx_generation == gen && t.ctx_index < d && t.stack[t.ctx_index].serial == t.ctx_serial;
  // ... and still the innermost module range (a host callback may run a module inside another).
  for (uint32_t i = t.ctx_index + 1; cached && i + 1 < d; ++i) {
    const StringInfo *s = find_string(t.stack[i].handle);
    if (s && s->kind == Kind::Module) cached = false;
  }
  if (cached) {
    context = t.ctx;
  } else {
    g_paths.fetch_add(1, std::memory_order_relaxed);
    context = own_context();
    const int m = module_index(t, d);
    if (m >= 0) {
      t.ctx = context;
      t.ctx_index = static_cast<uint32_t>(m);
      t.ctx_serial = t.stack[m].serial;
      t.ctx_generation = gen;
    }
  }
  return thunk_node(t, context, gen);
}

void nvtx_reset() {
  t_nvtx.depth = 0;
  // Nodes of an earlier session are not this session's: every thread's cache starts over.
  g_generation.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace dctx::gpu

extern "C" {

void dctx_cupti_hlo_module(const char *module, int64_t program_id, const char *rows) {
  using namespace dctx::gpu;
  if (!module || !rows) return;
  const std::string mod = module, pid = std::to_string(program_id);
  std::lock_guard lock(g_mu);
  std::string_view all(rows);
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\n', pos);
    if (end == std::string_view::npos) end = all.size();
    std::string_view row = all.substr(pos, end - pos);
    pos = end + 1;
    size_t tab = row.find('\t');
    if (tab == std::string_view::npos) continue;
    std::string op(row.substr(0, tab));
    std::vector<uint32_t> chain;
    std::string_view ids = row.substr(tab + 1);
    uint64_t v = 0;
    bool any = false;
    for (size_t i = 0; i <= ids.size(); ++i) {
      if (i < ids.size() && ids[i] >= '0' && ids[i] <= '9') {
        v = v * 10 + static_cast<uint64_t>(ids[i] - '0');
        any = true;
      } else {
        if (any) chain.push_back(static_cast<uint32_t>(v));
        v = 0;
        any = false;
      }
    }
    if (chain.empty()) continue;
    if (program_id > 0) g_chains[chain_key(mod, pid, op)] = chain;
    g_chains[chain_key(mod, "", op)] = std::move(chain);
  }
  g_generation.fetch_add(1, std::memory_order_relaxed);
}

void dctx_cupti_nvtx_stats(uint64_t *out) {
  using namespace dctx::gpu;
  out[0] = g_pushes.load();
  out[1] = g_strings_n.load();
  out[2] = g_launches.load();
  out[3] = g_in_thunk.load();
  out[4] = g_sourced.load();
}

uint32_t dctx_cupti_nvtx_counters(uint64_t *out, uint32_t n) {
  using namespace dctx::gpu;
  const uint64_t v[] = {g_pushes.load(),       g_strings_n.load(), g_launches.load(),
                        g_in_thunk.load(),     g_sourced.load(),   g_lookups.load(),
                        g_unregistered.load(), g_other.load(),     g_paths.load(),
                        g_injections.load()};
  const uint32_t count = static_cast<uint32_t>(sizeof v / sizeof v[0]);
  for (uint32_t i = 0; i < n && i < count; ++i) out[i] = v[i];
  return count;
}

void dctx_cupti_nvtx_replay_string(uint64_t domain, uint64_t handle, const char *text) {
  dctx::gpu::nvtx_register_string(domain, handle, text);
}
void dctx_cupti_nvtx_replay_push(uint64_t domain, uint64_t handle) {
  dctx::gpu::nvtx_push(domain, handle);
}
void dctx_cupti_nvtx_replay_pop(uint64_t domain) { dctx::gpu::nvtx_pop(domain); }
dctx_node dctx_cupti_nvtx_replay_context(dctx_node context) {
  return dctx::gpu::nvtx_context(context);
}
dctx_node dctx_cupti_nvtx_replay_launch(void) { return dctx::gpu::nvtx_launch_context(); }
void dctx_cupti_nvtx_replay_callback(uint32_t cbid, const void *nvtx_data) {
  dctx::gpu::nvtx_callback(cbid, nvtx_data);
}
uint64_t dctx_cupti_nvtx_replay_domain(void) {
  return dctx::gpu::g_xla_domain.load(std::memory_order_relaxed);
}

}  // extern "C"
