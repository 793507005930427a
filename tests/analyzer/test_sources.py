"""The analyzer reads the source files a profile names: only regular files of a source file's size,
never blocking on a FIFO or reading a device without end."""

from __future__ import annotations

import os
import threading

from deepcontext.analyzer import sources


def test_loops_of_a_real_source_file(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("x = 0\nfor i in range(3):\n    x += i\nwhile x:\n    x -= 1\n")
    assert sources.loops(str(prog)) == ((2, 3), (4, 5))


def test_fifo_device_and_huge_files_are_not_read(tmp_path):
    fifo = tmp_path / "named.py"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.py"
    with open(huge, "wb") as fh:
        fh.truncate(sources.MAX_SOURCE_BYTES + 1)
    result = {}
    # A FIFO with no writer would block a plain open() for ever: run it aside and bound the wait.
    t = threading.Thread(
        target=lambda: result.update(
            {
                name: sources.loops(path)
                for name, path in [
                    ("fifo", str(fifo)),
                    ("zero", "/dev/zero"),
                    ("huge", str(huge)),
                    ("dir", str(tmp_path)),
                ]
            }
        ),
        daemon=True,
    )
    t.start()
    t.join(10)
    assert not t.is_alive(), "reading a FIFO or a device blocked"
    assert result == {"fifo": (), "zero": (), "huge": (), "dir": ()}
