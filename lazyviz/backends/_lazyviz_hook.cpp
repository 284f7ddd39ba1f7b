// lazyviz's hook into torch's lazy core: a BackendImplInterface that forwards
// every call to the backend already registered and reports each graph execution
// to Python. Checked on torch 2.13.0 (torch/csrc/lazy/backend/backend_interface.h).
//
// Why a backend wrapper: the lazy core has no Python hook per sync, but every
// execution (mark_step, .item(), an eager fallback) goes through
// ExecuteComputation, and every cache miss through CreateLoweringContext with the
// graph's post order: so each distinct graph is formatted once, on its miss.
#include <torch/extension.h>
#include <torch/csrc/lazy/backend/backend_interface.h>
#include <torch/csrc/lazy/core/config.h>
#include <torch/csrc/lazy/core/debug_util.h>
#include <torch/csrc/lazy/core/ir_dump_util.h>
#include <torch/csrc/lazy/core/ir_metadata.h>
#include <torch/csrc/lazy/core/ir_util.h>
#include <torch/csrc/lazy/core/metrics.h>
#include <torch/csrc/lazy/core/tensor.h>
#include <frameobject.h>
#include <structmember.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string_view>
#include <tuple>
#include <typeinfo>
#include <vector>
#include <unordered_map>
#include <unordered_set>
#include <unistd.h>  // environ

namespace py = pybind11;
using namespace torch::lazy;

namespace {

// A KeyboardInterrupt or SystemExit raised while our Python callback ran (a signal
// handler runs wherever Python code runs) belongs to the script. Throwing it through
// torch's executor would poison the device lock's status, so it is kept here and
// raised again by the interpreter at its next check, as a signal would be. Touched
// only with the GIL held.
PyObject* g_pending_type = nullptr;
PyObject* g_pending_value = nullptr;
PyObject* g_pending_traceback = nullptr;

int RaisePending(void*) {
  if (g_pending_type == nullptr) return 0;
  PyErr_Restore(g_pending_type, g_pending_value, g_pending_traceback);
  g_pending_type = g_pending_value = g_pending_traceback = nullptr;
  return -1;
}

void KeepForScript(py::error_already_set& error) {
  Py_XDECREF(g_pending_type);
  Py_XDECREF(g_pending_value);
  Py_XDECREF(g_pending_traceback);
  error.restore();
  PyErr_Fetch(&g_pending_type, &g_pending_value, &g_pending_traceback);
  Py_AddPendingCall(&RaisePending, nullptr);
}

double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}


// ---- Source lines: which line of the user's code built each IR node ------------------
//
// With FLAGS_torch_lazy_ir_debug set, every new IR node asks GetPythonFramesFunction()
// for its frames and DumpUtil prints the first as `location=fn@file:line`. torch's own
// getter walks and formats the whole Python stack per node; this one stops at the
// innermost frame of the user's code and classifies each code object once (by a Python
// callback that knows lazyviz's rules), so a node costs a few pointer hops.
enum FrameKind { kUserFrame = 0, kOtherFrame = 1, kStopFrame = 2 };

struct CodeEntry {
  int kind;
  std::string file;  // the trace's name for the file (a notebook cell reads "In [3]")
  std::string function;
};

// Touched only with the GIL held. Code objects are kept alive by the cache (one
// reference each) so an address is never reused for another code object.
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

const CodeEntry& ClassifyCode(PyCodeObject* code) {
  auto found = g_codes->find(reinterpret_cast<PyObject*>(code));
  if (found != g_codes->end()) return found->second;
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
  Py_INCREF(code);
  return g_codes->emplace(reinterpret_cast<PyObject*>(code), std::move(entry)).first->second;
}

// One torch op builds several nodes from the same Python instruction: the last walk's
// answer is kept with a reference to its innermost frame (so the address cannot be
// reused) and that frame's instruction. A live frame's callers cannot change under it,
// except a generator's, which is never cached. Released when the trace stops and at
// every execution (the frame's locals are not kept alive for long).
// g_users_dump: the user's LTC_SAVE_TENSORS_FILE dump is on, and lazyviz gave up its
// per-node lines for it; g_dump_decided: LTC has read that variable (its first sync
// with IR), so setting it later changes nothing.
std::atomic<bool> g_users_dump{false};
std::atomic<bool> g_dump_decided{false};
PyObject* g_last_frame = nullptr;
int g_last_lasti = -1;
std::vector<SourceLocation>* g_last_result = nullptr;

void ForgetLastFrame() {
  Py_CLEAR(g_last_frame);
  g_last_lasti = -1;
}

std::vector<SourceLocation> WalkToUserFrame(PyFrameObject* frame) {
  std::vector<SourceLocation> frames;
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const CodeEntry& entry = ClassifyCode(code);
    Py_DECREF(code);  // still alive: the cache holds it
    if (entry.kind == kUserFrame) {
      // The line table is scanned from its start on every lookup: cache per instruction.
      auto key = std::make_pair(reinterpret_cast<PyObject*>(code), PyFrame_GetLasti(frame));
      auto line = g_lines->find(key);
      if (line == g_lines->end()) line = g_lines->emplace(key, PyFrame_GetLineNumber(frame)).first;
      frames.push_back(SourceLocation{entry.file, entry.function, line->second});
    }
    if (entry.kind != kOtherFrame) break;
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return frames;
}

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
  if (!g_source_lines.load() || !Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) {
    return {};
  }
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
  PyGILState_STATE gil = PyGILState_Ensure();  // torch's bindings release it around ops
  std::vector<SourceLocation> frames;
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
  PyGILState_Release(gil);
  return frames;
}

