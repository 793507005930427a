"""Exporters from a .dctx profile to other tools' formats, one module per format.

Each module has `export(tree, metrics, out)` writing to the binary file object `out`; `tree` is a
deepcontext.render.Tree and `metrics` the metric names to carry (the first is the main one for
formats that hold a single value per sample). Frames are named by render.frame_label, as in the
report.
"""

from __future__ import annotations

import importlib

FORMATS = {
    "hatchet": ("hatchet", ".json"),
    "pprof": ("pprof", ".pb.gz"),
    "speedscope": ("speedscope", ".speedscope.json"),
    "collapsed": ("collapsed", ".collapsed.txt"),
    "csv": ("csv_table", ".csv"),
    "chrome": ("chrome", ".trace.json"),
}


def exporter(fmt: str):
    return importlib.import_module(f"{__name__}.{FORMATS[fmt][0]}")


def suffix(fmt: str) -> str:
    return FORMATS[fmt][1]
