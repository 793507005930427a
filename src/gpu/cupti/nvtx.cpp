// XLA's NVTX thunk ranges -> calling context of the kernels launched inside them (see nvtx.h).
#include "nvtx.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
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
struct EventAttributes {
  uint16_t version, size;
  uint32_t category;
  int32_t color_type;
  uint32_t color;
  int32_t payload_type, reserved0;
  uint64_t payload;
  int32_t message_type;  // 1 ascii, 2 unicode, 3 registered
  union {
    const char *ascii;
    const void *registered;
  } message;
};
struct PushExParams {
  const void *domain;
  const EventAttributes *attributes;
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
constexpr int32_t kMessageRegistered = 3;

enum class Kind : uint8_t { Other, Module, Thunk };
struct StringInfo {
  Kind kind = Kind::Other;
  std::string a;  // module: hlo_module; thunk: hlo_op
  std::string b;  // module: program_id; thunk: op_name (name=)
};

std::atomic<uint64_t> g_xla_domain{0};
std::shared_mutex g_mu;
std::unordered_map<uint64_t, StringInfo> g_strings;
std::unordered_map<std::string, std::vector<uint32_t>> g_chains;  // module\x1fpid\x1fop
std::atomic<uint64_t> g_generation{1};
std::atomic<uint64_t> g_pushes{0}, g_strings_n{0}, g_launches{0}, g_in_thunk{0}, g_sourced{0};

constexpr uint32_t kDepth = 64;
constexpr uint32_t kCache = 64;
struct Slot {
  uint64_t handle, generation;
  dctx_node context, node;
};
// Zero-initialised plain data: thread_local access needs no guard on the launch path.
struct NvtxThread {
  uint32_t depth;
  uint64_t stack[kDepth];
  Slot cache[kCache];
};
thread_local NvtxThread t_nvtx;

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

dctx_node resolve(const NvtxThread &t, dctx_node context) {
  const uint32_t d = t.depth < kDepth ? t.depth : kDepth;
  std::vector<uint32_t> chain;
  {
    std::shared_lock lock(g_mu);
    auto top = g_strings.find(t.stack[d - 1]);
    if (top == g_strings.end() || top->second.kind != Kind::Thunk) return context;
    std::string module, pid;
    for (uint32_t i = d - 1; i-- > 0;) {
      auto m = g_strings.find(t.stack[i]);
      if (m != g_strings.end() && m->second.kind == Kind::Module) {
        module = m->second.a;
        pid = m->second.b;
        break;
      }
    }
    const std::string &op = top->second.a;
    auto c = g_chains.find(chain_key(module, pid, op));
    if (c == g_chains.end()) c = g_chains.find(chain_key(module, "", op));
    if (c != g_chains.end()) {
      chain = c->second;
      g_sourced.fetch_add(1, std::memory_order_relaxed);
    } else {
      chain = fallback_chain(top->second, module);
    }
  }
  dctx_node node = context;
  for (uint32_t f : chain) node = dctx_child(node, f);
  return node;
}

}  // namespace

const uint32_t kNvtxCallbacks[4] = {kPushEx, kPop, kRegisterStringA, kDomainCreateA};

void nvtx_register_string(uint64_t domain, uint64_t handle, const char *text) {
  if (!text || !handle) return;
  StringInfo info = parse(text);
  if (info.kind == Kind::Other) return;
  uint64_t expected = 0;
  g_xla_domain.compare_exchange_strong(expected, domain);
  std::unique_lock lock(g_mu);
  g_strings[handle] = std::move(info);
  g_strings_n.fetch_add(1, std::memory_order_relaxed);
}

void nvtx_push(uint64_t domain, uint64_t handle) {
  if (domain != g_xla_domain.load(std::memory_order_relaxed) || domain == 0) return;
  NvtxThread &t = t_nvtx;
  if (t.depth < kDepth) t.stack[t.depth] = handle;
  ++t.depth;
  g_pushes.fetch_add(1, std::memory_order_relaxed);
}

void nvtx_pop(uint64_t domain) {
  if (domain != g_xla_domain.load(std::memory_order_relaxed) || domain == 0) return;
  NvtxThread &t = t_nvtx;
  if (t.depth > 0) --t.depth;
}

void nvtx_callback(uint32_t cbid, const void *nvtx_data) {
  const auto *data = static_cast<const NvtxData *>(nvtx_data);
  if (!data || !data->params) return;
  switch (cbid) {
    case kPushEx: {
      const auto *p = static_cast<const PushExParams *>(data->params);
      // A message that is not a registered string (ascii) keeps the stack balanced as 0.
      uint64_t handle = 0;
      if (p->attributes && p->attributes->message_type == kMessageRegistered)
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
        if (domain) g_xla_domain.store(reinterpret_cast<uint64_t>(domain));
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
  const uint64_t top = t.stack[(t.depth < kDepth ? t.depth : kDepth) - 1];
  if (top == 0) return context;
  const uint64_t gen = g_generation.load(std::memory_order_relaxed);
  Slot &slot = t.cache[(top * 0x9E3779B97F4A7C15ull ^ context) % kCache];
  if (slot.handle == top && slot.context == context && slot.generation == gen) {
    g_in_thunk.fetch_add(1, std::memory_order_relaxed);
    return slot.node;
  }
  const dctx_node node = resolve(t, context);
  if (node != context) g_in_thunk.fetch_add(1, std::memory_order_relaxed);
  slot = Slot{top, gen, context, node};
  return node;
}

void nvtx_reset() { t_nvtx.depth = 0; }

}  // namespace dctx::gpu

extern "C" {

void dctx_cupti_hlo_module(const char *module, int64_t program_id, const char *rows) {
  using namespace dctx::gpu;
  if (!module || !rows) return;
  const std::string mod = module, pid = std::to_string(program_id);
  std::unique_lock lock(g_mu);
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

}  // extern "C"
