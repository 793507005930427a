"""pprof's profile.proto, gzip-compressed (what `go tool pprof` reads).

Encoded here with a few lines of protobuf wire format (varints and length-delimited fields), so
no protobuf runtime is needed. One sample type per metric; one sample per node with an exclusive
value, its locations leaf first; one location and function per frame, the function named as in
the report (`train.py:42 step`) with its source file and line. pprof values are integers: each is
rounded in the metric's unit (nanoseconds, bytes, counts).
"""

from __future__ import annotations

import calendar
import gzip
import io
import time

import numpy as np

from ..render import Tree, frame_label, integral

UNITS = {"ns": "nanoseconds", "bytes": "bytes", "count": "count"}


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negative int64
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _field_varint(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v) if v else b""


def _field_bytes(num: int, data: bytes) -> bytes:
    return _varint((num << 3) | 2) + _varint(len(data)) + data


def _packed(num: int, values) -> bytes:
    body = b"".join(_varint(v) for v in values)
    return _field_bytes(num, body) if body else b""


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, s: str) -> int:
        return self.index.setdefault(s, len(self.index))


def encode(tree: Tree, metrics: list[str]) -> bytes:
    s = _Strings()
    parts: list[bytes] = []
    for m in metrics:
        unit = UNITS.get(tree.profile.metrics[m].unit, tree.profile.metrics[m].unit)
        parts.append(_field_bytes(1, _field_varint(1, s(m)) + _field_varint(2, s(unit))))
    frame = tree.frame.tolist()
    parent = tree.parent.tolist()
    loc_of: dict[int, int] = {}
    functions: list[bytes] = []
    locations: list[bytes] = []
    func_of: dict[tuple, int] = {}
    for fid in sorted(set(frame[1:])):
        f = tree.frames[fid]
        key = (frame_label(f), f.file)
        fn = func_of.get(key)
        if fn is None:
            fn = len(func_of) + 1
            func_of[key] = fn
            functions.append(
                _field_bytes(
                    5,
                    _field_varint(1, fn)
                    + _field_varint(2, s(key[0]))
                    + _field_varint(3, s(f.name))
                    + _field_varint(4, s(f.file)),
                )
            )
        loc = len(loc_of) + 1
        loc_of[fid] = loc
        line = _field_varint(1, fn) + _field_varint(2, f.line)
        locations.append(_field_bytes(4, _field_varint(1, loc) + _field_bytes(4, line)))
    cols = [tree.metrics[m].exc for m in metrics]
    samples: list[bytes] = []
    measured = np.zeros(len(tree), dtype=bool)
    for c in cols:
        measured |= c != 0
    measured[0] = False
    for node in np.flatnonzero(measured).tolist():
        vals = [integral(c[node], tree, m) for c, m in zip(cols, metrics, strict=True)]
        if not any(vals):
            continue
        stack = []
        n = node
        while n:
            stack.append(loc_of[frame[n]])
            n = parent[n]
        samples.append(_field_bytes(2, _packed(1, stack) + _packed(2, vals)))
    root_vals = [integral(c[0], tree, m) for c, m in zip(cols, metrics, strict=True)]
    if any(root_vals):
        # measured at the root itself (no frame): a sample with an empty stack
        samples.append(_field_bytes(2, _packed(2, root_vals)))
    parts += samples
    parts += locations
    parts += functions
    start = tree.profile.meta.get("start_time")
    stamp = 0
    if start:
        try:
            stamp = calendar.timegm(time.strptime(start[:19], "%Y-%m-%dT%H:%M:%S")) * 10**9
        except ValueError:
            stamp = 0
    table = [b""] * len(s.index)
    for text, i in s.index.items():
        table[i] = text.encode()
    parts += [_field_bytes(6, t) for t in table]
    parts.append(_field_varint(9, stamp))
    parts.append(_field_varint(14, s.index.get(metrics[0], 0)))
    return b"".join(parts)


def export(tree: Tree, metrics: list[str], out: io.BufferedIOBase) -> None:
    out.write(gzip.compress(encode(tree, metrics), mtime=0))
