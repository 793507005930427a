"""A call path about 900 frames deep (deeper than json's and hatchet's recursion allows)."""

import time


def rec(d):
    if d == 0:
        t = time.process_time()
        while time.process_time() - t < 0.2:
            pass
        return
    rec(d - 1)


rec(900)
