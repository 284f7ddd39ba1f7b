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
// callback that knows lazyviz's rules), so a node costs a few pointer hops, and keeps a
// short reference to the line (Answer), put back where a graph's text is read.
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

// Bumped when the caches are cleared: a walk kept (KeptWalk) from before is not used.
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

// Each user line a walk answered, once, with the reference a node keeps for it: the
// location {"", "", kRefBase + n}, no line of a real file, turned back into file,
// function and line only where a graph's text is kept (DecodeLocations). A node's copy
// of a real location cost two string copies, and two heap blocks each where a name was
// longer than 15 characters; a reference's empty strings are made in place. Answers
// live as long as the process (a few hundred lines at most; cleared caches never free
// one), so a reference never dangles.
constexpr int kRefBase = 1000000000;
struct Answer {
  SourceLocation where;  // the user's line
  int ref;               // the line a node keeps: kRefBase + its number
};
std::unordered_map<std::string, std::unique_ptr<Answer>>* g_answers = nullptr;
std::vector<const Answer*>* g_answer_list = nullptr;  // by number

// g_codes_mu held.
const Answer* InternAnswer(const SourceLocation& where) {
  if (g_answers == nullptr) {
    g_answers = new std::unordered_map<std::string, std::unique_ptr<Answer>>();
    g_answer_list = new std::vector<const Answer*>();
  }
  std::string key = where.file + '\0' + where.function + '\0' + std::to_string(where.line);
  auto& kept = (*g_answers)[key];
  if (!kept) {
    kept = std::make_unique<Answer>(Answer{where, kRefBase + static_cast<int>(g_answer_list->size())});
    g_answer_list->push_back(kept.get());
  }
  return kept.get();
}

// A node's frames: its user line's reference, its strings empty.
void PushReference(std::vector<SourceLocation>& frames, const Answer* answer) {
  frames.emplace_back();
  frames.back().line = answer->ref;
}

// Frames with their user's line as references (g_codes_mu not held).
std::vector<SourceLocation> AsReferences(const std::vector<SourceLocation>& frames) {
  std::vector<SourceLocation> refs;
  refs.reserve(frames.size());
  std::lock_guard<std::mutex> lock(g_codes_mu);
  for (const SourceLocation& frame : frames) PushReference(refs, InternAnswer(frame));
  return refs;
}

