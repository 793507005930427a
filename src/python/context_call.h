// _core.ContextCall: calls a wrapped callable with the caller's context handed to the worker
// threads (context_call.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace dctx {
void bind_context_call(nanobind::module_ &m);
}
