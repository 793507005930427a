// Writes a tree snapshot as a .dctx SQLite profile (docs/format.md), atomically: the database is
// built in "<path>.tmp-<pid>" and renamed onto path.
#pragma once

#include <string>

#include "tree/cct.h"

namespace dctx {

// The CREATE TABLE statements of the format: the one definition, also used by the Python writer
// (deepcontext/writer.py, through _core.PROFILE_SCHEMA) and the C++ tests.
const char *profile_schema();

// Returns "" on success, else a one-line error.
std::string write_profile(const Snapshot &snap, const std::string &path);

}  // namespace dctx
