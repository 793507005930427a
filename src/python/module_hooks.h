// nn.Module forward hooks in C for the torch layer's module path frames (module_hooks.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace dctx {
void bind_module_hooks(nanobind::module_ &m);
}
