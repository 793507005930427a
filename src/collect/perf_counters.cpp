#include "perf_counters.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dctx {
namespace {
int open_counter(pid_t tid, uint64_t config) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = config;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}
uint64_t read_value(int fd) {
  uint64_t v = 0;
  if (fd < 0 || ::read(fd, &v, sizeof v) != sizeof v) return 0;
  return v;
}
}  // namespace

std::string ThreadCounters::open(pid_t tid) {
  fd_cycles = open_counter(tid, PERF_COUNT_HW_CPU_CYCLES);
  if (fd_cycles < 0) {
    int err = errno;
    return std::string("hardware counters (cycles, instructions) not recorded: perf_event_open: ") +
           std::strerror(err) +
           (err == EACCES || err == EPERM ? " (see /proc/sys/kernel/perf_event_paranoid)" : "");
  }
  fd_instructions = open_counter(tid, PERF_COUNT_HW_INSTRUCTIONS);
  last_cycles = read_value(fd_cycles);
  last_instructions = read_value(fd_instructions);
  return "";
}

void ThreadCounters::read(uint64_t *cycles, uint64_t *instructions) {
  uint64_t c = read_value(fd_cycles), i = read_value(fd_instructions);
  *cycles = c >= last_cycles ? c - last_cycles : 0;
  *instructions = i >= last_instructions ? i - last_instructions : 0;
  last_cycles = c;
  last_instructions = i;
}

void ThreadCounters::close() {
  if (fd_cycles >= 0) ::close(fd_cycles);
  if (fd_instructions >= 0) ::close(fd_instructions);
  fd_cycles = fd_instructions = -1;
}

}  // namespace dctx
