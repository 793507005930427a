"""A program killed before it finishes: it works, writes a checkpoint (deepcontext.flush(), as the
periodic checkpoint does), then dies by SIGKILL, as under the OOM killer. Its profile is the
checkpoint, which the GUI must flag as partial."""

import os
import signal
import time

import deepcontext


def spin():
    end = time.process_time() + 0.3
    s = 0
    while time.process_time() < end:
        s += sum(i * i for i in range(1000))
    return s


if __name__ == "__main__":
    spin()
    deepcontext.flush()
    os.kill(os.getpid(), signal.SIGKILL)
