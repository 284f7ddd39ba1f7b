// PyTorch/XLA: a loop's steady sync handed on without Python.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

// ---- PyTorch/XLA's steady sync -------------------------------------------------------
//
// On XLA lazyviz learns of each execution by polling XLA's analysis file and counters at
// each sync site (lazyviz/backends/xla.py). A loop's cache hit writes the same analysis
// text at every sync, and Python already hands such a sync on as the row it repeated
// (its "steady" path). This is that path without Python: the poll it runs reads what the
// file gained and XLA's counters, and where the text is one Python registered, XLA
// counted one more cache lookup and no compile, the same counters moved and the sync's
// cause is the same, it appends the repeated row (Row, repeats.h) itself. Anything else
// goes to Python's poll, which first settles what was handed on here (xla_settle) and
// hands back any text read here, then arms this again when its state is idle. Touched
// only with the GIL held.

// A report text Python handed on as a repeated row: its kind, the sync cause it ran under
// and the counters that moved with it.
struct SteadyText {
  std::string text;
  py::object cause;
  py::object detail;
  int64_t kind;
  std::vector<std::pair<py::object, int64_t>> moved;  // counter name -> by how much
  uint64_t stack;    // the stack XLA wrote it from (StackSignature); 0: not known
  std::string hash;  // its graph's hash, as XLA writes it
  // `moved` in the order of the counters watched, as listed when `expected_for` was the
  // list's number: a sync compares each counter once, not each with every name (full
  // capture watches some 60, and a model's step moves most of them).
  mutable std::vector<int64_t> expected;
  mutable uint64_t expected_for = 0;
};

// A counter lazyviz watches: torch's lazy counters are read in place (an arena never
// drops one), XLA's own (its runtime's, the fallback ops') through torch_xla.
struct WatchedCounter {
  py::object name;
  CounterData* data;  // nullptr: not in torch's arena
  int64_t value;      // as last handed on
};

struct XlaSteady {
  py::object counts_owner;  // the tracer's array('q', [executions, steps completed])
  std::unique_ptr<py::buffer_info> counts_view;
  int64_t* counts = nullptr;
  double clock_offset_s = 0;  // steady clock + offset = the tracer's clock (time.perf_counter)
  double started_s = 0;
  py::object sync;          // the backend's SyncCause (a threading.local): .cause, .detail
  py::object syncing;       // the backend's dict of threads inside a sync site
  py::object fallback_ops;  // torch_xla._XLAC._get_executed_fallback_ops
  py::object counter_value; // torch_xla._XLAC._xla_counter_value
  py::object poll;          // the backend's poll, Python's: where xla_poll cannot hand a sync on
  bool quiet = false;       // the analyses are lazyviz's own: a steady sync's may be left out (xla_quiet.h)
  CounterData* cached = nullptr;  // XLA's cache lookups: one per execution
  CounterData* uncached = nullptr;
  std::vector<SteadyText> texts;
  // Armed by Python's poll (xla_arm) with what it has handed on; settled (xla_settle).
  bool armed = false;
  int fd = -1;
  int64_t executed = 0;  // XLA's lookups, as handed on
  int64_t compiled = 0;
  Py_ssize_t fallback_count = 0;
  std::vector<WatchedCounter> watched;
  uint64_t watched_list = 1;  // the list's number: one more at each new list of names
  double last_end_s = NAN;
  double times_due_s = 0;             // XLA's execute times are read then (Python)
  int64_t awaiting = 0;               // executions without an execute time
  int64_t handled = 0;                // since armed
  int64_t first = -1;
  std::string carry;                  // text read here that Python's poll must parse
  std::vector<Row> rows;              // repeated rows the writer has not taken
};
XlaSteady* g_xla = nullptr;

