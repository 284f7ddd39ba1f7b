// The frame getter: which line of the user's code built each IR node.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

// ---- Source lines: which line of the user's code built each IR node ------------------
//
// With FLAGS_torch_lazy_ir_debug set, every new IR node asks GetPythonFramesFunction()
// for its frames and DumpUtil prints the first as `location=fn@file:line`. torch's own
// getter walks and formats the whole Python stack per node; this one stops at the
// innermost frame of the user's code and classifies each code object once (by a Python
// callback that knows lazyviz's rules), so a node costs a few pointer hops.
// On CPython 3.11 those hops are over the interpreter's own frames. Its public API makes
// a frame object for each frame it is asked about, and a held one has its locals copied
// out when its function returns: a tiny GPT-2's decode token on XLA (some 300 nodes)
// cost the script's thread 7-11% more with lines that way, 3-8% this way. Once the
// code objects and lines a node's walk meets are known, it runs without the GIL
// (WalkKnownFrames): 1,540 -> about 1,200 instructions a node.
enum FrameKind { kUserFrame = 0, kOtherFrame = 1, kStopFrame = 2 };

struct CodeEntry {
  int kind;
  std::string file;  // the trace's name for the file (a notebook cell reads "In [3]")
  std::string function;
};

// Changed only with the GIL held, read under g_codes_mu (on 3.11 a node whose code
// objects and lines are all known is walked without the GIL). Code objects are kept
// alive by the cache (one reference each) so an address is never reused for another.
py::object* g_classify = nullptr;
std::unordered_map<PyObject*, CodeEntry>* g_codes = nullptr;
std::function<std::vector<SourceLocation>()>* g_torch_frames = nullptr;  // restored when off
struct CodeLineHash {
  size_t operator()(const std::pair<PyObject*, int>& key) const {
    return std::hash<PyObject*>()(key.first) ^ (static_cast<size_t>(key.second) * 0x9e3779b97f4a7c15ULL);
  }
};
// (code object, instruction) -> line; its code objects are held by g_codes.
std::unordered_map<std::pair<PyObject*, int>, int, CodeLineHash>* g_lines = nullptr;
std::atomic<bool> g_source_lines{false};

// In front of g_codes, by the code object's address: a walk asks for some twenty code
// objects a node (a model's op is that far below the user's line), the same few
// thousand all run long. Entries point into g_codes (its
// elements never move) and are cleared with it.
struct RecentCode {
  PyObject* code = nullptr;
  const CodeEntry* entry = nullptr;
};
constexpr size_t kRecentCodes = 1024;
RecentCode g_recent_codes[kRecentCodes];
// Never held while waiting for the GIL or calling Python.
std::mutex g_codes_mu;

// Bumped when the caches are cleared: a walk kept (WalkMemo) from before is not used.
std::atomic<uint64_t> g_codes_epoch{1};

void ForgetCodes() {
  std::unordered_map<PyObject*, CodeEntry> forgotten;
  {
    std::lock_guard<std::mutex> lock(g_codes_mu);
    g_codes_epoch.fetch_add(1);
    g_lines->clear();
    forgotten.swap(*g_codes);
    for (RecentCode& recent : g_recent_codes) recent = RecentCode();
  }
  for (auto& [code, entry] : forgotten) Py_DECREF(code);  // may free one: no lock held
}

// g_codes_mu held. nullptr: not classified yet.
const CodeEntry* KnownCode(PyCodeObject* code) {
  PyObject* key = reinterpret_cast<PyObject*>(code);
  RecentCode& recent = g_recent_codes[(reinterpret_cast<uintptr_t>(code) >> 4) % kRecentCodes];
  if (recent.code == key) return recent.entry;
  auto found = g_codes->find(key);
  if (found == g_codes->end()) return nullptr;
  recent = RecentCode{key, &found->second};
  return &found->second;
}