// ---- The calling stack's signature: lets Python repeat a recorded execution's row ------
//
// A hash of every frame's (code object, instruction) on the calling thread, and of the
// test pytest says is running: equal signatures mean the same stack, the same lines and
// the same test, so the tracer may reuse the row it built the first time instead of
// walking the stack in Python again. Each code object seen is kept alive (one
// reference) so its address is never reused by another while a signature names it.
std::unordered_set<PyObject*>* g_signed_codes = nullptr;

uint64_t Mix(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
  return hash;
}

// getenv("PYTEST_CURRENT_TEST") without scanning the whole environment per execution
// (0.3 us here): where it was found, or how long the environment was when it was not,
// checked against what setenv/unsetenv change (an entry, or the array and its length).
const char* PytestTest() {
  static constexpr char kName[] = "PYTEST_CURRENT_TEST=";
  static constexpr size_t kLength = sizeof(kName) - 1;
  static char** array = nullptr;
  static size_t index = 0;  // where it was; or, when not found, the environment's length
  static bool found = false;
  // unsetenv shifts the entries after the one it removes down, and the slots it leaves
  // stay null: reading the old index is always inside the array.
  auto is_test = [](const char* entry) { return entry != nullptr && std::strncmp(entry, kName, kLength) == 0; };
  if (environ == array && array != nullptr) {
    if (found && is_test(array[index])) return array[index] + kLength;
    if (!found && array[index] == nullptr && (index == 0 || array[index - 1] != nullptr)) return nullptr;
  }
  array = environ;
  found = false;
  for (index = 0; array != nullptr && array[index] != nullptr; ++index) {
    if (is_test(array[index])) {
      found = true;
      return array[index] + kLength;
    }
  }
  return nullptr;
}

uint64_t StackSignature() {
  if (g_signed_codes == nullptr) g_signed_codes = new std::unordered_set<PyObject*>();
  uint64_t hash = 0xcbf29ce484222325ULL;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  while (frame != nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (g_signed_codes->insert(reinterpret_cast<PyObject*>(code)).second) {
      Py_INCREF(code);  // kept: see above
    }
    hash = Mix(Mix(hash, reinterpret_cast<uintptr_t>(code)), static_cast<uint64_t>(PyFrame_GetLasti(frame)));
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  if (const char* test = PytestTest()) {
    hash = Mix(hash, std::hash<std::string_view>()(std::string_view(test)));
  }
  return hash;
}

// ---- Repeated rows: a steady loop's cache hits recorded without calling Python -------
//
// The first hit of a compiled computation from a site goes to Python, which records it
// and answers with its row's kind and whether later hits from there repeat it. A site is
// the stack (signature above), the sync cause running, and the fallback execution it
// follows from the same stack, if any (one fallback op can force several executions: the
// later ones are the fallback's too). Such a hit, with the same counters moving by the
// same amounts, is then only a row appended here: index, step, kind and times, in the
// trace's own layout, which the writer takes once per commit window. Everything here is
// touched with the GIL held.
struct Row {  // one `executions` row (ROW_FIELDS), as take_rows() hands it out
  int64_t idx, step, kind;
  double sync_ms, trace_ms, compile_ms, execute_ms, start_ms;
};
static_assert(sizeof(Row) == 64, "take_rows() hands out 64-byte rows");

// Counters that moved, by how much. A name is the arena's own key: its counters are
// never removed (a reset zeroes them), so the address stays its name's and compares fast.
using Moves = std::vector<std::pair<const std::string*, int64_t>>;

struct RepeatOf {
  int64_t kind;
  Moves moved;
  bool fallback;  // a fallback op's row: the next execution from this stack follows it
};

struct Repeats {
  py::object counts_owner;        // the tracer's array('q', [executions, steps completed])
  std::unique_ptr<py::buffer_info> counts_view;  // held: the array cannot be resized under us
  int64_t* counts = nullptr;
  double clock_offset_s = 0;      // steady clock + offset = the tracer's clock (time.perf_counter)
  double started_s = 0;           // the tracer's start, on its clock
  double last_end_s = NAN;        // the previous execution's end; NaN before the first
  uint64_t fallback_stack = 0;    // the previous execution, when a fallback's: its stack and kind
  int64_t fallback_kind = -1;
  size_t size = 0;
  std::unordered_map<uint64_t, std::unordered_map<const Computation*, RepeatOf>> by_site;
  std::unordered_set<PyObject*> kept;  // causes mixed into signatures: their ids stay theirs
  std::vector<Row> rows;

  ~Repeats() {
    for (PyObject* value : kept) Py_DECREF(value);
  }
};
Repeats* g_repeats = nullptr;
constexpr size_t kMaxRepeats = 100000;  // a script with more distinct stacks takes the slow path

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- Sync sites: which call forced an execution ---------------------------------------
//
// mark_step(), .item(), print(tensor)... are wrapped by SyncSite objects: C callables, so
// a wrapped call adds no Python frame and no dict lookups (the tiny-step loop calls
// mark_step 10^5 times). While one runs, this thread's cause is its strings (borrowed:
// the wrapper holds them for as long as it runs). The outermost call wins: print calls
// item, and only print is the user's.
thread_local PyObject* t_cause = nullptr;
thread_local PyObject* t_detail = nullptr;

struct SyncSiteObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* original;
  PyObject* cause;
  PyObject* detail;
  PyObject* counts;  // the tracer's array('q', [executions, steps]): live while it records
  PyObject* dict;    // functools.update_wrapper's __name__, __doc__, __wrapped__...
  bool ends_step;
  bool empty_sync_ends_step;
};

