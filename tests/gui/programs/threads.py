"""Two threads that work at the same time (tests/gui/test_browser.py): their wall times add up to
about twice the run's elapsed time, which the GUI's wall_time total must be, not their sum."""

import threading


def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def worker():
    for _ in range(3):
        spin(600_000)


if __name__ == "__main__":
    t = threading.Thread(target=worker, name="worker")
    t.start()
    for _ in range(3):
        spin(600_000)
    t.join()