// An execution analysis XLA was kept from writing (xla_quiet.h), or the last one it wrote
// from a sync site: the stack it was (to be) written from, XLA's lookups then, and its
// graph's hash once XLA's executor reached its barrier. Written inside XLA's sync, where
// the GIL may be released: under the lock.
struct Analysis {
  bool pending = false;
  uint64_t stack = 0;
  int64_t lookups = 0;
  bool hashed = false;
  hash_t hash = hash_t(0);
};
std::mutex g_analysis_mu;
Analysis g_left_out;  // pending: its text is the hook's to hand on, or to give Python (carry)
Analysis g_analysed;
thread_local int t_awaiting_hash = 0;  // 1: g_left_out's, 2: g_analysed's
constexpr int64_t kAwaitingMost = 256;    // xla.py: _AWAITING_MOST (_execute_times_due())
constexpr size_t kReadChunk = 1 << 16;    // xla.py: _Tail._CHUNK

CounterData* LazyCounter(const std::string& wanted) {
  CounterData* found = nullptr;
  MetricsArena::Get()->ForEachCounter([&](const std::string& name, CounterData* counter) {
    if (name == wanted) found = counter;
  });
  return found;
}

// XLA's execute times wait to be read: Python's poll reads them.
bool TimesDue(const XlaSteady& s, double now) {
  return s.awaiting > 0 && (s.awaiting >= kAwaitingMost || now >= s.times_due_s);
}

bool Equal(const py::object& a, PyObject* b) {
  if (a.ptr() == b) return true;
  int equal = PyObject_RichCompareBool(a.ptr(), b, Py_EQ);
  if (equal < 0) PyErr_Clear();
  return equal == 1;
}

// The SyncCause attributes the wrappers and polls read and write, interned once (xla_start).
PyObject* g_cause_name = nullptr;
PyObject* g_detail_name = nullptr;
PyObject* g_in_closure_name = nullptr;
PyObject* g_closures_from_name = nullptr;