// The GIL held: a new code object is classified by Python (without the lock, which a
// walk on another thread may be waiting for while Python switches threads).
const CodeEntry& ClassifyCode(PyCodeObject* code) {
  {
    std::lock_guard<std::mutex> lock(g_codes_mu);
    if (const CodeEntry* known = KnownCode(code)) return *known;
  }
  static const CodeEntry unknown{kOtherFrame, "", ""};
  CodeEntry entry{kOtherFrame, "", ""};
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // node creation never sees our errors
  bool classified = false;
  try {
    py::handle file(code->co_filename), name(code->co_name);
    py::tuple result = (*g_classify)(file, name);
    entry.kind = result[0].cast<int>();
    // Only the base name is ever printed (EmitShortFrameInfo): short names copy free.
    std::string label = result[1].cast<std::string>();
    size_t slash = label.find_last_of('/');
    entry.file = slash == std::string::npos ? label : label.substr(slash + 1);
    entry.function = name.cast<std::string>();
    classified = true;
  } catch (py::error_already_set& error) {
    if (error.matches(PyExc_Exception)) {
      error.discard_as_unraisable("lazyviz source lines");
    } else {
      KeepForScript(error);  // Ctrl-C landed in our callback: it is the script's
    }
  } catch (const std::exception&) {
  }
  PyErr_Restore(type, value, traceback);
  if (!classified) return unknown;  // asked again next time
  std::lock_guard<std::mutex> lock(g_codes_mu);
  PyObject* key = reinterpret_cast<PyObject*>(code);
  auto [kept, added] = g_codes->emplace(key, std::move(entry));  // another thread may have added it meanwhile
  if (added) Py_INCREF(code);
  g_recent_codes[(reinterpret_cast<uintptr_t>(code) >> 4) % kRecentCodes] = RecentCode{key, &kept->second};
  return kept->second;
}

// Without 3.11's frames (the public API's walk): one torch op builds several nodes from
// the same Python instruction, so the last walk's answer is kept with a reference to
// its innermost frame (so the address cannot be reused) and that frame's instruction. A
// live frame's callers cannot change under it, except a generator's, never cached. Released when the trace stops and at
// every execution (the frame's locals are not kept alive for long).
// g_users_dump: the user's LTC_SAVE_TENSORS_FILE dump is on, and lazyviz gave up its
// per-node lines for it; g_dump_decided: LTC has read that variable (its first sync
// with IR), or never will (PyTorch/XLA), so setting it later changes nothing.
std::atomic<bool> g_users_dump{false};
std::atomic<bool> g_dump_decided{false};
PyObject* g_last_frame = nullptr;
int g_last_lasti = -1;
std::vector<SourceLocation>* g_last_result = nullptr;

void ForgetLastFrame() {
  Py_CLEAR(g_last_frame);
  g_last_lasti = -1;
}

SourceLocation UserLocation(const CodeEntry& entry, PyCodeObject* code, int lasti, PyFrameObject* frame) {
  // The line table is scanned from its start on every lookup: cache per instruction.
  auto key = std::make_pair(reinterpret_cast<PyObject*>(code), lasti);
  std::lock_guard<std::mutex> lock(g_codes_mu);
  auto line = g_lines->find(key);
  if (line == g_lines->end()) {
#ifdef LAZYVIZ_INTERPRETER_FRAMES
    int number = PyCode_Addr2Line(code, lasti * static_cast<int>(sizeof(_Py_CODEUNIT)));  // as PyFrame_GetLineNumber
#else
    int number = PyFrame_GetLineNumber(frame);
#endif
    line = g_lines->emplace(key, number).first;
  }
  return SourceLocation{entry.file, entry.function, line->second};
}

#ifdef LAZYVIZ_INTERPRETER_FRAMES
// The calling thread's frames, innermost first, skipping those not started yet (as
// PyEval_GetFrame and PyFrame_GetBack do). The frames below ours cannot change while we
// run. With the GIL: a new code object is classified by Python.
std::vector<SourceLocation> WalkInterpreterFrames(PyThreadState* thread) {
  std::vector<SourceLocation> frames;
  for (_PyInterpreterFrame* frame = thread->cframe->current_frame; frame != nullptr; frame = frame->previous) {
    if (_PyFrame_IsIncomplete(frame)) continue;
    const CodeEntry& entry = ClassifyCode(frame->f_code);
    if (entry.kind == kUserFrame) {
      frames.push_back(UserLocation(entry, frame->f_code, _PyInterpreterFrame_LASTI(frame), nullptr));
    }
    if (entry.kind != kOtherFrame) break;
  }
  return frames;
}

