"""A small CPU-bound program for the GUI tests: `python work.py [a|b]`.

Variant b sorts four times as many strings per round as variant a, so diffing a b-profile
against an a-profile shows `sort_strings` grown (by far more than the 10 ms sampling's noise:
with twice as many, the diff came out negative in one run of the suite).
"""

import sys
import time

import tables  # noqa: F401  (import-time work: tables.py)


def square_sum(n):
    s = 0
    for i in range(n):
        s += i * i  # the hot line
    return s


def compute():
    t = 0
    for _ in range(20):
        t += square_sum(20000)
    return t


def sort_strings(k):
    return sorted(str(i) for i in range(30000 * k))


def main(variant):
    k = 4 if variant == "b" else 1
    end = time.process_time() + 0.8
    while time.process_time() < end:
        compute()
        sort_strings(k)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "a")