PyObject* SyncSiteCall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* site = reinterpret_cast<SyncSiteObject*>(callable);
  Repeats* repeats = g_repeats;
  // A wrapper of a stopped tracer that someone kept (wrapped again on top of it) only
  // passes the call on, as does one called inside another's call.
  if (t_cause != nullptr || repeats == nullptr || repeats->counts_owner.ptr() != site->counts) {
    return PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  }
  t_cause = site->cause;
  t_detail = site->detail;
  int64_t executions_before = repeats->counts[0];
  PyObject* result = PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  t_cause = t_detail = nullptr;
  // A step ends when a step-ending sync returns (the tracer may have stopped inside it).
  repeats = g_repeats;
  if (result != nullptr && site->ends_step && repeats != nullptr && repeats->counts_owner.ptr() == site->counts &&
      (site->empty_sync_ends_step || repeats->counts[0] > executions_before)) {
    ++repeats->counts[1];
  }
  return result;
}

PyObject* SyncSiteGet(PyObject* self, PyObject* obj, PyObject*) {  // binds as a method, as a function does
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

int SyncSiteTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* site = reinterpret_cast<SyncSiteObject*>(self);
  Py_VISIT(site->original);
  Py_VISIT(site->counts);
  Py_VISIT(site->dict);
  return 0;
}

int SyncSiteClear(PyObject* self) {
  auto* site = reinterpret_cast<SyncSiteObject*>(self);
  Py_CLEAR(site->original);
  Py_CLEAR(site->counts);
  Py_CLEAR(site->dict);
  return 0;
}

void SyncSiteDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  SyncSiteClear(self);
  auto* site = reinterpret_cast<SyncSiteObject*>(self);
  Py_CLEAR(site->cause);
  Py_CLEAR(site->detail);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyMemberDef g_sync_site_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SyncSiteObject, vectorcall), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(SyncSiteObject, dict), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef g_sync_site_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot g_sync_site_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(SyncSiteDealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(SyncSiteTraverse)},
    {Py_tp_clear, reinterpret_cast<void*>(SyncSiteClear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void*>(SyncSiteGet)},
    {Py_tp_members, g_sync_site_members},
    {Py_tp_getset, g_sync_site_getset},
    {Py_tp_doc, const_cast<char*>("A call that syncs, named for lazyviz while it runs.")},
    {0, nullptr}};

PyType_Spec g_sync_site_spec = {
    "lazyviz_hook.SyncSite", sizeof(SyncSiteObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    g_sync_site_slots};
PyTypeObject* g_sync_site_type = nullptr;

// wrap_sync_site(original, cause, detail, counts, ends_step, empty_sync_ends_step)
py::object wrap_sync_site(py::object original, py::str cause, py::str detail, py::object counts, bool ends_step,
                          bool empty_sync_ends_step) {
  auto* site = PyObject_GC_New(SyncSiteObject, g_sync_site_type);
  if (site == nullptr) throw py::error_already_set();
  site->vectorcall = SyncSiteCall;
  site->original = original.release().ptr();
  site->cause = cause.release().ptr();
  site->detail = detail.release().ptr();
  site->counts = counts.release().ptr();
  site->dict = nullptr;
  site->ends_step = ends_step;
  site->empty_sync_ends_step = empty_sync_ends_step;
  PyObject_GC_Track(site);
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(site));
}

// This thread's sync cause for the tracer's Python side: .cause and .detail, None when no sync site runs.
struct SyncState {};

// A hit repeats a row only under the same cause.
uint64_t WithCause(uint64_t site) {
  for (PyObject* value : {t_cause, t_detail}) {
    if (value != nullptr && g_repeats->kept.insert(value).second) Py_INCREF(value);
    site = Mix(site, reinterpret_cast<uintptr_t>(value));
  }
  return site;
}

// ---- IR text: torch's DumpUtil::PostOrderToText, without its cost -------------------
//
// The same text, line for line: `%id = shapes op(%operands), tag=value..., ROOT=r,
// NodeType=...`. torch takes each node's tags apart from node->ToString() with a
// std::regex it builds anew for every tag, about 15 us a node: a 5,000-node graph cost
// 75 ms to print at each compile, and a loop without mark_step compiles a bigger graph
// at every sync. Here the tags are read by hand, under torch's rules: a tag is
// `name=` (letters, digits, _) after the op's name, and its value runs to the next ", "
// outside the first kind of bracket it opens.
void AppendTags(std::string& out, const Node* node) {
  const std::string text = node->ToString();
  const std::string op = node->op().ToString();
  size_t at = text.find(op);
  if (at == std::string::npos) return;  // torch would refuse the graph; print it without
  at += op.size();
  auto skip_separator = [&text](size_t pos) { return text.compare(pos, 2, ", ") == 0 ? pos + 2 : pos; };
  for (;;) {
    at = skip_separator(at);
    size_t name_end = at;
    while (name_end < text.size() && (std::isalnum(static_cast<unsigned char>(text[name_end])) || text[name_end] == '_')) {
      ++name_end;
    }
    if (name_end == at || name_end >= text.size() || text[name_end] != '=') return;
    size_t value = name_end + 1;
    char open = 0, close = 0;
    size_t depth = 1;
    size_t pos = value;
    for (; pos < text.size(); ++pos) {
      char c = text[pos];
      if (open == 0) {
        if (skip_separator(pos) != pos) break;
        if (c == '(') open = '(', close = ')';
        else if (c == '[') open = '[', close = ']';
        else if (c == '{') open = '{', close = '}';
      } else if (c == close) {
        if (--depth == 0) depth = 1, open = close = 0;
      } else if (c == open) {
        ++depth;
      }
    }
    out += ", ";
    out.append(text, at, name_end - at);
    out += '=';
    out.append(text, value, pos - value);
    at = pos;
  }
}

