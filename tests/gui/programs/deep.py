"""A program for the GUI's name-column and file-path tests: `python deep.py SITE_PACKAGES`.

Its hot path recurses 20 calls deep (long names far right in the tree tables), and it spends
time in the standard library (json's pure-Python encoder, used with indent) and in a package that
the test writes under a site-packages folder (`squares/core.py`), so the source view lists a file
of each kind.
"""

import json
import sys
import time

sys.path.insert(0, sys.argv[1])

from squares.core import square_sum  # noqa: E402  (needs the path above)


def descend_through_the_layers(depth):
    if depth:
        return descend_through_the_layers(depth - 1)
    end = time.process_time() + 0.4
    while time.process_time() < end:
        square_sum(20000)
        json.dumps([{"k": i} for i in range(2000)], indent=1)


if __name__ == "__main__":
    descend_through_the_layers(20)
