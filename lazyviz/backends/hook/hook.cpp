// lazyviz's hook into torch's lazy core: a BackendImplInterface that forwards
// every call to the backend already registered and reports each graph execution
// to Python. Checked on torch 2.13.0 (torch/csrc/lazy/backend/backend_interface.h),
// and on 2.11.0 (CPU, and CUDA with LTC_TS_CUDA=1).
//
// Why a backend wrapper: the lazy core has no Python hook per sync, but every
// execution (mark_step, .item(), an eager fallback) goes through
// ExecuteComputation, and every cache miss through CreateLoweringContext with the
// graph's post order: so each distinct graph is formatted once, on its miss.
//
// No C++ stream (<sstream>, operator<<) anywhere: text is built from strings. The
// hook is compiled by the user's g++ against torch's prebuilt libraries, and where
// that g++ was another than torch's (Ubuntu 24.04's g++ 13 and libstdc++ 14, torch
// 2.11's wheel) an ostringstream made here crashed the first time torch's code wrote a
// number to it (SIGSEGV in basic_ostream::_M_insert<long>, at the first sync).
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
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
// CPython 3.11's frames, read in place (as memray and py-spy do): see source_lines.h.
#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#define LAZYVIZ_INTERPRETER_FRAMES 1
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <typeinfo>
#include <vector>
#include <unordered_map>
#include <unordered_set>
#include <unistd.h>  // environ
#if defined(__linux__)
#include <dlfcn.h>  // dladdr
#include <elf.h>
#include <link.h>  // dl_iterate_phdr
#include <sys/mman.h>
#endif

namespace py = pybind11;
using namespace torch::lazy;

// The parts, by concern; each relies on the includes above and the parts before it.
#include "common.h"
#include "source_lines.h"
#include "stack_signature.h"
#include "repeats.h"
#include "sync_sites.h"
#include "redirect.h"
#include "xla_steady.h"
#include "xla_quiet.h"
#include "xla_sync_sites.h"
#include "ir_text.h"
#include "recording_backend.h"

namespace {

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
// source lines off and gives torch its own frame getter back. reads_ltc_dump: the
// backend's executor is torch's, which reads LTC_SAVE_TENSORS_FILE (PyTorch/XLA's reads
// its own XLA_SAVE_TENSORS_FILE: its nodes need not look for LTC's at every node).
// node_refs: nodes keep a reference to their line (decode_locations puts it back), not
// the line: false where a text lazyviz does not read prints them (the user's own dump).
void set_source_lines(py::object classify, bool reads_ltc_dump, bool node_refs) {
  if (!reads_ltc_dump) g_dump_decided.store(true);
  g_node_refs.store(node_refs);
  if (g_codes == nullptr) {
    g_codes = new std::unordered_map<PyObject*, CodeEntry>();
    g_lines = new std::unordered_map<std::pair<PyObject*, int>, int, CodeLineHash>();
  }
  ForgetCodes();  // a new trace may classify anew
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
  GetPythonFramesFunction() = NodeFrames;
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
  m.def("set_source_lines", &set_source_lines, "Record the user's line for each IR node (None: stop).",
        py::arg("classify"), py::arg("reads_ltc_dump") = true, py::arg("node_refs") = true);
  m.def("note_upload", &note_upload, "Note the calling line for a lazy tensor made from CPU data.");
  m.def("is_lazy", [](const at::Tensor& tensor) { return TryGetLtcTensor(tensor) != nullptr; },
        "Is this tensor a lazy tensor (not a CPU tensor that says device lazy, as a fallback's pieces)?");
  m.def("set_repeats", &set_repeats, "Repeat rows for hits seen before (None: stop).");
  m.def("take_rows", &take_rows, "The rows repeated since the last call, as bytes.");
  m.def("decode_locations", &DecodeLocations,
        "This text with each node's reference to its line (a line number from 1,000,000,000) put back as the line.");
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
  m.def("xla_start", &xla_start, "PyTorch/XLA: hand a loop's steady syncs on here (None: stop).");
  m.def("xla_add_text", &xla_add_text, "PyTorch/XLA: a report text Python handed on as a repeated row.");
  m.def("xla_quiet", &xla_quiet, "PyTorch/XLA: leave a steady sync's analysis out (the analyses are lazyviz's).");
  m.def("xla_analysed", &xla_analysed, "PyTorch/XLA: the stack the analysis Python just read was written from.");
  m.def("xla_clear_texts", &xla_clear_texts, "PyTorch/XLA: forget the report texts.");
  m.def("xla_arm", &xla_arm, "PyTorch/XLA: what Python's poll handed on, for the polls after it.");
  m.def("xla_poll", &xla_poll, "PyTorch/XLA: poll here; False where Python's poll must run.");
  m.def("xla_settle", &xla_settle, "PyTorch/XLA: disarm, and what was handed on here since armed.",
        py::arg("take_left_out") = true);
  m.def("xla_awaiting", &xla_awaiting, "PyTorch/XLA: does an execution handed on here await its time?");
  m.def("xla_take_rows", &xla_take_rows, "PyTorch/XLA: the rows repeated here since the last call, as bytes.");
  m.def("xla_time_row", &xla_time_row, "PyTorch/XLA: an execute time for a row repeated here.");
  m.def("xla_wrap_sync_site", &xla_wrap_sync_site, "PyTorch/XLA: wrap a call that syncs; the rare calls go to `slow`.");
  m.def("has_backend", &has_backend, "Is a lazy backend registered (initialised) in this process?");
  m.def("take_moved", &take_moved, "The counters that moved since the last execution (name -> delta).");
  m.def("users_dump_kept", &users_dump_kept, "Were source lines given up for the user's LTC dump?");
  m.def("keep_users_dump", &keep_users_dump, "Give up per-node source lines for the user's LTC dump.");
  // bench/per_node.py's anchor: torch's own frame getter at every node, untraced.
  m.def("torch_ir_debug", [](bool on) { FLAGS_torch_lazy_ir_debug = on; },
        "Turn LTC's IR debug on or off (with torch's own frame getter where lazyviz's is not installed).");
}