std::string PostOrderText(c10::ArrayRef<const Node*> post_order, c10::ArrayRef<const Node*> roots) {
  std::unordered_map<const Node*, size_t> ids;
  ids.reserve(post_order.size());
  for (const Node* node : post_order) ids.emplace(node, ids.size());
  std::unordered_map<const Node*, size_t> root_ids;
  for (size_t i = 0; i < roots.size(); ++i) root_ids[roots[i]] = i;
  std::string out = "IR {\n";
  out.reserve(post_order.size() * 160);
  std::ostringstream shapes;  // shapes print through c10's operator<<, as torch's do
  for (const Node* node : post_order) {
    shapes.str("");
    shapes << node->shapes() << " " << node->op() << "(";
    out += "  %";
    out += std::to_string(ids.at(node));
    out += " = ";
    out += shapes.str();
    bool first = true;
    for (const Output& operand : node->operands()) {
      if (!first) out += ", ";
      first = false;
      out += '%';
      out += std::to_string(ids.at(operand.node));
      if (operand.node->num_outputs() > 1) {
        out += '.';
        out += std::to_string(operand.index);
      }
    }
    out += ')';
    AppendTags(out, node);
    auto root = root_ids.find(node);
    if (root != root_ids.end()) {
      out += ", ROOT=";
      out += std::to_string(root->second);
    }
    out += ", NodeType=";
    out += typeid(*node).name();
    out += '\n';
  }
  out += "}\n";
  return out;
}

// Both texts of the graph behind these lazy tensors, ours and torch's: a test checks
// they are the same.
py::tuple ir_texts(const std::vector<at::Tensor>& tensors) {
  std::vector<const Node*> roots;
  for (const at::Tensor& tensor : tensors) {
    LazyTensorPtr lazy = TryGetLtcTensor(tensor);
    TORCH_CHECK(lazy, "ir_texts takes lazy tensors");
    Value value = lazy->GetIrValue();
    roots.push_back(value.node.get());
  }
  std::vector<const Node*> post_order = Util::ComputePostOrder(roots);
  return py::make_tuple(PostOrderText(post_order, roots), DumpUtil::PostOrderToText(post_order, roots));
}

// Lazy tensors made from CPU data (`batch.to("lazy")`) upload on first use, inside
// whatever op uses them first: the line that made them is noted when `.to` returns
// and carried to the upload, so an input node names it rather than the line using it.
struct NotedLine {
  c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
  SourceLocation where;
};
std::mutex g_noted_mu;
std::unordered_map<const c10::TensorImpl*, NotedLine> g_noted_tensors;  // eager data -> line
std::unordered_map<BackendData::Handle, std::pair<std::weak_ptr<BackendData>, SourceLocation>> g_noted_data;

template <typename Map, typename Alive>
void PruneWhenLarge(Map& map, size_t& limit, Alive alive) {
  if (map.size() < limit) return;
  for (auto it = map.begin(); it != map.end();) it = alive(it->second) ? std::next(it) : map.erase(it);
  limit = std::max<size_t>(1024, map.size() * 2);
}

std::string LocationText(const SourceLocation& where) {
  std::ostringstream text;
  EmitShortFrameInfo(text, {where});  // ", location=fn@file:line", as torch prints it
  return text.str();
}

// What we learn about a graph on its cache miss, kept until its first execution.
// The key a graph that failed to compile is reported under: it has no computation.
const int kCompileFailedTag = 0;
const Computation* const kCompileFailed = reinterpret_cast<const Computation*>(&kCompileFailedTag);

struct CompiledGraph {
  std::string graph_id;
  int64_t nodes = 0;
  std::string ir_text;
  std::string backend_text;
  double compile_ms = 0;
};

class RecordingBackend : public BackendImplInterface {
 public:
  RecordingBackend(const BackendImplInterface* inner, py::object on_execution, bool capture_ir)
      : inner_(inner), on_execution_(std::move(on_execution)), capture_ir_(capture_ir) {}

  void PrepareToExit() const override { inner_->PrepareToExit(); }
  void SetRngSeed(size_t seed) const override { inner_->SetRngSeed(seed); }
  const IrBuilder* GetIrBuilder() const override { return inner_->GetIrBuilder(); }
  void InitializeAtenBindings() const override { inner_->InitializeAtenBindings(); }

  BackendDataPtr MakeComputationDataFromTensor(const at::Tensor& tensor, const Shape& shape,
                                               const BackendDevice& device) const override {
    BackendDataPtr data = inner_->MakeComputationDataFromTensor(tensor, shape, device);
    if (g_source_lines.load() && data) {
      std::lock_guard<std::mutex> lock(g_noted_mu);
      auto noted = g_noted_tensors.find(tensor.unsafeGetTensorImpl());
      if (noted != g_noted_tensors.end()) {
        if (!noted->second.tensor.expired()) {
          static size_t limit = 1024;
          PruneWhenLarge(g_noted_data, limit, [](auto& entry) { return !entry.first.expired(); });
          g_noted_data[data->GetHandle()] = {data, noted->second.where};
        }
        g_noted_tensors.erase(noted);
      }
    }
    return data;
  }
  BackendDataPtr MakeComputationDataFromScalar(const at::Scalar& scalar,
                                               const BackendDevice& device) const override {
    return inner_->MakeComputationDataFromScalar(scalar, device);
  }
  BackendDataPtr CreateDataPlaceholder(const BackendDevice& device, const Shape& shape) const override {
    return inner_->CreateDataPlaceholder(device, shape);
  }
  BackendDataPtr GetComputationDataFromNode(const Node* node) const override {
    return inner_->GetComputationDataFromNode(node);
  }
  at::Tensor MakeTensorFromComputationData(const BackendDataPtr data,
                                           std::optional<at::ScalarType> type) const override {
    return inner_->MakeTensorFromComputationData(data, type);
  }

