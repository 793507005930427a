"""`deepcontext run -- ./program` for native executables: the core preloaded, every thread
sampled with native frames, the program's exit status and signals kept."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import deepcontext
import pytest

SOURCE = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
__attribute__((noinline)) double heavy(long n) { double x = 0; for (long i = 0; i < n; i++) x += (double)i * 1e-9; return x; }
__attribute__((noinline)) double light(long n) { double x = 0; for (long i = 0; i < n; i++) x += (double)i * 2e-9; return x; }
static long scale;
/* The worker lingers after its work: a thread that has exited can no longer be read. */
void *worker(void *a) { (void)a; printf("%f\n", light(scale)); usleep(300000); return NULL; }
/* Started late (after the sampler's first look at the threads): prints the CPU time it used. */
void *late(void *a) {
  (void)a;
  printf("%f\n", light(scale));
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  printf("late cpu %ld\n", (long)ts.tv_sec * 1000000000L + ts.tv_nsec);
  fflush(stdout);
  usleep(300000);
  return NULL;
}
int main(int argc, char **argv) {
  scale = atol(argv[1]);
  if (argc > 3 && strcmp(argv[3], "late") == 0) {
    usleep(250000);
    pthread_t t;
    pthread_create(&t, NULL, late, NULL);
    pthread_join(t, NULL);
    return 0;
  }
  if (argc > 3) {  /* works until a signal ends it */
    volatile double sink = 0;
    printf("ready\n");
    fflush(stdout);
    for (long i = 0;; i++) sink += heavy(scale / 10 + (i & 1));  /* i: not hoisted as invariant */
  }
  pthread_t t;
  pthread_create(&t, NULL, worker, NULL);
  printf("%f\n", heavy(3 * scale));
  pthread_join(t, NULL);
  return atoi(argv[2]);
}
"""

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    (d / "spin.c").write_text(SOURCE)
    exe = d / "spin"
    subprocess.run(
        ["cc", "-O1", "-g", "-rdynamic", "-o", str(exe), str(d / "spin.c"), "-lpthread"], check=True
    )
    return exe


def _run(out, *argv, **kw):
    cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), "--", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def test_native_program_threads_and_functions(program, tmp_path):
    out = tmp_path / "spin.dctx"
    proc = _run(out, str(program), "150000000", "7")
    assert proc.returncode == 7, proc.stderr  # the program's exit status
    p = deepcontext.load(str(out))
    assert p.meta["complete"] == "1" and p.meta["program_kind"] == "native"
    cpu = {}
    for n in p.nodes():
        if n.frame.kind == "native" and n.frame.name in ("heavy", "light"):
            cpu[n.frame.name] = cpu.get(n.frame.name, 0) + n.exclusive("cpu_time")
    assert cpu.get("heavy", 0) > 0 and cpu.get("light", 0) > 0, cpu
    threads = {n.frame.name: n for n in p.root.children if n.frame.kind == "thread"}
    assert "MainThread" in threads and len(threads) >= 2, threads
    # heavy (main thread) does three times the work of light (the worker). Per thread, as a
    # sample whose unwinding timed out on a loaded machine stays on its thread's node.
    main_cpu = threads["MainThread"].inclusive("cpu_time")
    worker_cpu = sum(n.inclusive("cpu_time") for k, n in threads.items() if k != "MainThread")
    assert 2.0 <= main_cpu / worker_cpu <= 4.5, (main_cpu, worker_cpu)
    main = next(n for n in p.root.children if n.frame.name == "MainThread")
    assert any(n.frame.name == "main" for n in main.walk())
    assert not any(n.frame.name.startswith("dctx-") for n in p.root.children)


def test_thread_started_later_keeps_its_cpu_time(program, tmp_path):
    """A thread found by a later scan of the process's threads gets the CPU time it used before
    it was found (it started inside the profiled window), not only what it used after."""
    out = tmp_path / "late.dctx"
    proc = _run(out, str(program), "100000000", "0", "late")
    assert proc.returncode == 0, proc.stderr
    used = next(int(x.split()[-1]) for x in proc.stdout.splitlines() if x.startswith("late cpu"))
    p = deepcontext.load(str(out))
    workers = [
        n for n in p.root.children if n.frame.kind == "thread" and n.frame.name != "MainThread"
    ]
    got = sum(n.inclusive("cpu_time") for n in workers)
    # Sampling at 10 ms: within a couple of ticks of what the thread measured itself.
    assert got >= 0.8 * used - 20e6, (got, used)
    assert got <= 1.2 * used + 20e6, (got, used)


def test_native_program_sigterm_writes_the_profile(program, tmp_path):
    out = tmp_path / "term.dctx"
    cmd = [sys.executable, "-m", "deepcontext", "run", "-q", "-o", str(out), "--"]
    proc = subprocess.Popen(
        [*cmd, str(program), "100000000", "0", "wait"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().startswith("ready")  # the program now works in heavy()
    time.sleep(0.5)  # many sampler ticks, even on a loaded machine
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM  # the signal's default action, as unprofiled
    p = deepcontext.load(str(out))
    assert p.meta["complete"] == "1"
    assert any(n.frame.name == "heavy" for n in p.nodes())


def test_missing_program_is_one_line(tmp_path):
    proc = _run(tmp_path / "x.dctx", "no-such-program-here")
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "no such file" in proc.stderr
