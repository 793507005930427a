#include "recorder.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

namespace dctx::gpu {

void append_json_string(std::string &out, const char *s) {
  out += '"';
  for (; s && *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

namespace {

void append_uint(std::string &out, const char *key, uint64_t v) {
  out += ", \"";
  out += key;
  out += "\": ";
  out += std::to_string(v);
}

void append_triple(std::string &out, const char *key, const int32_t v[3]) {
  out += ", \"";
  out += key;
  out += "\": [" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " +
         std::to_string(v[2]) + "]";
}

uint64_t thread_id() { return static_cast<uint64_t>(syscall(SYS_gettid)); }

}  // namespace

Recorder::Recorder(const char *path, DeviceQuery query)
    : file_(std::fopen(path, "w")), query_(std::move(query)) {}

Recorder::~Recorder() { close(); }

void Recorder::close() {
  std::lock_guard lock(mutex_);
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void Recorder::write_line(const std::string &line) {
  if (!file_) return;
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fputc('\n', file_);
}

void Recorder::write_path(std::string &out, dctx_node node) {
  std::vector<dctx_frame> frames(64);
  size_t n = dctx_path(node, frames.data(), frames.size());
  if (n > frames.size()) {
    frames.resize(n);
    n = dctx_path(node, frames.data(), frames.size());
  }
  out += ", \"path\": [";
  for (size_t i = 0; i < n && i < frames.size(); ++i) {
    const dctx_frame &f = frames[i];
    out += i ? ", [" : "[";
    out += std::to_string(static_cast<int>(f.kind)) + ", ";
    append_json_string(out, f.name);
    out += ", ";
    append_json_string(out, f.file);
    out += ", " + std::to_string(f.line) + ", ";
    append_json_string(out, f.module);
    out += "]";
  }
  out += "]";
}

void Recorder::api_enter(const std::string &name, int domain, uint32_t correlation, bool outermost,
                         dctx_node context, uint64_t now_ns) {
  std::string line = "{\"e\": \"api\", \"api\": ";
  append_json_string(line, name.c_str());
  append_uint(line, "tid", thread_id());
  append_uint(line, "domain", static_cast<uint64_t>(domain));
  append_uint(line, "corr", correlation);
  append_uint(line, "t", now_ns);
  if (outermost) write_path(line, context);
  line += "}";
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::api_exit(uint64_t now_ns, bool failed) {
  std::string line = "{\"e\": \"exit\"";
  append_uint(line, "tid", thread_id());
  append_uint(line, "t", now_ns);
  append_uint(line, "failed", failed ? 1 : 0);
  line += "}";
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::graph_node(uint64_t id, uint64_t original, bool with_context, dctx_node context) {
  std::string line = "{\"e\": \"graph_node\"";
  append_uint(line, "tid", thread_id());
  append_uint(line, "id", id);
  append_uint(line, "original", original);
  if (with_context) write_path(line, context);
  line += "}";
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::window(bool open, uint64_t ts, uint32_t scale) {
  std::string line = "{\"e\": \"window\"";
  append_uint(line, "open", open ? 1 : 0);
  append_uint(line, "t", ts);
  append_uint(line, "scale", scale);
  line += "}";
  std::lock_guard lock(mutex_);
  write_line(line);
}

void Recorder::buffer(const dctx_gpu_activity *records, size_t count, uint64_t dropped) {
  std::string devices;
  std::string line = "{\"e\": \"buffer\"";
  append_uint(line, "dropped", dropped);
  line += ", \"records\": [";
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < count; ++i) {
    const dctx_gpu_activity &r = records[i];
    if (devices_.insert(r.device).second) {
      dctx_gpu_device d{};
      if (query_ && query_(r.device, &d)) {
        std::string dl = "{\"e\": \"device\", \"name\": ";
        append_json_string(dl, d.name);
        append_uint(dl, "ordinal", d.ordinal);
        append_uint(dl, "cc_major", d.cc_major);
        append_uint(dl, "cc_minor", d.cc_minor);
        append_uint(dl, "sm_count", d.sm_count);
        append_uint(dl, "max_threads_per_sm", d.max_threads_per_sm);
        append_uint(dl, "max_blocks_per_sm", d.max_blocks_per_sm);
        append_uint(dl, "regs_per_sm", d.regs_per_sm);
        append_uint(dl, "smem_per_sm", d.smem_per_sm);
        append_uint(dl, "reserved_smem_per_block", d.reserved_smem_per_block);
        append_uint(dl, "warp_size", d.warp_size);
        append_uint(dl, "clock_khz", d.clock_khz);
        append_uint(dl, "mem_clock_khz", d.mem_clock_khz);
        append_uint(dl, "total_mem", d.total_mem);
        dl += "}";
        write_line(dl);
      }
    }
    line += i ? ", {\"kind\": " : "{\"kind\": ";
    line += std::to_string(r.kind);
    append_uint(line, "correlation", r.correlation);
    append_uint(line, "start", r.start);
    append_uint(line, "end", r.end);
    append_uint(line, "device", r.device);
    append_uint(line, "context", r.context);
    append_uint(line, "stream", r.stream);
    append_uint(line, "graph_id", r.graph_id);
    append_uint(line, "graph_node", r.graph_node);
    append_uint(line, "bytes", r.bytes);
    append_uint(line, "copy_kind", r.copy_kind);
    append_uint(line, "src_kind", r.src_kind);
    append_uint(line, "dst_kind", r.dst_kind);
    append_triple(line, "grid", r.grid);
    append_triple(line, "block", r.block);
    append_uint(line, "registers", r.registers);
    line += ", \"static_smem\": " + std::to_string(r.static_smem);
    line += ", \"dynamic_smem\": " + std::to_string(r.dynamic_smem);
    line += ", \"name\": ";
    append_json_string(line, r.name ? r.name : "");
    line += "}";
  }
  line += "]}";
  write_line(line);
  if (file_) std::fflush(file_);
}

}  // namespace dctx::gpu