// The same walk without the GIL, where every code object and line it meets is known
// (a loop's nodes, after its first round): false where one is not. Reads only this
// thread's frames (no other thread changes them), immutable fields of their code
// objects, and the caches under their lock. torch's bindings release the GIL around
// an op: taking it back was a third of a node's cost, and it waits while another
// thread (lazyviz's writer) runs Python.
//
// A walk's answer depends only on the code objects it met (their kinds never change
// until the caches are cleared) and the user frame's instruction. One aten op builds
// several nodes from the same instruction, and a model's op is some twenty frames below
// the user's line: the last two walks of each thread are kept by those, and a node whose
// frames are the same code objects, its user frame at the same instruction, takes the
// kept answer, comparing pointers only (no lock, no hash). A tiny GPT-2 on XLA walked 18
// frames a node: its line cost 710 instructions a node there, and 385 with the walks kept.
constexpr int kKeptDepth = 64;
struct WalkMemo {
  uint64_t epoch = 0;  // g_codes_epoch when kept; 0: nothing kept
  int depth = 0;       // the frames walked, the last the user's or a stop frame
  int last_lasti = -1;
  int top_lasti = -1;
  PyCodeObject* codes[kKeptDepth];
  std::vector<SourceLocation> answer;
};
thread_local WalkMemo t_walks[2];
thread_local int t_walk_next = 0;

bool SameWalk(const WalkMemo& memo, _PyInterpreterFrame* top) {
  int at = 0;
  _PyInterpreterFrame* last = nullptr;
  for (_PyInterpreterFrame* frame = top; frame != nullptr && at < memo.depth; frame = frame->previous) {
    if (_PyFrame_IsIncomplete(frame)) continue;
    if (frame->f_code != memo.codes[at++]) return false;
    last = frame;
  }
  return at == memo.depth && _PyInterpreterFrame_LASTI(last) == memo.last_lasti;
}

bool WalkKnownFrames(PyThreadState* thread, std::vector<SourceLocation>& frames) {
  _PyInterpreterFrame* top = thread->cframe->current_frame;
  while (top != nullptr && _PyFrame_IsIncomplete(top)) top = top->previous;
  if (top == nullptr) return true;
  uint64_t epoch = g_codes_epoch.load(std::memory_order_relaxed);
  int top_lasti = _PyInterpreterFrame_LASTI(top);
  for (const WalkMemo& memo : t_walks) {
    if (memo.epoch == epoch && memo.top_lasti == top_lasti && memo.codes[0] == top->f_code && SameWalk(memo, top)) {
      frames = memo.answer;
      return true;
    }
  }
  WalkMemo& memo = t_walks[t_walk_next];
  memo.epoch = 0;  // kept again below, where the walk ends at a user or stop frame
  int depth = 0;
  bool ended = false;
  std::lock_guard<std::mutex> lock(g_codes_mu);
  for (_PyInterpreterFrame* frame = top; frame != nullptr; frame = frame->previous) {
    if (_PyFrame_IsIncomplete(frame)) continue;
    const CodeEntry* entry = KnownCode(frame->f_code);
    if (entry == nullptr) return false;
    if (depth < kKeptDepth) memo.codes[depth] = frame->f_code;
    ++depth;
    if (entry->kind == kUserFrame) {
      auto line = g_lines->find(std::make_pair(reinterpret_cast<PyObject*>(frame->f_code), _PyInterpreterFrame_LASTI(frame)));
      if (line == g_lines->end()) return false;
      frames.push_back(SourceLocation{entry->file, entry->function, line->second});
    }
    if (entry->kind != kOtherFrame) {
      memo.last_lasti = _PyInterpreterFrame_LASTI(frame);
      ended = true;
      break;
    }
  }
  // A walk that ran off the stack's end is not kept: the same frames below more callers
  // may reach a user frame.
  if (ended && depth <= kKeptDepth) {
    memo.depth = depth;
    memo.top_lasti = top_lasti;
    memo.answer = frames;
    memo.epoch = epoch;
    t_walk_next ^= 1;
  }
  return true;
}
#else
std::vector<SourceLocation> WalkToUserFrame(PyFrameObject* frame) {
  std::vector<SourceLocation> frames;
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const CodeEntry& entry = ClassifyCode(code);
    Py_DECREF(code);  // still alive: the cache holds it
    if (entry.kind == kUserFrame) frames.push_back(UserLocation(entry, code, PyFrame_GetLasti(frame), frame));
    if (entry.kind != kOtherFrame) break;
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return frames;
}
#endif