// This thread's sync cause is the text's: the wrappers keep it in a threading.local.
bool SameCause(const XlaSteady& s, const SteadyText& steady) {
  for (auto [attribute, expected] : {std::pair{g_cause_name, &steady.cause}, std::pair{g_detail_name, &steady.detail}}) {
    PyObject* value = PyObject_GetAttr(s.sync.ptr(), attribute);
    if (value == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool same = Equal(*expected, value);
    Py_DECREF(value);
    if (!same) return false;
  }
  return true;
}

// Another thread inside a sync (or this poll outside the one that runs): Python's.
bool SyncsAlone(const XlaSteady& s) {
  Py_ssize_t inside = PyDict_Size(s.syncing.ptr());
  if (inside == 0) return true;
  if (inside > 1) return false;
  PyObject* thread = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
  if (thread == nullptr) {
    PyErr_Clear();
    return false;
  }
  int here = PyDict_Contains(s.syncing.ptr(), thread);
  Py_DECREF(thread);
  if (here < 0) PyErr_Clear();
  return here == 1;
}

// The counters now, each as it moved since last handed on by what `steady` moved; false
// where one moved otherwise (or XLA listed a new op that fell back).
bool CountersMovedAs(XlaSteady& s, const SteadyText& steady, std::vector<int64_t>& now) {
  PyObject* ops = PyObject_CallNoArgs(s.fallback_ops.ptr());
  if (ops == nullptr) {
    PyErr_Clear();
    return false;
  }
  Py_ssize_t listed = PySequence_Size(ops);
  Py_DECREF(ops);
  if (listed != s.fallback_count) return false;
  if (steady.expected_for != s.watched_list) {
    steady.expected.assign(s.watched.size(), 0);
    for (size_t i = 0; i < s.watched.size(); ++i) {
      for (const auto& [name, by] : steady.moved) {
        if (Equal(name, s.watched[i].name.ptr())) steady.expected[i] = by;
      }
    }
    steady.expected_for = s.watched_list;
  }
  now.clear();
  for (size_t i = 0; i < s.watched.size(); ++i) {
    const WatchedCounter& counter = s.watched[i];
    int64_t value;
    if (counter.data != nullptr) {
      value = counter.data->Value();
    } else {
      PyObject* read = PyObject_CallOneArg(s.counter_value.ptr(), counter.name.ptr());
      if (read == nullptr) {
        PyErr_Clear();
        return false;
      }
      value = read == Py_None ? 0 : PyLong_AsLongLong(read);
      Py_DECREF(read);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
    }
    if (value - counter.value != steady.expected[i]) return false;
    now.push_back(value);
  }
  return true;
}

// The text XLA would have written for an analysis it was kept from writing: that of the
// steady text from the same stack and of the same graph; else one from the same stack
// with the graph's hash put in and its graph's input and output counts left out (a
// text from the same stack names the same frames and cause; Python reads the counts
// from a compile's analysis only).
std::string WrittenText(const XlaSteady& s, const Analysis& left_out, const SteadyText* same) {
  if (same != nullptr) return same->text;
  std::string hash = left_out.hashed ? HashToString(left_out.hash) : std::string();
  for (const SteadyText& text : s.texts) {
    if (text.stack != left_out.stack) continue;
    if (hash.empty() || hash == text.hash) return text.text;
    std::string written;
    size_t start = 0;
    while (start < text.text.size()) {
      size_t end = text.text.find('\n', start);
      end = end == std::string::npos ? text.text.size() : end + 1;
      std::string_view line(text.text.data() + start, end - start);
      start = end;
      if (line.find("Number of Graph Inputs: ") != std::string_view::npos ||
          line.find("Number of Graph Outputs: ") != std::string_view::npos) {
        continue;
      }
      size_t at = line.find("Graph Hash: " + text.hash);
      if (at == std::string_view::npos) {
        written += line;
      } else {
        written.append(line.substr(0, at)).append("Graph Hash: ").append(hash);
        written += line.substr(at + 12 + text.hash.size());
      }
    }
    return written;
  }
  return std::string();  // none from that stack: none was left out (see FramesOrLeftOut)
}

// The left-out analysis, taken (not pending after).
Analysis TakeLeftOut() {
  std::lock_guard<std::mutex> lock(g_analysis_mu);
  Analysis taken = g_left_out;
  g_left_out.pending = false;
  return taken;
}

// The steady text that is the left-out analysis's: from its stack, of its graph.
const SteadyText* LeftOutText(const XlaSteady& s, const Analysis& left_out) {
  if (!left_out.hashed) return nullptr;
  std::string hash = HashToString(left_out.hash);
  for (const SteadyText& text : s.texts) {
    if (text.stack == left_out.stack && text.hash == hash) return &text;
  }
  return nullptr;
}

// Give Python's poll the text of an analysis left out, to read first; Python keys it by
// the stack it would have been written from, as it keys one XLA wrote (xla_analysed).
void CarryLeftOut(XlaSteady& s, const Analysis& left_out) {
  s.carry += WrittenText(s, left_out, LeftOutText(s, left_out));
  std::lock_guard<std::mutex> lock(g_analysis_mu);
  g_analysed = left_out;
  g_analysed.pending = false;
}

// The poll a sync site runs, before and after its call: true where it is done here (XLA
// ran nothing new, or the steady sync once more); false: Python's poll runs, given the
// analysis text read here, or the one XLA was kept from writing (carry).
bool xla_poll() {
  XlaSteady* s = g_xla;
  if (s == nullptr || !s->armed) return false;
  Analysis left_out = TakeLeftOut();
  double now = SteadySeconds() + s->clock_offset_s;
  int64_t compiled = s->uncached->Value();
  int64_t executed = s->cached->Value() + compiled;
  if (executed == s->executed && !left_out.pending) return !TimesDue(*s, now);
  bool alone = executed == s->executed + 1 && compiled == s->compiled && SyncsAlone(*s);
  thread_local std::vector<int64_t> values;
  const SteadyText* steady = nullptr;
  if (left_out.pending) {
    steady = LeftOutText(*s, left_out);
    if (!alone || steady == nullptr || !SameCause(*s, *steady) || !CountersMovedAs(*s, *steady, values)) {
      CarryLeftOut(*s, left_out);
      s->armed = false;
      return false;
    }
  } else {
    if (!alone) return false;
    // XLA writes an execution's analysis before it counts the lookup: the text is there.
    char buffer[kReadChunk];
    ssize_t got = read(s->fd, buffer, sizeof buffer);
    if (got <= 0) return false;
    for (const SteadyText& text : s->texts) {
      if (text.text.size() == static_cast<size_t>(got) && memcmp(text.text.data(), buffer, got) == 0) {
        steady = &text;
        break;
      }
    }
    if (steady == nullptr || !SameCause(*s, *steady) || !CountersMovedAs(*s, *steady, values)) {
      s->carry.assign(buffer, got);  // Python's poll parses it
      s->armed = false;
      return false;
    }
  }
  for (size_t i = 0; i < values.size(); ++i) s->watched[i].value = values[i];
  double end = SteadySeconds() + s->clock_offset_s;
  double trace_ms = std::isnan(s->last_end_s) ? 0.0 : (end - s->last_end_s) * 1000;
  s->last_end_s = end;
  int64_t index = s->counts[0]++;
  if (s->handled++ == 0) s->first = index;
  ++s->awaiting;
  s->executed = executed;
  // The execute time comes with XLA's ExecuteTime sample, at a later poll (xla_time_row).
  s->rows.push_back(Row{index, s->counts[1], steady->kind, 0.0, trace_ms > 0 ? trace_ms : 0.0, 0.0, 0.0,
                        (end - s->started_s) * 1000});
  return !TimesDue(*s, end);
}

// For the writer's thread: whether an execution the hook handed on awaits its time.
bool xla_awaiting() {
  XlaSteady* s = g_xla;
  return s != nullptr && s->armed && s->awaiting > 0;
}

// For a tracer: counts is its array('q', [executions, steps]), started and now its clock's
// start and current reading; sync, syncing and poll the backend's. None stops, forgetting all.
void xla_start(py::object counts, double started, double now, py::object sync, py::object syncing,
               py::object fallback_ops, py::object counter_value, py::object poll) {
  delete g_xla;
  g_xla = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_analysis_mu);
    g_left_out = g_analysed = Analysis();
  }
  if (counts.is_none()) return;
  if (g_cause_name == nullptr) {
    g_cause_name = PyUnicode_InternFromString("cause");
    g_detail_name = PyUnicode_InternFromString("detail");
    g_in_closure_name = PyUnicode_InternFromString("in_closure");
    g_closures_from_name = PyUnicode_InternFromString("closures_from");
  }
  auto s = std::make_unique<XlaSteady>();
  s->counts_view = std::make_unique<py::buffer_info>(py::buffer(counts).request(true));
  TORCH_CHECK(s->counts_view->itemsize == 8 && s->counts_view->size >= 2, "counts must be an array('q') of at least 2");
  s->counts = static_cast<int64_t*>(s->counts_view->ptr);
  s->counts_owner = std::move(counts);
  s->clock_offset_s = now - SteadySeconds();
  s->started_s = started;
  s->sync = std::move(sync);
  s->syncing = std::move(syncing);
  s->fallback_ops = std::move(fallback_ops);
  s->counter_value = std::move(counter_value);
  s->poll = std::move(poll);
  g_xla = s.release();
}

