"""--fork-children profile in a program without torch: every forked child (a multiprocessing
Process, the workers of a fork-start Pool ended by terminate() or by close(), a raw os.fork child
that leaves through os._exit) writes <output>.<pid>.dctx with its own samples."""

from __future__ import annotations

import json

import deepcontext
from program_helpers import run_deepcontext, write_program

PROGRAM = """
import json, multiprocessing as mp, os, time

def spin(seconds):
    t = time.process_time()
    x = 0
    while time.process_time() - t < seconds:
        x += 1

def parent_work():
    spin(0.3)

def process_child():
    spin(0.3)

def pool_task(i):
    spin(0.1)
    return os.getpid()

def fork_child():
    spin(0.3)

if __name__ == "__main__":
    parent_work()
    ctx = mp.get_context("fork")
    p = ctx.Process(target=process_child)
    p.start()
    p.join()
    with ctx.Pool(2) as pool:  # leaving the block terminates the workers (SIGTERM)
        terminated = sorted(set(pool.map(pool_task, range(4), chunksize=1)))
    pool = ctx.Pool(2)
    closed = sorted(set(pool.map(pool_task, range(4), chunksize=1)))
    pool.close()  # the workers finish and leave through os._exit
    pool.join()
    pid = os.fork()
    if pid == 0:
        fork_child()
        os._exit(0)
    os.waitpid(pid, 0)
    print(json.dumps({"process": [p.pid], "pool_terminated": terminated,
                      "pool_closed": closed, "fork": [pid]}))
"""

OWN_WORK = {
    "process": "process_child",
    "pool_terminated": "pool_task",
    "pool_closed": "pool_task",
    "fork": "fork_child",
}


def test_every_forked_child_writes_its_own_profile(tmp_path):
    prog = write_program(tmp_path, PROGRAM)
    out = tmp_path / "prog.dctx"
    proc = run_deepcontext(
        tmp_path, "-q", "--fork-children", "profile", "-o", str(out), str(prog), timeout=300
    )
    children = json.loads(proc.stdout)
    parent = deepcontext.load(out)
    assert parent.meta["complete"] == "1"
    assert sum(n.inclusive("cpu_time") for n in parent.find("parent_work")) > 0
    for how, pids in children.items():
        for pid in pids:
            path = tmp_path / f"prog.{pid}.dctx"
            assert path.exists(), (how, sorted(p.name for p in tmp_path.iterdir()))
            child = deepcontext.load(path)
            assert child.meta["pid"] == str(pid)
            own = child.find(OWN_WORK[how])
            assert sum(n.inclusive("cpu_time") for n in own) > 0, (how, pid)
            # the parent's samples from before the fork are not the child's
            assert sum(n.inclusive("cpu_time") for n in child.find("parent_work")) == 0, how
