#include "thread_origin.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dctx {
namespace {

// Where glibc keeps what we need, relative to a descriptor (pthread_t is its address), and where
// the descriptor sits relative to the end of the stack mapping glibc allocated for the thread.
struct Layout {
  bool ok = false;
  size_t from_end = 0;  // mapping end - descriptor address
  size_t tid_off = 0, start_off = 0, arg_off = 0;
  bool self_first = false;  // the descriptor's first word is its own address (x86-64's tcbhead)
};

bool read_memory(uintptr_t addr, void *out, size_t n) {
  iovec local{out, n};
  iovec remote{reinterpret_cast<void *>(addr), n};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

// "lo-hi perms ..." of a /proc/self/maps line; perms points at the permission letters.
bool parse_mapping(const char *line, uintptr_t *lo, uintptr_t *hi, const char **perms) {
  char *end = nullptr;
  *lo = std::strtoul(line, &end, 16);
  if (end == line || *end != '-') return false;
  const char *second = end + 1;
  *hi = std::strtoul(second, &end, 16);
  if (end == second || *end != ' ') return false;
  *perms = end + 1;
  return *hi > *lo;
}

// The end of the mapping that holds addr, from /proc/self/maps; 0 if none.
uintptr_t mapping_end(uintptr_t addr) {
  FILE *f = std::fopen("/proc/self/maps", "re");
  if (!f) return 0;
  char line[512];
  uintptr_t end = 0;
  while (std::fgets(line, sizeof line, f)) {
    uintptr_t lo = 0, hi = 0;
    const char *perms = nullptr;
    if (parse_mapping(line, &lo, &hi, &perms) && addr >= lo && addr < hi) {
      end = hi;
      break;
    }
  }
  std::fclose(f);
  return end;
}

constexpr size_t kScan = 4096;  // a descriptor is about 2.3 KB on x86-64 glibc

struct Probe {
  Layout layout;
};

// Runs on a thread we start: finds its own tid, start routine and argument in its descriptor.
void *probe(void *arg) {
  auto *p = static_cast<Probe *>(arg);
  const auto self = reinterpret_cast<uintptr_t>(pthread_self());
  const uintptr_t end = mapping_end(self);
  if (end <= self) return nullptr;
  const size_t n = std::min(kScan, static_cast<size_t>(end - self)) & ~size_t{7};
  std::vector<unsigned char> buf(n);
  if (!read_memory(self, buf.data(), n)) return nullptr;
  const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  const auto start = reinterpret_cast<uintptr_t>(&probe);
  const auto given = reinterpret_cast<uintptr_t>(arg);
  Layout l;
  bool tid_found = false, start_found = false;
  for (size_t off = 0; off + sizeof(uintptr_t) * 2 <= n; off += sizeof(uintptr_t)) {
    uintptr_t a = 0, b = 0;
    std::memcpy(&a, &buf[off], sizeof a);
    std::memcpy(&b, &buf[off + sizeof a], sizeof b);
    if (!start_found && a == start && b == given) {
      l.start_off = off;
      l.arg_off = off + sizeof a;
      start_found = true;
    }
  }
  for (size_t off = 0; off + sizeof(pid_t) <= n && !tid_found; off += sizeof(pid_t)) {
    pid_t v;
    std::memcpy(&v, &buf[off], sizeof v);
    if (v == tid) {
      l.tid_off = off;
      tid_found = true;
    }
  }
  uintptr_t first = 0;
  std::memcpy(&first, buf.data(), sizeof first);
  l.self_first = first == self;
  l.from_end = end - self;
  l.ok = tid_found && start_found;
  p->layout = l;
  return nullptr;
}

const Layout &layout() {
  static const Layout l = [] {
    Probe p;
    pthread_t t;
    if (pthread_create(&t, nullptr, probe, &p) != 0) return Layout{};
    pthread_join(t, nullptr);
    return p.layout;
  }();
  return l;
}

std::string base_name(const char *path) {
  if (!path) return "";
  const char *slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string demangle(const char *sym) {
  int status = 0;
  char *d = abi::__cxa_demangle(sym, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : sym;
  std::free(d);
  return out;
}

// "vtable for std::thread::_State_impl<std::thread::_Invoker<std::tuple<c10::ThreadPool::
// ThreadPool(int, ...)::{lambda()#1}> > >" -> "c10::ThreadPool": the callable std::thread runs,
// cut at its argument list, a constructor written as its class.
std::string thread_callable(const std::string &vtable) {
  static constexpr std::string_view kTuple = "std::tuple<";
  size_t at = vtable.find(kTuple);
  if (at == std::string::npos) return "";
  std::string name = vtable.substr(at + kTuple.size());
  size_t cut = name.find_first_of("(<,");
  if (cut != std::string::npos) name.resize(cut);
  size_t last = name.rfind("::");
  if (last != std::string::npos && last > 0) {
    size_t prev = name.rfind("::", last - 1);
    std::string cls = name.substr(prev == std::string::npos ? 0 : prev + 2,
                                  last - (prev == std::string::npos ? 0 : prev + 2));
    if (cls == name.substr(last + 2)) name.resize(last);  // a constructor: its class
  }
  while (!name.empty() && name.back() == ' ') name.pop_back();
  return name;
}

}  // namespace

std::string describe_start_routine(const void *start_routine, const void *arg) {
  Dl_info info{};
  if (!start_routine || !dladdr(start_routine, &info) || !info.dli_fname) return "";
  const std::string lib = base_name(info.dli_fname);
  if (starts_with(lib, "libgomp") || starts_with(lib, "libiomp") || starts_with(lib, "libomp"))
    return "OpenMP worker (" + lib + ")";
  if (starts_with(lib, "libstdc++") && arg) {
    // std::thread: the argument is its state object, whose vtable names the callable and lives
    // in the library that started the thread.
    uintptr_t vtable = 0;
    Dl_info v{};
    if (read_memory(reinterpret_cast<uintptr_t>(arg), &vtable, sizeof vtable) && vtable != 0 &&
        dladdr(reinterpret_cast<const void *>(vtable), &v) && v.dli_fname) {
      const std::string owner = base_name(v.dli_fname);
      const std::string callable = v.dli_sname ? thread_callable(demangle(v.dli_sname)) : "";
      return (callable.empty() ? "std::thread" : callable) + " (" + owner + ")";
    }
    return "std::thread (" + lib + ")";
  }
  if (info.dli_sname && info.dli_saddr == start_routine)
    return demangle(info.dli_sname) + " (" + lib + ")";
  return "thread of " + lib;
}

std::vector<std::string> thread_origins(const std::vector<pid_t> &tids) {
  std::vector<std::string> out(tids.size());
  const Layout &l = layout();
  if (!l.ok || tids.empty()) return out;
  std::unordered_map<pid_t, size_t> wanted;
  for (size_t i = 0; i < tids.size(); ++i) wanted[tids[i]] = i;
  // Each writable mapping large enough could end with a descriptor: the one holding the tid is.
  FILE *f = std::fopen("/proc/self/maps", "re");
  if (!f) return out;
  char line[512];
  size_t left = wanted.size();
  while (left > 0 && std::fgets(line, sizeof line, f)) {
    uintptr_t lo = 0, hi = 0;
    const char *perms = nullptr;
    if (!parse_mapping(line, &lo, &hi, &perms) || perms[0] != 'r' || perms[1] != 'w' ||
        hi - lo < l.from_end)
      continue;
    const uintptr_t desc = hi - l.from_end;
    uintptr_t first = 0;
    if (l.self_first && (!read_memory(desc, &first, sizeof first) || first != desc)) continue;
    pid_t tid = 0;
    if (!read_memory(desc + l.tid_off, &tid, sizeof tid)) continue;
    auto it = wanted.find(tid);
    if (it == wanted.end() || !out[it->second].empty()) continue;
    uintptr_t start = 0, arg = 0;
    if (!read_memory(desc + l.start_off, &start, sizeof start) ||
        !read_memory(desc + l.arg_off, &arg, sizeof arg))
      continue;
    out[it->second] = describe_start_routine(reinterpret_cast<const void *>(start),
                                             reinterpret_cast<const void *>(arg));
    if (!out[it->second].empty()) --left;
  }
  std::fclose(f);
  return out;
}

}  // namespace dctx