// A report text Python handed on as a repeated row of `kind`, under (cause, detail), with
// `moved` (name -> delta) moving, written from `stack` (0: not known) for graph `hash`;
// in place of what the same text was before.
void xla_add_text(py::bytes text, py::object cause, py::object detail, int64_t kind, py::dict moved, uint64_t stack,
                  std::string hash) {
  if (g_xla == nullptr) return;
  SteadyText steady{std::string(text), std::move(cause), std::move(detail), kind, {}, stack, std::move(hash)};
  for (auto [name, by] : moved) steady.moved.emplace_back(py::reinterpret_borrow<py::object>(name), by.cast<int64_t>());
  auto& texts = g_xla->texts;
  auto same = std::find_if(texts.begin(), texts.end(), [&](const SteadyText& known) { return known.text == steady.text; });
  if (same != texts.end()) {
    *same = std::move(steady);
  } else {
    texts.push_back(std::move(steady));
  }
}

void xla_clear_texts() {
  XlaSteady* s = g_xla;
  if (s == nullptr) return;
  Analysis left_out = TakeLeftOut();  // its text is needed before they go
  if (left_out.pending) CarryLeftOut(*s, left_out);
  s->texts.clear();
}

// What Python's poll has handed on, for the polls after it: the analysis file's
// descriptor (read from where Python left it), XLA's lookups and compiles, the counters
// watched (name -> value), how many ops XLA lists as fallen back, the last execution's
// end, when the execute times are due (Python reads them), and how many executions
// await their time.
void xla_arm(int fd, int64_t executed, int64_t compiled, py::dict counters, Py_ssize_t fallback_count,
             py::object last_end, double times_due, int64_t awaiting) {
  XlaSteady* s = g_xla;
  if (s == nullptr || s->texts.empty()) return;
  // XLA makes its counters at their first count: both are there once a graph was compiled and run.
  if (s->cached == nullptr) s->cached = LazyCounter("CachedCompile");
  if (s->uncached == nullptr) s->uncached = LazyCounter("UncachedCompile");
  // Not before Python settled what was handed on here (it settles at its next poll).
  if (s->cached == nullptr || s->uncached == nullptr || s->handled != 0 || !s->carry.empty()) return;
  s->fd = fd;
  s->executed = executed;
  s->compiled = compiled;
  s->fallback_count = fallback_count;
  s->last_end_s = last_end.is_none() ? NAN : last_end.cast<double>();
  s->times_due_s = times_due;
  s->awaiting = awaiting;
  bool same = s->watched.size() == counters.size();
  size_t i = 0;
  for (auto [name, value] : counters) {
    if (!same) break;
    same = Equal(s->watched[i++].name, name.ptr());  // a list read again names them anew
  }
  if (!same) {  // a new list of names: which of them torch's arena holds
    s->watched.clear();
    ++s->watched_list;
    for (auto [name, value] : counters) {
      s->watched.push_back({py::reinterpret_borrow<py::object>(name), LazyCounter(name.cast<std::string>()), 0});
    }
  }
  i = 0;
  for (auto [name, value] : counters) s->watched[i++].value = value.cast<int64_t>();
  s->armed = true;
}

