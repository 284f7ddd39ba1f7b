// Repeated rows: the Row layout Python reads (checked by tests/test_hook_layout.py).
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

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

}  // namespace
