// Forking while another thread captures Python stacks must not deadlock in the pthread_atfork
// handlers: capture_python holds the code cache lock while it interns into the tree, so the fork
// handlers must take the locks in that order too (python_stack.cpp, set_hidden_prefix). Its own
// executable: the order of registration is what is tested, and it must happen here first, with
// set_hidden_prefix before any other use of the tree.
#include <Python.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "context/python_stack.h"

namespace {

std::atomic<bool> g_stop{false};

// cap(): one capture of the calling thread's Python stack; False once the test is over.
PyObject *cap(PyObject *, PyObject *) {
  uint32_t frames[64];
  dctx::capture_python(reinterpret_cast<_ts *>(PyThreadState_Get()), frames, 64);
  return PyBool_FromLong(!g_stop.load());
}
PyMethodDef g_cap{"cap", cap, METH_NOARGS, nullptr};

// The whole scenario, in a child process that the test can bound in time.
int forks_while_capturing() {
  dctx::set_hidden_prefix("/nonexistent/");  // registers its fork handlers first
  Py_Initialize();
  PyObject *main = PyImport_AddModule("__main__");
  PyObject *fn = PyCFunction_New(&g_cap, nullptr);
  PyDict_SetItemString(PyModule_GetDict(main), "cap", fn);
  Py_DECREF(fn);
  PyThreadState *saved = PyEval_SaveThread();
  std::thread capturer([] {
    PyGILState_STATE g = PyGILState_Ensure();
    PyRun_SimpleString("def a():\n    while cap():\n        pass\na()\n");
    PyGILState_Release(g);
  });
  // Each new prefix empties the code cache: every capture interns its frames again.
  std::thread invalidator([] {
    while (!g_stop.load()) dctx::set_hidden_prefix("/nonexistent/");
  });
  for (int i = 0; i < 2000; ++i) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    if (pid < 0) return 2;
    int status = 0;
    waitpid(pid, &status, 0);
  }
  g_stop = true;
  capturer.join();
  invalidator.join();
  PyEval_RestoreThread(saved);
  return 0;
}

TEST(ForkOrder, ForkingWhileAnotherThreadCapturesDoesNotDeadlock) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(forks_while_capturing());
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "a fork deadlocked in the atfork handlers";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
