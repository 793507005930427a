#include "recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace dctx::gpu {

namespace {

using Json = nlohmann::ordered_json;

uint64_t thread_id() { return static_cast<uint64_t>(syscall(SYS_gettid)); }

std::string text(const char *s) { return s ? s : ""; }

}  // namespace

std::string json_text(const Json &j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Recorder::Recorder(const char *path, DeviceQuery query)
    : file_(std::fopen(path, "w")), query_(std::move(query)) {}

Recorder::~Recorder() { close(); }

void Recorder::close() {
  std::lock_guard lock(mutex_);
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void Recorder::write_line(const Json &record) {
  if (!file_) return;
  const std::string line = json_text(record);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fputc('\n', file_);
}

Json Recorder::path(dctx_node node) {
  std::vector<dctx_frame> frames(64);
  size_t n = dctx_path(node, frames.data(), frames.size());
  if (n > frames.size()) {
    frames.resize(n);
    n = dctx_path(node, frames.data(), frames.size());
  }
  Json out = Json::array();
  for (size_t i = 0; i < n && i < frames.size(); ++i) {
    const dctx_frame &f = frames[i];
    out.push_back(Json::array(
        {static_cast<int>(f.kind), text(f.name), text(f.file), f.line, text(f.module)}));
  }
  return out;
}

void Recorder::api_enter(const std::string &name, int domain, uint32_t correlation, bool outermost,
                         dctx_node context, uint64_t now_ns) {
  Json line = {{"e", "api"},       {"api", name},         {"tid", thread_id()},
               {"domain", domain}, {"corr", correlation}, {"t", now_ns}};
  if (outermost) line["path"] = path(context);
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::api_exit(uint64_t now_ns, bool failed) {
  const Json line = {
      {"e", "exit"}, {"tid", thread_id()}, {"t", now_ns}, {"failed", failed ? 1 : 0}};
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::graph_node(uint64_t id, uint64_t original, bool with_context, dctx_node context) {
  Json line = {{"e", "graph_node"}, {"tid", thread_id()}, {"id", id}, {"original", original}};
  if (with_context) line["path"] = path(context);
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::window(bool open, uint64_t ts, uint32_t scale) {
  const Json line = {{"e", "window"}, {"open", open ? 1 : 0}, {"t", ts}, {"scale", scale}};
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::span(int mode) {
  const Json line = {{"e", "span"}, {"mode", mode}};
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::buffer(const dctx_gpu_activity *records, size_t count, uint64_t dropped) {
  Json list = Json::array();
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < count; ++i) {
    const dctx_gpu_activity &r = records[i];
    if (devices_.insert(r.device).second) {
      dctx_gpu_device d{};
      if (query_ && query_(r.device, &d))
        write_line({{"e", "device"},
                    {"name", text(d.name)},
                    {"ordinal", d.ordinal},
                    {"cc_major", d.cc_major},
                    {"cc_minor", d.cc_minor},
                    {"sm_count", d.sm_count},
                    {"max_threads_per_sm", d.max_threads_per_sm},
                    {"max_blocks_per_sm", d.max_blocks_per_sm},
                    {"regs_per_sm", d.regs_per_sm},
                    {"smem_per_sm", d.smem_per_sm},
                    {"reserved_smem_per_block", d.reserved_smem_per_block},
                    {"warp_size", d.warp_size},
                    {"clock_khz", d.clock_khz},
                    {"mem_clock_khz", d.mem_clock_khz},
                    {"total_mem", d.total_mem}});
    }
    list.push_back({{"kind", r.kind},
                    {"correlation", r.correlation},
                    {"start", r.start},
                    {"end", r.end},
                    {"device", r.device},
                    {"context", r.context},
                    {"stream", r.stream},
                    {"graph_id", r.graph_id},
                    {"graph_node", r.graph_node},
                    {"bytes", r.bytes},
                    {"copy_kind", r.copy_kind},
                    {"src_kind", r.src_kind},
                    {"dst_kind", r.dst_kind},
                    {"grid", {r.grid[0], r.grid[1], r.grid[2]}},
                    {"block", {r.block[0], r.block[1], r.block[2]}},
                    {"registers", r.registers},
                    {"static_smem", r.static_smem},
                    {"dynamic_smem", r.dynamic_smem},
                    {"name", text(r.name)}});
  }
  write_line({{"e", "buffer"}, {"dropped", dropped}, {"records", std::move(list)}});
  if (file_) std::fflush(file_);
}

}  // namespace dctx::gpu