  // Called by the executor only on a compile-cache miss, with the whole graph.
  std::unique_ptr<LoweringContext> CreateLoweringContext(const std::string& name, BackendDevice device,
                                                         c10::ArrayRef<const Node*> post_order,
                                                         Util::EmissionMap emit_status) const override {
    std::lock_guard<std::mutex> lock(mu_);
    lowering_started_ms_ = now_ms();
    pending_ = CompiledGraph();
    pending_.nodes = static_cast<int64_t>(post_order.size());
    std::vector<const Node*> roots = Roots(post_order);
    std::vector<BackendDataPtr> inputs = InputData(post_order);  // per node; null for an op
    pending_.graph_id = GraphId(post_order.size(), roots, inputs);
    if (capture_ir_.load()) {
      pending_.ir_text = Annotate(PostOrderText(post_order, roots), inputs);
    }
    have_pending_ = true;
    return inner_->CreateLoweringContext(name, std::move(device), post_order, std::move(emit_status));
  }
  std::unique_ptr<LoweringContext> CreateLoweringContext(const std::string& name,
                                                         BackendDevice device) const override {
    return inner_->CreateLoweringContext(name, std::move(device));
  }
  std::vector<std::string> GetCompilationDevices(const std::string& device,
                                                 c10::ArrayRef<std::string> devices) const override {
    return inner_->GetCompilationDevices(device, devices);
  }

  std::vector<ComputationPtr> Compile(std::vector<ComputationPtr> instances) const override {
    std::vector<ComputationPtr> compiled;
    try {
      compiled = inner_->Compile(std::move(instances));
    } catch (const std::exception& error) {
      // The graph that failed to compile is the one the user most needs to see.
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (have_pending_) {
          pending_.compile_ms = now_ms() - lowering_started_ms_;
          compiled_[kCompileFailed] = std::move(pending_);
        }
        have_pending_ = false;
      }
      Report(kCompileFailed, 0.0, now_ms() / 1000, error.what());  // compile_ms holds its time
      throw;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (have_pending_ && compiled.size() == 1) {
      pending_.compile_ms = now_ms() - lowering_started_ms_;
      pending_.backend_text = compiled[0]->to_string();
      compiled_[compiled[0].get()] = std::move(pending_);
    }
    have_pending_ = false;
    return compiled;
  }

  std::vector<BackendDataPtr> ExecuteComputation(ComputationPtr computation,
                                                 c10::ArrayRef<BackendDataPtr> arguments,
                                                 const BackendDevice& device) const override {
    double started = now_ms();
    std::vector<BackendDataPtr> results;
    try {
      results = inner_->ExecuteComputation(computation, arguments, device);
    } catch (const std::exception& error) {
      double ended = now_ms();
      Report(computation.get(), ended - started, ended / 1000, error.what());
      throw;  // the script sees the backend's own error, as untraced
    }
    double ended = now_ms();  // steady clock, as SteadySeconds()
    Report(computation.get(), ended - started, ended / 1000);
    return results;
  }

  std::shared_ptr<BackendDeviceType> GetDefaultDeviceType() const override {
    return inner_->GetDefaultDeviceType();
  }
  void SetDefaultDeviceType(int8_t type) override {
    const_cast<BackendImplInterface*>(inner_)->SetDefaultDeviceType(type);
  }
  int64_t GetDefaultDeviceOrdinal() const override { return inner_->GetDefaultDeviceOrdinal(); }
  void SetDefaultDeviceOrdinal(int64_t ordinal) override {
    const_cast<BackendImplInterface*>(inner_)->SetDefaultDeviceOrdinal(ordinal);
  }
  at::DeviceType EagerFallbackDeviceType() const override { return inner_->EagerFallbackDeviceType(); }
  std::vector<BackendDevice> GetBackendDevices() const override { return inner_->GetBackendDevices(); }
  std::string CreateMetricReport() const override { return inner_->CreateMetricReport(); }
  BackendDevice GetBackendDevice(c10::Device device) const override { return inner_->GetBackendDevice(device); }
  std::string GetComputationBackendText(const ComputationPtr computation) const override {
    return inner_->GetComputationBackendText(computation);
  }

  // Turned on again (a new trace in the same process): counters count from now.
  void set_enabled(bool enabled) {
    if (enabled && !enabled_.load()) ResetCounterBaseline();
    enabled_.store(enabled);
  }
  void set_capture_ir(bool capture_ir) { capture_ir_.store(capture_ir); }

  // Deltas count from here: what ran before lazyviz installed is not the script's.
  void ResetCounterBaseline() {
    std::lock_guard<std::mutex> lock(mu_);
    Moved([](const std::string&, int64_t) {});
  }

