#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#endif
#undef Py_BUILD_CORE

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "python_stack.h"
#include "tree/cct.h"

namespace dctx {
namespace {

struct CodeInfo {
  PyObject *name, *file;  // to detect a new code object at a reused address
  int firstlineno;
  uint32_t name_id, file_id;
  bool hidden;
  bool opener;  // a registered scope opener's file
};

std::mutex g_code_mu;
std::unordered_map<PyCodeObject *, CodeInfo> g_codes;
std::string g_hidden_prefix;
std::vector<std::string> g_openers;
// Bumped when the hidden prefix or the openers change: the threads' frame caches start over.
std::atomic<uint32_t> g_code_generation{1};

// UTF-8 of a str without creating objects (compact ASCII is used in place; else re-encoded here).
std::string utf8(PyObject *s) {
  if (!s || !PyUnicode_Check(s)) return "?";
  if (PyUnicode_IS_COMPACT_ASCII(s))
    return std::string(static_cast<const char *>(PyUnicode_DATA(s)), PyUnicode_GET_LENGTH(s));
  std::string out;
  int kind = PyUnicode_KIND(s);
  const void *data = PyUnicode_DATA(s);
  for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(s); ++i) {
    Py_UCS4 c = PyUnicode_READ(kind, data, i);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

bool is_hidden(const std::string &file) {
  if (!g_hidden_prefix.empty() && file.compare(0, g_hidden_prefix.size(), g_hidden_prefix) == 0)
    return true;
  if (file == "<frozen runpy>") return true;
  // the `deepcontext` console script that pip writes into the environment's bin/
  static const std::string script = "/bin/deepcontext";
  if (file.size() >= script.size() &&
      file.compare(file.size() - script.size(), script.size(), script) == 0)
    return true;
  static const std::string runpy = "runpy.py";
  return file.size() >= runpy.size() &&
         file.compare(file.size() - runpy.size(), runpy.size(), runpy) == 0 &&
         (file.size() == runpy.size() || file[file.size() - runpy.size() - 1] == '/');
}

bool is_opener(const std::string &file) {
  for (const std::string &suffix : g_openers) {
    if (file.size() >= suffix.size() &&
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  }
  return false;
}

PyObject *qualname(PyCodeObject *code) {
#if PY_VERSION_HEX >= 0x030B0000
  return code->co_qualname;
#else
  return code->co_name;
#endif
}

const CodeInfo &code_info(PyCodeObject *code) {
  auto it = g_codes.find(code);
  if (it != g_codes.end() && it->second.name == code->co_name &&
      it->second.file == code->co_filename && it->second.firstlineno == code->co_firstlineno)
    return it->second;
  if (g_codes.size() > 200000) g_codes.clear();  // bound: exec-heavy programs make many codes
  std::string file = utf8(code->co_filename);
  CodeInfo info{code->co_name,        code->co_filename,
                code->co_firstlineno, tree().intern(utf8(qualname(code))),
                tree().intern(file),  is_hidden(file),
                is_opener(file)};
  return g_codes.insert_or_assign(code, info).first->second;
}

}  // namespace

void set_hidden_prefix(const std::string &prefix) {
  static bool once = [] {
    // A thread walking its stack (no GIL: inside an operator) may hold the lock at fork. Lock
    // order, at run time and at fork: g_code_mu, then Tree::mu_ (capture_python interns and
    // adds frames while it holds g_code_mu). Prepare handlers run in the reverse order of their
    // registration, so the tree's is registered first (by tree()), and this one after it.
    (void)tree();
    pthread_atfork([] { g_code_mu.lock(); }, [] { g_code_mu.unlock(); },
                   [] { g_code_mu.unlock(); });
    return true;
  }();
  (void)once;
  std::lock_guard lock(g_code_mu);
  g_hidden_prefix = prefix;
  g_codes.clear();
  g_code_generation.fetch_add(1, std::memory_order_release);
}

void add_scope_opener(const std::string &suffix) {
  std::lock_guard lock(g_code_mu);
  for (const std::string &s : g_openers)
    if (s == suffix) return;
  g_openers.push_back(suffix);
  g_codes.clear();
  g_code_generation.fetch_add(1, std::memory_order_release);
}

_ts *current_python_thread() {
  if (!Py_IsInitialized()) return nullptr;
  return PyGILState_GetThisThreadState();
}

// The line of the instruction at byte offset addr. Artificial instructions (the jump back at the
// end of a loop body, where the eval loop checks for a GIL drop request and so where samples
// land) carry no line: take the nearest earlier instruction that has one, else the def line.
static int frame_line(PyCodeObject *code, int addr) {
  for (int a = addr, k = 0; a >= 0 && k < 64; a -= int(sizeof(_Py_CODEUNIT)), ++k) {
    int line = PyCode_Addr2Line(code, a);
    if (line > 0) return line;
  }
  return code->co_firstlineno;
}

size_t capture_python(_ts *ts, uint32_t *out, size_t max, bool drop_openers) {
  if (!ts) return 0;
  // Innermost-first walk into a local ring buffer, then reversed. A deeper stack keeps its
  // OUTERMOST kMax frames (the program's entry and main loop, which every path shares) and says so
  // once in the profile; kWalkLimit only bounds the walk of a damaged frame chain.
  constexpr size_t kMax = 512;
  constexpr size_t kWalkLimit = size_t{1} << 22;
  PyCodeObject *codes[kMax];
  int addrs[kMax];  // byte offset of the current instruction
  size_t n = 0;     // frames walked; frame j is at j % kMax
#if PY_VERSION_HEX >= 0x030D0000
  _PyInterpreterFrame *f = ts->current_frame;
  for (; f && n < kWalkLimit; f = f->previous) {
    if (f->owner == FRAME_OWNED_BY_CSTACK) continue;
    PyObject *ex = f->f_executable;
    if (!ex || !PyCode_Check(ex)) continue;
    PyCodeObject *code = reinterpret_cast<PyCodeObject *>(ex);
    int lasti = _PyInterpreterFrame_LASTI(f);
    if (lasti < 0) continue;
    codes[n % kMax] = code;
    addrs[n++ % kMax] = lasti * int(sizeof(_Py_CODEUNIT));
  }
#elif PY_VERSION_HEX >= 0x030B0000
  _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : nullptr;
  for (; f && n < kWalkLimit; f = f->previous) {
#if PY_VERSION_HEX >= 0x030C0000
    if (f->owner == FRAME_OWNED_BY_CSTACK) continue;
#endif
    if (_PyFrame_IsIncomplete(f)) continue;
    PyCodeObject *code = f->f_code;
    if (!code) continue;
    codes[n % kMax] = code;
    addrs[n++ % kMax] = _PyInterpreterFrame_LASTI(f) * int(sizeof(_Py_CODEUNIT));
  }
#else
  for (PyFrameObject *f = ts->frame; f && n < kWalkLimit; f = f->f_back) {
    codes[n % kMax] = f->f_code;
    addrs[n++ % kMax] = f->f_lasti * 2;
  }
#endif
  if (n > kMax) {
    // The outermost kMax frames, innermost first from index 0 (frame n - kMax is at n % kMax).
    std::rotate(codes, codes + n % kMax, codes + kMax);
    std::rotate(addrs, addrs + n % kMax, addrs + kMax);
    static std::atomic<bool> noted{false};
    if (!noted.exchange(true))
      tree().note("Python stacks deeper than " + std::to_string(kMax) +
                  " frames were cut to their " + std::to_string(kMax) +
                  " outermost (the first was " + std::to_string(n) + " deep)");
    n = kMax;
  }
  // Hot frames hit a per-thread cache: (code, instruction) -> frame id, with no lock, no line
  // table walk and no interning. The code's name and file objects are compared as in code_info,
  // so a new code object at a reused address misses.
  struct Slot {
    PyCodeObject *code;
    PyObject *name, *file;
    int addr;
    uint32_t frame;  // kHidden: a frame left out of paths
    uint32_t generation;
    bool opener;
  };
  constexpr size_t kSlots = 4096;
  constexpr uint32_t kHidden = UINT32_MAX;
  thread_local std::unique_ptr<Slot[]> cache(new Slot[kSlots]());
  const uint32_t generation = g_code_generation.load(std::memory_order_acquire);
  size_t written = 0;
  size_t before_openers = 0;  // written up to the innermost frame that is not an opener's
  std::unique_lock<std::mutex> lock(g_code_mu, std::defer_lock);
  for (size_t i = n; i-- > 0 && written < max;) {
    PyCodeObject *code = codes[i];
    const auto h = ((reinterpret_cast<uintptr_t>(code) >> 4) * 0x9E3779B97F4A7C15ULL) ^
                   static_cast<uintptr_t>(addrs[i]);
    Slot &slot = cache[(h ^ (h >> 29)) & (kSlots - 1)];
    if (slot.code != code || slot.addr != addrs[i] || slot.name != code->co_name ||
        slot.file != code->co_filename || slot.generation != generation) {
      if (!lock.owns_lock()) lock.lock();
      const CodeInfo &info = code_info(code);
      uint32_t frame = kHidden;
      if (!info.hidden) {
        const int line = frame_line(code, addrs[i]);
        frame = tree().frame(FrameKey{DCTX_FRAME_PYTHON, info.name_id, info.file_id,
                                      static_cast<uint32_t>(line), 0});
      }
      slot = Slot{code, code->co_name, code->co_filename, addrs[i], frame, generation, info.opener};
    }
    if (slot.frame == kHidden) continue;
    out[written++] = slot.frame;
    if (!slot.opener) before_openers = written;
  }
  return drop_openers ? before_openers : written;
}

}  // namespace dctx
