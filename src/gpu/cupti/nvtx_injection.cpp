// Our own NVTX injection: with NVTX_INJECTION64_PATH naming this library (deepcontext.jax_support
// sets it before jax loads), each copy of NVTX in the process (XLA links its own) dlopens it and
// calls InitializeInjectionNvtx2, and we put our handlers into that copy's function table. XLA's
// pushes and pops then cost a call into nvtx.cpp's per-thread stack. With CUPTI as the injection
// instead, every push went through CUPTI's NVTX callback dispatch, which spun inside libcupti:
// 2 ms per step of a 0.07 ms JAX MLP step on an H200 (bench/jax_overhead.py --diagnose).
//
// Only what XLA uses is filled in (domain create, registered strings, push/pop with event
// attributes); every other NVTX call stays NVTX's no-op.
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "nvtx.h"

namespace {

// The injection ABI (nvtx3/nvtxDetail/nvtxTypes.h, NVTX v3): export table ids, callback
// modules, CORE2 slot ids and the callbacks export table. Mirrored so that the layer builds
// without the nvtx3 headers.
constexpr uint32_t kEtidCallbacks = 1;
constexpr uint32_t kModuleCore2 = 5;
constexpr unsigned kDomainRangePushEx = 4, kDomainRangePop = 5, kDomainRegisterStringA = 10,
                   kDomainCreateA = 12;
using FunctionPointer = void (*)();
using FunctionTable = FunctionPointer **;  // array of pointers to the function pointer slots
struct ExportTableCallbacks {
  size_t struct_size;
  int (*get_module_function_table)(uint32_t module, FunctionTable *out_table,
                                   unsigned int *out_size);
};
using GetExportTable = const void *(*)(uint32_t export_table_id);

// Domain and string handles are addresses of objects kept until exit: one per domain name and
// one per (domain, string), so registering the same string again returns the same handle and
// memory stays bounded by the distinct strings (XLA registers one per thunk and module).
std::mutex g_mu;
std::unordered_map<std::string, std::unique_ptr<std::string>> g_domains;
std::unordered_map<std::string, std::unique_ptr<std::string>> g_strings;

void *domain_create(const char *name) {
  const std::string key = name ? name : "";
  std::lock_guard lock(g_mu);
  auto &slot = g_domains[key];
  if (!slot) slot = std::make_unique<std::string>(key);
  if (key == "TSL") dctx::gpu::nvtx_set_xla_domain(reinterpret_cast<uint64_t>(slot.get()));
  return slot.get();
}

void *register_string(void *domain, const char *text) {
  if (!text) return nullptr;
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(domain));
  key += '\x1f';
  key += text;
  std::string *handle;
  bool fresh = false;
  {
    std::lock_guard lock(g_mu);
    auto &slot = g_strings[key];
    if (!slot) {
      slot = std::make_unique<std::string>(text);
      fresh = true;
    }
    handle = slot.get();
  }
  if (fresh)
    dctx::gpu::nvtx_register_string(reinterpret_cast<uint64_t>(domain),
                                    reinterpret_cast<uint64_t>(handle), text);
  return handle;
}

int range_push_ex(void *domain, const dctx::gpu::NvtxEventAttributes *attributes) {
  // A message that is not a registered string (ascii) keeps the stack balanced as 0.
  uint64_t handle = 0;
  if (attributes && attributes->message_type == dctx::gpu::kNvtxMessageRegistered)
    handle = reinterpret_cast<uint64_t>(attributes->message.registered);
  return dctx::gpu::nvtx_push(reinterpret_cast<uint64_t>(domain), handle);
}

int range_pop(void *domain) { return dctx::gpu::nvtx_pop(reinterpret_cast<uint64_t>(domain)); }

template <typename F>
void install(FunctionTable table, unsigned size, unsigned id, F *fn) {
  if (id < size && table[id]) *table[id] = reinterpret_cast<FunctionPointer>(fn);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    GetExportTable get_export_table) {
  if (!get_export_table) return 0;
  const auto *callbacks =
      static_cast<const ExportTableCallbacks *>(get_export_table(kEtidCallbacks));
  if (!callbacks || callbacks->struct_size < sizeof(ExportTableCallbacks) ||
      !callbacks->get_module_function_table)
    return 0;
  FunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks->get_module_function_table(kModuleCore2, &table, &size) || !table) return 0;
  install(table, size, kDomainCreateA, &domain_create);
  install(table, size, kDomainRegisterStringA, &register_string);
  install(table, size, kDomainRangePushEx, &range_push_ex);
  install(table, size, kDomainRangePop, &range_pop);
  dctx::gpu::nvtx_count_injection();
  return 1;
}