  // The counters that moved since the last execution (fallbacks after it, which no
  // execution will carry), as name -> delta; they count from here on.
  py::dict TakeMoved() {
    Moves moved;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Moved([&moved](const std::string& name, int64_t delta) { moved.emplace_back(&name, delta); });
    }
    py::dict deltas;
    for (auto& [name, delta] : moved) deltas[py::str(*name)] = delta;
    return deltas;
  }

 private:
  static std::vector<const Node*> Roots(c10::ArrayRef<const Node*> post_order) {
    std::unordered_set<const Node*> used;
    for (const Node* node : post_order) {
      for (const Output& operand : node->operands()) used.insert(operand.node);
    }
    std::vector<const Node*> roots;
    for (const Node* node : post_order) {
      if (!used.count(node)) roots.push_back(node);
    }
    return roots;
  }

  // The device data behind each input node, in post order (null for the other nodes):
  // read once per compile for the graph id and the IR's marks.
  std::vector<BackendDataPtr> InputData(c10::ArrayRef<const Node*> post_order) const {
    std::vector<BackendDataPtr> inputs;
    inputs.reserve(post_order.size());
    for (const Node* node : post_order) inputs.push_back(inner_->GetComputationDataFromNode(node));
    return inputs;
  }

  // Two marks torch's dump lacks, added per node (line i + 1 of the dump is
  // post_order[i]):
  // - `alias=%j`: this input shares its buffer with input %j. The executor's cache key
  //   covers that sharing (two Python numbers that became equal get one buffer), so a
  //   diff must see it.
  // - with source lines on, an input made from CPU data names the line that moved the
  //   data to the device (noted by note_upload) rather than the line of its first use.
  std::string Annotate(const std::string& text, const std::vector<BackendDataPtr>& inputs) const {
    std::unordered_map<size_t, std::string> marks;
    std::unordered_map<BackendData::Handle, size_t> first_use;
    std::lock_guard<std::mutex> lock(g_noted_mu);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const BackendDataPtr& data = inputs[i];
      if (!data) continue;
      auto first = first_use.emplace(data->GetHandle(), i);
      if (!first.second) marks[i + 1] += ", alias=%" + std::to_string(first.first->second);
      if (!g_source_lines.load()) continue;
      auto noted = g_noted_data.find(data->GetHandle());
      if (noted != g_noted_data.end() && noted->second.first.lock() == data) {
        marks[i + 1] += LocationText(noted->second.second);
      }
    }
    if (marks.empty()) return text;
    std::istringstream in(text);
    std::ostringstream out;
    std::string line;
    for (size_t number = 0; std::getline(in, line); ++number) {
      auto mark = marks.find(number);
      if (mark != marks.end()) {
        size_t at = line.find(", location=");
        if (at != std::string::npos && mark->second.find(", location=") != std::string::npos) {
          size_t end = line.find(", ", at + 2);
          line.erase(at, end == std::string::npos ? std::string::npos : end - at);
        }
        size_t before = line.find(", ROOT=");
        if (before == std::string::npos) before = line.find(", NodeType=");
        line.insert(before == std::string::npos ? line.size() : before, mark->second);
      }
      out << line << '\n';
    }
    return out.str();
  }

  // The same graph gives the same id in every run: node hashes cover op, shapes and
  // attributes, never addresses or data values. Like the executor's cache key, the id
  // also covers which inputs share one buffer (a Python 1 that aliases another 1).
  std::string GraphId(size_t nodes, const std::vector<const Node*>& roots,
                      const std::vector<BackendDataPtr>& inputs) const {
    hash_t hash(static_cast<uint64_t>(nodes));
    for (const Node* node : roots) hash = HashCombine(hash, node->hash());
    std::unordered_map<BackendData::Handle, int64_t> first_use;
    for (const BackendDataPtr& data : inputs) {
      if (!data) continue;
      auto found = first_use.emplace(data->GetHandle(), static_cast<int64_t>(first_use.size()));
      hash = HashCombine(hash, Hash(found.first->second));
    }
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx",
                  static_cast<unsigned long long>(c10::Uint128Low64(hash) ^ c10::Uint128High64(hash)));
    return std::string(buf);
  }

  // mu_ guards compiled_, counters_ and the pending graph: the executor may compile on
  // one thread while another executes (checked on torch 2.13: LazyGraphExecutor holds
  // no lock of ours). mu_ is never held while waiting for the GIL.
  // error: the backend's message when the graph failed to compile or run (reported
  // once, never repeated; the tracer keeps the text with the execution).
  void Report(const Computation* key, double execute_ms, double ended_s, const char* error = nullptr) const {
    g_dump_decided.store(true);
    if (!enabled_.load()) return;
    bool have_graph = false;
    CompiledGraph g;
    Moves moved;
    moved.reserve(16);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = compiled_.find(key);
      if (found != compiled_.end()) {
        g = std::move(found->second);
        have_graph = true;
        compiled_.erase(found);  // reported once; later runs of it are cache hits
      }
      // Only the counters that moved since the previous execution: a handful out of
      // a hundred or more, so Python sees little per execution.
      Moved([&moved](const std::string& name, int64_t delta) { moved.emplace_back(&name, delta); });
    }
    py::gil_scoped_acquire gil;
    ForgetLastFrame();
    uint64_t site = StackSignature();
    Repeats* repeats = g_repeats;
    py::object previous_end = py::none();
    double end = ended_s;
    uint64_t stack = site;
    int64_t follows = -1;
    if (repeats != nullptr) {
      stack = site = WithCause(site);
      follows = repeats->fallback_kind >= 0 && repeats->fallback_stack == stack ? repeats->fallback_kind : -1;
      site = Mix(site, static_cast<uint64_t>(follows + 1));
      repeats->fallback_kind = -1;  // until this execution says it is a fallback's
      end = ended_s + repeats->clock_offset_s;
      if (have_graph) {  // a new graph under this key: rows repeated for the old one are stale
        for (auto& [_, by_key] : repeats->by_site) repeats->size -= by_key.erase(key);
      } else if (error == nullptr && Repeat(*repeats, site, stack, key, moved, execute_ms, end)) {
        return;
      }
      if (!std::isnan(repeats->last_end_s)) previous_end = py::float_(repeats->last_end_s);
      repeats->last_end_s = end;
    }
    try {
      py::object graph = py::none();
      if (have_graph) {
        graph = py::make_tuple(g.graph_id, g.nodes, py::bytes(g.ir_text), py::bytes(g.backend_text),
                               g.compile_ms);
      }
      // The same counters moving by the same amounts as last time (every step of a
      // steady loop) pass the same dict: Python compares it by identity, and nothing new
      // is allocated for the collector to chase.
      if (moved != last_moved_ || !last_deltas_) {
        py::dict deltas;
        for (auto& [name, delta] : moved) deltas[py::str(*name)] = delta;
        last_deltas_ = std::make_unique<py::object>(std::move(deltas));
        last_moved_ = moved;
      }
      py::object recorded =
          error == nullptr
              ? on_execution_(reinterpret_cast<uintptr_t>(key), graph, execute_ms, *last_deltas_, site, end,
                              previous_end, follows)
              : on_execution_(reinterpret_cast<uintptr_t>(key), graph, execute_ms, *last_deltas_, site, end,
                              previous_end, follows, py::reinterpret_steal<py::object>(
                                  PyUnicode_DecodeUTF8(error, std::strlen(error), "replace")));
      if (error != nullptr) return;  // a failed graph's row is never repeated
      // Recorded(index, kind, repeat, fallback)
      if (repeats != nullptr && repeats == g_repeats && PyTuple_Check(recorded.ptr()) &&
          PyTuple_GET_SIZE(recorded.ptr()) >= 4) {
        int64_t kind = PyLong_AsLongLong(PyTuple_GET_ITEM(recorded.ptr(), 1));
        bool repeat = PyObject_IsTrue(PyTuple_GET_ITEM(recorded.ptr(), 2)) == 1;
        bool fallback = PyObject_IsTrue(PyTuple_GET_ITEM(recorded.ptr(), 3)) == 1;
        if (PyErr_Occurred()) PyErr_Clear();
        if (kind >= 0 && fallback) {
          repeats->fallback_stack = stack;
          repeats->fallback_kind = kind;
        }
        if (kind >= 0 && repeat && repeats->size < kMaxRepeats) {
          auto& entry = repeats->by_site[site];
          repeats->size += entry.count(key) ? 0 : 1;
          entry[key] = RepeatOf{kind, std::move(moved), fallback};
        }
      }
    } catch (py::error_already_set& error) {
      if (error.matches(PyExc_Exception)) {
        // A tracing bug must never break the user's program (the tracer counts its own).
        error.discard_as_unraisable("lazyviz execution hook");
      } else {
        KeepForScript(error);  // KeyboardInterrupt, SystemExit: the script's, not ours
      }
    }
  }

  // A cache hit Python has seen from this stack, under this cause, with these counters:
  // append its row and tell no one (GIL held).
  static bool Repeat(Repeats& repeats, uint64_t site, uint64_t stack, const Computation* key, const Moves& moved,
                     double execute_ms, double end) {
    auto by_key = repeats.by_site.find(site);
    if (by_key == repeats.by_site.end()) return false;
    auto found = by_key->second.find(key);
    if (found == by_key->second.end() || found->second.moved != moved) return false;
    if (found->second.fallback) {
      repeats.fallback_stack = stack;
      repeats.fallback_kind = found->second.kind;
    }
    double start = end - execute_ms / 1000;
    double trace_ms = std::isnan(repeats.last_end_s) ? 0.0 : (start - repeats.last_end_s) * 1000;
    repeats.last_end_s = end;
    int64_t index = repeats.counts[0]++;
    repeats.rows.push_back(Row{index, repeats.counts[1], found->second.kind, execute_ms,
                               trace_ms > 0 ? trace_ms : 0.0, 0.0, execute_ms,
                               (start - repeats.started_s) * 1000});
    return true;
  }

  // Calls moved(name, delta) for each counter whose value changed since the last
  // call, in one pass over the arena (no copies of the names: GetCounterNames() would
  // allocate a hundred strings per execution). Counters are created lazily but never
  // removed; a new one shows as a mismatch at its position, and its count so far is new.
  template <typename OnMoved>
  void Moved(OnMoved&& moved) const {
    size_t i = 0;
    MetricsArena::Get()->ForEachCounter([&](const std::string& name, CounterData* counter) {
      int64_t value = counter->Value();
      if (i < counters_.size() && counters_[i].first == counter) {
        int64_t& last = counters_[i].second;
        if (value != last) {
          moved(name, value - last);
          last = value;
        }
      } else {  // a new counter here: the ones after it shift by one
        auto known = std::find_if(counters_.begin() + i, counters_.end(),
                                  [counter](const auto& entry) { return entry.first == counter; });
        int64_t last = known == counters_.end() ? 0 : known->second;
        if (known != counters_.end()) counters_.erase(known);
        if (value != last) moved(name, value - last);
        counters_.insert(counters_.begin() + i, {counter, value});
      }
      ++i;
    });
  }

  const BackendImplInterface* inner_;
  py::object on_execution_;
  std::atomic<bool> capture_ir_;
  std::atomic<bool> enabled_{true};
  mutable std::mutex mu_;
  mutable bool have_pending_ = false;
  mutable double lowering_started_ms_ = 0;
  mutable CompiledGraph pending_;
  mutable std::unordered_map<const Computation*, CompiledGraph> compiled_;
  mutable std::vector<std::pair<CounterData*, int64_t>> counters_;  // in the arena's (name) order, last value
  // The counters that moved at the last report, and the dict Python got for them (GIL held).
  mutable Moves last_moved_;
  mutable std::unique_ptr<py::object> last_deltas_;
};

