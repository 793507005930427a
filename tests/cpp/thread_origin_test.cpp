// Naming threads by what started them: a std::thread started in a class's constructor and a raw
// pthread, each found through its descriptor by kernel thread id.
#include "collect/thread_origin.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};

pid_t wait_for(const std::atomic<pid_t> &tid) {
  while (tid.load() == 0) std::this_thread::yield();
  return tid.load();
}

}  // namespace

// Named (not anonymous) so that its std::thread state's vtable is an exported symbol.
namespace test_origin {

class BatchPrefetcher {
 public:
  BatchPrefetcher()
      : worker_([this] {
          tid_.store(static_cast<pid_t>(syscall(SYS_gettid)));
          while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }) {}
  ~BatchPrefetcher() { worker_.join(); }
  pid_t tid() const { return wait_for(tid_); }

 private:
  std::atomic<pid_t> tid_{0};
  std::thread worker_;
};

}  // namespace test_origin

namespace {

std::atomic<pid_t> g_raw_tid{0};

}  // namespace

extern "C" void *dctx_test_raw_worker(void *) {
  g_raw_tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return nullptr;
}

TEST(ThreadOrigin, NamesAStdThreadByItsCallableAndARawThreadByItsStartRoutine) {
  g_stop.store(false);
  pthread_t raw;
  ASSERT_EQ(pthread_create(&raw, nullptr, dctx_test_raw_worker, nullptr), 0);
  std::vector<std::string> names;
  {
    test_origin::BatchPrefetcher prefetcher;
    const pid_t main_tid = static_cast<pid_t>(syscall(SYS_gettid));
    names = dctx::thread_origins({prefetcher.tid(), wait_for(g_raw_tid), 999999999, main_tid});
    g_stop.store(true);
  }
  pthread_join(raw, nullptr);
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[0], "test_origin::BatchPrefetcher (core_tests)");
  EXPECT_EQ(names[1], "dctx_test_raw_worker (core_tests)");
  EXPECT_EQ(names[2], "");  // no such thread
  EXPECT_EQ(names[3], "");  // the main thread has no glibc descriptor at a stack's end
}