// The text with each node reference put back as the line it stands for, in the two
// forms a reference is printed in: torch's IR text (`location=@:1000000007`, as
// EmitShortFrameInfo prints a location: function@file:line) and PyTorch/XLA's HLO
// metadata (`source_line=1000000007`, its empty file left out). A number this process
// never gave is left as it is.
std::string DecodeLocations(const std::string& text) {
  constexpr std::string_view kIr = "location=@:", kHlo = "source_line=";
  std::string out;
  size_t copied = 0;
  std::lock_guard<std::mutex> lock(g_codes_mu);
  // The next of each form, each found again only once passed (one pass over the text).
  size_t ir = text.find(kIr), hlo = text.find(kHlo);
  while (ir != std::string::npos || hlo != std::string::npos) {
    bool is_ir = ir < hlo;
    size_t found = is_ir ? ir : hlo;
    size_t digits = found + (is_ir ? kIr.size() : kHlo.size());
    size_t end = digits;
    while (end < text.size() && end - digits < 11 && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (is_ir) {
      ir = text.find(kIr, digits);
    } else {
      hlo = text.find(kHlo, digits);
    }
    if (end - digits != 10 || g_answer_list == nullptr) continue;
    int64_t number = std::stoll(text.substr(digits, end - digits)) - kRefBase;
    if (number < 0 || number >= static_cast<int64_t>(g_answer_list->size())) continue;
    const SourceLocation& where = (*g_answer_list)[number]->where;
    size_t slash = where.file.find_last_of('/');
    std::string file = where.file.substr(slash == std::string::npos ? 0 : slash + 1);
    if (out.empty()) out.reserve(text.size() + text.size() / 8);
    out.append(text, copied, found - copied);
    if (is_ir) {
      out += "location=" + where.function + "@" + file + ":" + std::to_string(where.line);
    } else {
      out += "source_file=\"" + file + "\" source_line=" + std::to_string(where.line);
    }
    copied = end;
  }
  if (copied == 0) return text;
  out.append(text, copied, std::string::npos);
  return out;
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
// until the caches are cleared) and the user frame's instruction. So each thread keeps
// its walks by the innermost frame's code object and instruction (a loop's ops come back
// to the same few hundred), and a node whose frames are the kept walk's code objects,
// the last at the same instruction, takes the kept answer: pointer compares only, no
// lock, no hash of its own. A model's op is some twenty frames below the user's line (a
// tiny GPT-2 on XLA walked 18 a node); its line cost 710 instructions a node walked with
// the lock, 385 with the thread's last two walks kept, and 174 kept this way (no walk
// done again in the loop: the last two had missed for every op a token called anew).
//
// The frames are compared as they are, not started ones included: a walk with one is
// not kept (torch's walk skips it), and one met later differs from the kept walk's
// frame at that place in its instruction, where that is the user's frame, or else is
// one of the frames the answer never depended on.
// Two ways a set: a loop's few hundred keys share a direct-mapped table's slots (1,024 of
// them left a tiny GPT-2's decode loop some 90 walks a token to do again).
constexpr size_t kKeptSets = 2048;  // 2^11: KeptSetOf takes a key's top 11 bits
struct KeptWalk {
  PyCodeObject* top_code = nullptr;
  int top_lasti = -1;
  int end_lasti = -1;                // the instruction of the frame the walk ended at
  uint64_t epoch = 0;                // g_codes_epoch when kept; 0: nothing kept
  std::vector<PyCodeObject*> below;  // the code objects of the top's callers, to the end frame
  const Answer* answer = nullptr;    // the user's line (interned), or none: a stop frame
};
struct KeptSet {
  KeptWalk ways[2];
  int newer = 0;  // the way kept or taken last: the other is replaced
};
struct ThreadWalks {
  KeptSet sets[kKeptSets];
};
// Trivially constructed, so reading it costs one thread-local lookup and no guard; the
// owner below frees a thread's walks when it ends.
thread_local ThreadWalks* t_walks = nullptr;
struct ThreadWalksOwner {
  ~ThreadWalksOwner() {
    delete t_walks;
    t_walks = nullptr;
  }
};

KeptSet& KeptSetOf(ThreadWalks* walks, PyCodeObject* code, int lasti) {
  // Fibonacci hashing: the product's top bits mix every bit of the code's address and instruction.
  uint64_t key = ((reinterpret_cast<uintptr_t>(code) >> 4) ^ (static_cast<uint64_t>(lasti) << 40)) * 0x9e3779b97f4a7c15ULL;
  return walks->sets[key >> (64 - 11)];
}

bool SameWalk(const KeptWalk& kept, _PyInterpreterFrame* top, int lasti, uint64_t epoch) {
  if (kept.top_code != top->f_code || kept.top_lasti != lasti || kept.epoch != epoch) return false;
  _PyInterpreterFrame* frame = top;
  for (PyCodeObject* code : kept.below) {
    frame = frame->previous;
    if (frame == nullptr || frame->f_code != code) return false;
  }
  return _PyInterpreterFrame_LASTI(frame) == kept.end_lasti;
}

// The kept walk these frames take, or nullptr.
const KeptWalk* KeptWalkFor(ThreadWalks* walks, _PyInterpreterFrame* top, uint64_t epoch) {
  int lasti = _PyInterpreterFrame_LASTI(top);
  KeptSet& set = KeptSetOf(walks, top->f_code, lasti);
  for (int way = 0; way < 2; ++way) {
    if (SameWalk(set.ways[way], top, lasti, epoch)) {
      set.newer = way;
      return &set.ways[way];
    }
  }
  return nullptr;
}

// refs: the node's form of a user line (Answer::ref), else the line itself.
bool WalkKnownFrames(PyThreadState* thread, std::vector<SourceLocation>& frames, bool refs) {
  _PyInterpreterFrame* top = thread->cframe->current_frame;
  if (top == nullptr) return true;
  uint64_t epoch = g_codes_epoch.load(std::memory_order_relaxed);
  ThreadWalks* walks = t_walks;
  if (walks != nullptr) {
    if (const KeptWalk* kept = KeptWalkFor(walks, top, epoch)) {
      if (kept->answer != nullptr) {
        frames.reserve(1);  // as many as it keeps: no growth on the way
        if (refs) {
          PushReference(frames, kept->answer);
        } else {
          frames.push_back(kept->answer->where);
        }
      }
      return true;
    }
  } else {
    static thread_local ThreadWalksOwner owner;
    (void)owner;
    walks = t_walks = new ThreadWalks();
  }
  std::vector<PyCodeObject*> below;
  below.reserve(32);
  bool keepable = true;
  _PyInterpreterFrame* end = nullptr;
  const Answer* answer = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_codes_mu);
    for (_PyInterpreterFrame* frame = top; frame != nullptr; frame = frame->previous) {
      if (frame != top) below.push_back(frame->f_code);
      if (_PyFrame_IsIncomplete(frame)) {
        keepable = false;
        continue;
      }
      const CodeEntry* entry = KnownCode(frame->f_code);
      if (entry == nullptr) return false;
      if (entry->kind == kUserFrame) {
        auto line = g_lines->find(std::make_pair(reinterpret_cast<PyObject*>(frame->f_code), _PyInterpreterFrame_LASTI(frame)));
        if (line == g_lines->end()) return false;
        answer = InternAnswer(SourceLocation{entry->file, entry->function, line->second});
        if (refs) {
          PushReference(frames, answer);
        } else {
          frames.push_back(answer->where);
        }
      }
      if (entry->kind != kOtherFrame) {
        end = frame;
        break;
      }
    }
  }
  // A walk that ran off the stack's end is not kept: the same frames below more callers
  // may reach a user frame.
  if (end != nullptr && keepable) {
    KeptSet& set = KeptSetOf(walks, top->f_code, _PyInterpreterFrame_LASTI(top));
    set.newer ^= 1;
    KeptWalk& kept = set.ways[set.newer];
    kept.top_code = top->f_code;
    kept.top_lasti = _PyInterpreterFrame_LASTI(top);
    kept.end_lasti = _PyInterpreterFrame_LASTI(end);
    kept.below = std::move(below);
    kept.answer = answer;
    kept.epoch = epoch;
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

// refs: each user line as the reference a node keeps for it (NodeFrames), else as itself.
template <bool refs>
std::vector<SourceLocation> UserFrames() {
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
  if (WalkKnownFrames(thread, frames, refs)) return frames;
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
  return refs && !frames.empty() ? AsReferences(frames) : frames;
}

// Nodes keep references (lazyviz reads every text that prints them), or the lines
// themselves: where the user's own XLA dump (--xla_dump_to) prints the nodes' lines.
std::atomic<bool> g_node_refs{true};

// The getter installed for every IR node: its user line, as a reference (Answer).
std::vector<SourceLocation> NodeFrames() {
  return g_node_refs.load(std::memory_order_relaxed) ? UserFrames<true>() : UserFrames<false>();
}
// The user's line itself (a `.to` noted for an upload).
std::vector<SourceLocation> UserFrame() { return UserFrames<false>(); }

}  // namespace
