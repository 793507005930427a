// Reading a thread's Python stack into interned frame ids, without allocating Python objects,
// so it works at operator entry (where PyTorch has released the GIL) as well as from the sampler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct _ts;  // PyThreadState

namespace dctx {

// Writes frame ids outermost-first into out (at most max); returns the number written. The frames
// of deepcontext itself and of runpy are left out. ts must belong to a live thread that is either
// the caller or stopped at a point where its frame chain is consistent (the caller holds the GIL).
// drop_openers: the innermost run of frames from registered scope-opener files is left out (the
// code that opens a scope for its caller is not where the caller's work runs).
size_t capture_python(_ts *ts, uint32_t *out, size_t max, bool drop_openers = false);

// The calling thread's Python thread state, or nullptr if it runs no Python.
_ts *current_python_thread();

// File-name prefixes whose frames are hidden (our own package).
void set_hidden_prefix(const std::string &prefix);
// A file-name suffix whose frames open scopes on their caller's behalf (dctx_add_scope_opener).
void add_scope_opener(const std::string &suffix);

}  // namespace dctx