// Disarm, and what was handed on here since armed: (count, first index, the last end,
// text read here for Python to parse, the watched counters now as name -> value); None
// where there is nothing. take_left_out false (the writer's thread, between two polls of
// the script's): an analysis left out stays for the sync's own poll after its call,
// which hands it on here once armed again; taken, it went to Python's poll as text.
py::object xla_settle(bool take_left_out) {
  XlaSteady* s = g_xla;
  if (s == nullptr) return py::none();
  s->armed = false;
  if (take_left_out) {
    Analysis left_out = TakeLeftOut();
    if (left_out.pending) CarryLeftOut(*s, left_out);
  }
  if (s->handled == 0 && s->carry.empty()) return py::none();
  py::dict values;
  if (s->handled > 0) {
    for (const WatchedCounter& counter : s->watched) values[counter.name] = counter.value;
  }
  py::tuple settled = py::make_tuple(s->handled, s->first, s->last_end_s, py::bytes(s->carry), values);
  s->handled = 0;
  s->first = -1;
  s->carry.clear();
  return settled;
}

// The rows repeated here since the last call, as bytes of 64-byte rows (`=qqqddddd`).
py::bytes xla_take_rows() {
  if (g_xla == nullptr || g_xla->rows.empty()) return py::bytes();
  py::bytes taken(reinterpret_cast<const char*>(g_xla->rows.data()), g_xla->rows.size() * sizeof(Row));
  g_xla->rows.clear();
  return taken;
}

// An execute time for a row repeated here: false where the writer took it already.
bool xla_time_row(int64_t index, double execute_ms) {
  if (g_xla == nullptr || g_xla->rows.empty()) return false;
  auto& rows = g_xla->rows;
  auto found = std::lower_bound(rows.begin(), rows.end(), index, [](const Row& row, int64_t i) { return row.idx < i; });
  if (found == rows.end() || found->idx != index) return false;
  found->sync_ms = found->compile_ms + execute_ms;
  found->execute_ms = execute_ms;
  return true;
}

}  // namespace
