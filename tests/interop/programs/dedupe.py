"""A pure-Python job whose hot spot is a known fix: de-duplicating with a list (quadratic).

INTEROP_FIXED=1 runs the fixed version (a set) through the same lines, so both profiles have the
same call paths and only the values move. INTEROP_STRAGGLE=1 adds extra work in `straggle` (the
merge tests' slow rank). The amount of work is fixed, not timed.
"""

import os

FIXED = os.environ.get("INTEROP_FIXED") == "1"
STRAGGLE = os.environ.get("INTEROP_STRAGGLE") == "1"


def parse(n):
    out = []
    for i in range(n):
        out.append(str(i * 7919 % 3001))
    return out


def dedupe(items):
    seen = set() if FIXED else []
    add = seen.add if FIXED else seen.append
    for x in items:
        if x not in seen:
            add(x)
    return len(seen)


def score(items, rounds):
    total = 0
    for _ in range(rounds):
        for x in items:
            total = (total * 31 + len(x)) % 1000003
    return total


def straggle(rounds):
    total = 0
    for i in range(rounds):
        total += i * i % 7
    return total


def main():
    items = parse(int(os.environ.get("INTEROP_ITEMS", "6000")))
    unique = dedupe(items)
    checksum = score(items, 40)
    if STRAGGLE:
        straggle(3_000_000)
    print(unique, checksum)


main()