RecordingBackend* g_backend = nullptr;

void install(py::object on_execution, bool capture_ir) {
  TORCH_CHECK(hasBackend(), "the lazy backend must be initialised before lazyviz installs its hook");
  TORCH_CHECK(g_backend == nullptr, "lazyviz's hook is already installed");
  g_backend = new RecordingBackend(getBackend(), std::move(on_execution), capture_ir);
  g_backend->ResetCounterBaseline();
  static BackendRegistrar registrar(g_backend);  // lives as long as the process, like the backend
}

void set_enabled(bool enabled) {
  if (g_backend != nullptr) g_backend->set_enabled(enabled);
}

void set_capture_ir(bool capture_ir) {
  if (g_backend != nullptr) g_backend->set_capture_ir(capture_ir);
}

py::dict take_moved() { return g_backend != nullptr ? g_backend->TakeMoved() : py::dict(); }

bool has_backend() { return hasBackend(); }

bool users_dump_kept() { return g_users_dump.load(); }

// The user's LTC dump is on from the start: nodes never carry frames (set before
// set_source_lines, which then installs the getter for the dump's stack only).
void keep_users_dump() {
  g_users_dump.store(true);
  g_source_lines.store(false);
  FLAGS_torch_lazy_ir_debug = false;
}

// classify(filename, name) -> (kind, file label), once per code object; None turns
// source lines off and gives torch its own frame getter back.
void set_source_lines(py::object classify) {
  if (g_codes == nullptr) {
    g_codes = new std::unordered_map<PyObject*, CodeEntry>();
    g_lines = new std::unordered_map<std::pair<PyObject*, int>, int, CodeLineHash>();
  }
  g_lines->clear();
  for (auto& [code, entry] : *g_codes) Py_DECREF(code);  // a new trace may classify anew
  g_codes->clear();
  if (g_torch_frames == nullptr) {
    g_torch_frames = new std::function<std::vector<SourceLocation>()>(GetPythonFramesFunction());
  }
  ForgetLastFrame();
  if (classify.is_none()) {
    g_source_lines.store(false);
    FLAGS_torch_lazy_ir_debug = false;
    GetPythonFramesFunction() = *g_torch_frames;
    delete g_classify;
    g_classify = nullptr;
    std::lock_guard<std::mutex> lock(g_noted_mu);
    g_noted_tensors.clear();
    g_noted_data.clear();
    return;
  }
  delete g_classify;
  g_classify = new py::object(std::move(classify));
  GetPythonFramesFunction() = UserFrame;
  if (g_users_dump.load()) return;  // this process's LTC dump is on: nodes carry no frames
  FLAGS_torch_lazy_ir_debug = true;
  g_source_lines.store(true);
}