// The innermost user frame of the calling Python thread, or nothing (a thread that
// never ran Python, such as autograd's device threads, has no frames to give).
// torch's own whole stack, without lazyviz's runner below the script (the frames the
// tracer's classifier calls stop frames): what an untraced `python script.py` shows.
std::vector<SourceLocation> TorchFramesWithoutRunner() {
  std::vector<SourceLocation> frames = (*g_torch_frames)();
  if (g_classify == nullptr || !Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return frames;
  PyGILState_STATE gil = PyGILState_Ensure();
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      py::object kind = (*g_classify)(frames[i].file, frames[i].function);
      if (py::cast<py::tuple>(kind)[0].cast<int>() == kStopFrame) {
        frames.resize(i);
        break;
      }
    }
  } catch (py::error_already_set& error) {
    error.discard_as_unraisable("lazyviz frame classifier");
  } catch (const std::exception&) {
  }
  PyGILState_Release(gil);
  return frames;
}

std::vector<SourceLocation> UserFrame() {
  if (g_users_dump.load()) return TorchFramesWithoutRunner();  // the dump's stack, as untraced
  PyThreadState* thread = g_source_lines.load() && Py_IsInitialized() ? PyGILState_GetThisThreadState() : nullptr;
  if (thread == nullptr) return {};
  if (!g_dump_decided.load() && std::getenv("LTC_SAVE_TENSORS_FILE") != nullptr) {
    // The user asked LTC for its dump (maybe at run time, as torch's test_debug_util
    // does). LTC reads the variable once, at the first sync with IR, and prints each
    // node's frames: nodes built from now on carry none, and the dump's stack is
    // torch's own, so the user's dump reads as it does untraced. This node's frames are
    // dropped too (an empty list).
    FLAGS_torch_lazy_ir_debug = false;
    g_source_lines.store(false);
    g_users_dump.store(true);
    return {};
  }
  std::vector<SourceLocation> frames;
#ifdef LAZYVIZ_INTERPRETER_FRAMES
  frames.reserve(1);  // a user's line, or none
  if (WalkKnownFrames(thread, frames)) return frames;
  frames.clear();
#endif
  PyGILState_STATE gil = PyGILState_Ensure();  // torch's bindings release it around ops
#ifdef LAZYVIZ_INTERPRETER_FRAMES
  if (g_source_lines.load()) frames = WalkInterpreterFrames(thread);
#else
  if (g_source_lines.load()) {
    PyFrameObject* frame = PyEval_GetFrame();
    int lasti = frame != nullptr ? PyFrame_GetLasti(frame) : -1;
    if (frame != nullptr && reinterpret_cast<PyObject*>(frame) == g_last_frame && lasti == g_last_lasti) {
      frames = *g_last_result;
    } else {
      frames = WalkToUserFrame(frame);
      // The old frame is released last: freeing it may run a __del__ that builds nodes
      // and comes back here, and must then find the new state complete.
      PyObject* released = g_last_frame;
      g_last_frame = nullptr;
      g_last_lasti = -1;
      if (frame != nullptr) {
        PyCodeObject* code = PyFrame_GetCode(frame);
        bool resumable = (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) != 0;
        Py_DECREF(code);
        if (!resumable) {
          if (g_last_result == nullptr) g_last_result = new std::vector<SourceLocation>();
          *g_last_result = frames;
          g_last_frame = reinterpret_cast<PyObject*>(frame);
          Py_INCREF(g_last_frame);
          g_last_lasti = lasti;
        }
      }
      Py_XDECREF(released);
    }
  }
#endif
  PyGILState_Release(gil);
  return frames;
}

}  // namespace
