"""The core's C API (include/deepcontext/monitor.h) through ctypes, for the Python layers that add
frames, nodes and metrics of their own (JAX's HLO ops and compilations, collectives) and for the
tests that replay recorded GPU traffic into the core."""

from __future__ import annotations

import ctypes


class Frame(ctypes.Structure):
    """struct dctx_frame."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("file", ctypes.c_char_p),
        ("line", ctypes.c_uint32),
        ("module", ctypes.c_char_p),
    ]


_lib: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """libdeepcontext.so (the one _core is linked to) with the signatures used from Python."""
    global _lib
    if _lib is None:
        from . import _core

        lib = ctypes.CDLL(_core.library_path())
        u32, text = ctypes.c_uint32, ctypes.c_char_p
        lib.dctx_frame_id.argtypes = [ctypes.POINTER(Frame)]
        lib.dctx_frame_id.restype = u32
        lib.dctx_child.argtypes = [u32, u32]
        lib.dctx_child.restype = u32
        lib.dctx_set_prop.argtypes = [u32, text, text]
        lib.dctx_set_prop.restype = None
        lib.dctx_worker_context.argtypes = []
        lib.dctx_worker_context.restype = u32
        lib.dctx_metric_id.argtypes = [text, text, text]
        lib.dctx_metric_id.restype = u32
        lib.dctx_add.argtypes = [u32, u32, ctypes.c_double]
        lib.dctx_add.restype = None
        lib.dctx_set_sample_weight.argtypes = [ctypes.c_double]
        lib.dctx_set_sample_weight.restype = None
        lib.dctx_commit_sampled.argtypes = [ctypes.c_double]
        lib.dctx_commit_sampled.restype = None
        _lib = lib
    return _lib