// Repeated rows for a tracer: counts is its array('q', [executions, steps]) (the hook
// numbers repeated rows from it, and its sync sites count steps in it), started and now
// its clock's start and current reading. None stops, forgetting what was learnt.
void set_repeats(py::object counts, double started, double now) {
  delete g_repeats;
  g_repeats = nullptr;
  if (counts.is_none()) return;
  auto repeats = std::make_unique<Repeats>();
  repeats->counts_view = std::make_unique<py::buffer_info>(py::buffer(counts).request(true));
  TORCH_CHECK(repeats->counts_view->itemsize == 8 && repeats->counts_view->size >= 2,
              "counts must be an array('q') of at least 2");
  repeats->counts = static_cast<int64_t*>(repeats->counts_view->ptr);
  repeats->counts_owner = std::move(counts);
  repeats->clock_offset_s = now - SteadySeconds();
  repeats->started_s = started;
  g_repeats = repeats.release();
}

// The rows repeated since the last call, as bytes of 64-byte rows (`=qqqddddd`).
py::bytes take_rows() {
  if (g_repeats == nullptr || g_repeats->rows.empty()) return py::bytes();
  py::bytes taken(reinterpret_cast<const char*>(g_repeats->rows.data()), g_repeats->rows.size() * sizeof(Row));
  g_repeats->rows.clear();
  return taken;
}

// `tensor` was just made on the lazy device from CPU data: remember the calling line
// for the upload its first use will do.
void note_upload(const at::Tensor& tensor) {
  if (!g_source_lines.load()) return;
  LazyTensorPtr lazy = TryGetLtcTensor(tensor);
  if (!lazy) return;
  std::optional<at::Tensor> data = lazy->CurrentTensorData();
  if (!data || !data->defined()) return;
  std::vector<SourceLocation> where = UserFrame();
  if (where.empty()) return;
  std::lock_guard<std::mutex> lock(g_noted_mu);
  static size_t limit = 1024;
  PruneWhenLarge(g_noted_tensors, limit, [](auto& entry) { return !entry.tensor.expired(); });
  g_noted_tensors.insert_or_assign(
      data->unsafeGetTensorImpl(),
      NotedLine{c10::weak_intrusive_ptr<c10::TensorImpl>(data->getIntrusivePtr()), where.front()});
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, "Wrap the registered lazy backend and report each execution.");
  m.def("set_enabled", &set_enabled, "Turn reporting on or off.");
  m.def("set_capture_ir", &set_capture_ir, "Record the IR text of each new graph, or not.");
  m.def("set_source_lines", &set_source_lines, "Record the user's line for each IR node (None: stop).");
  m.def("note_upload", &note_upload, "Note the calling line for a lazy tensor made from CPU data.");
  m.def("set_repeats", &set_repeats, "Repeat rows for hits seen before (None: stop).");
  m.def("take_rows", &take_rows, "The rows repeated since the last call, as bytes.");
  m.def("ir_texts", &ir_texts, "The IR text of these lazy tensors' graph: (lazyviz's, torch's).");
  g_sync_site_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_sync_site_spec));
  if (g_sync_site_type == nullptr) throw py::error_already_set();
  m.add_object("SyncSite", reinterpret_cast<PyObject*>(g_sync_site_type));
  m.def("wrap_sync_site", &wrap_sync_site, "Wrap a call that syncs: it names the cause while it runs.");
  py::class_<SyncState>(m, "SyncState", "This thread's sync cause: the sync site running, if any.")
      .def(py::init<>())
      .def_property_readonly("cause", [](const SyncState&) {
        return t_cause != nullptr ? py::reinterpret_borrow<py::object>(t_cause) : py::none();
      })
      .def_property_readonly("detail", [](const SyncState&) {
        return t_detail != nullptr ? py::reinterpret_borrow<py::object>(t_detail) : py::none();
      });
  m.def("has_backend", &has_backend, "Is a lazy backend registered (initialised) in this process?");
  m.def("take_moved", &take_moved, "The counters that moved since the last execution (name -> delta).");
  m.def("users_dump_kept", &users_dump_kept, "Were source lines given up for the user's LTC dump?");
  m.def("keep_users_dump", &keep_users_dump, "Give up per-node source lines for the user's LTC dump.");
}
