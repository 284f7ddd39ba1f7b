// Sync sites: which call forced an execution.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

// ---- Sync sites: which call forced an execution ---------------------------------------
//
// mark_step(), .item(), print(tensor)... are wrapped by SyncSite objects: C callables, so
// a wrapped call adds no Python frame and no dict lookups (the tiny-step loop calls
// mark_step 10^5 times). While one runs, this thread's cause is its strings (borrowed:
// the wrapper holds them for as long as it runs). The outermost call wins: print calls
// item, and only print is the user's.
thread_local PyObject* t_cause = nullptr;
thread_local PyObject* t_detail = nullptr;
// While a step's closures run (torch._lazy.run_step_closures, wrapped as a SyncSite that
// runs_closures), the step's cause is suspended: a read inside a closure is its own sync, named "... in a
// step closure", and never ends a step. t_closures_from: the execution count when the
// running step's closures began (-1: none), so only the step's own graph makes it a step.
thread_local bool t_in_closure = false;
thread_local int64_t t_closures_from = -1;

struct SyncSiteObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* original;
  PyObject* cause;
  PyObject* detail;
  PyObject* closure_detail;  // detail + " in a step closure"
  PyObject* counts;  // the tracer's array('q', [executions, steps]): live while it records
  PyObject* dict;    // functools.update_wrapper's __name__, __doc__, __wrapped__...
  bool ends_step;
  bool empty_sync_ends_step;
  bool runs_closures;  // the step's closure runner, not a sync
  // A polling backend's (PyTorch/XLA: xla_sync_sites.h), nullptr for TorchScript's: the
  // common path runs in C, the rest in the tracer's Python wrapper (`slow`).
  PyObject* slow;
  PyObject* syncing_entry;  // (cause, detail, None): the backend's syncing dict's value meanwhile
  PyObject* mid_step;       // a library caller's function name -> detail (SyncSite.mid_step)
  PyObject* device_flag;    // a Tensor method's "is_<device>": a CPU tensor's call syncs nothing
  PyObject* on_raise;       // the tracer's _sync_raised
  PyObject* contexts;       // a closure runner's: the device contexts that hold the closures
};

// The step's closures, run inside its step-ending call: its cause suspended meanwhile.
PyObject* RunClosures(SyncSiteObject* site, Repeats* repeats, PyObject* const* args, size_t nargsf,
                      PyObject* kwnames) {
  if (t_in_closure || repeats == nullptr || repeats->counts_owner.ptr() != site->counts) {
    return PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  }
  PyObject* cause = t_cause;
  PyObject* detail = t_detail;
  t_closures_from = repeats->counts[0];
  t_cause = t_detail = nullptr;
  t_in_closure = true;
  PyObject* result = PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  t_in_closure = false;
  t_cause = cause;
  t_detail = detail;
  return result;
}

PyObject* SyncSiteCall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* site = reinterpret_cast<SyncSiteObject*>(callable);
  Repeats* repeats = g_repeats;
  if (site->runs_closures) return RunClosures(site, repeats, args, nargsf, kwnames);
  // A wrapper of a stopped tracer that someone kept (wrapped again on top of it) only
  // passes the call on, as does one called inside another's call.
  if (t_cause != nullptr || repeats == nullptr || repeats->counts_owner.ptr() != site->counts) {
    return PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  }
  const bool in_closure = t_in_closure;
  // The frame getter's one-frame cache holds the last frame that built a node, and with it
  // that frame's locals: lazy tensors the script already let go would still be live when
  // mark_step() collects them (LTC's SyncedTensorsWithIR: one more a step with Adam).
  ForgetLastFrame();
  t_cause = site->cause;
  t_detail = in_closure ? site->closure_detail : site->detail;
  if (!in_closure) t_closures_from = -1;
  int64_t executions_before = repeats->counts[0];
  PyObject* result = PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  t_cause = t_detail = nullptr;
  // A step ends when a step-ending sync returns (the tracer may have stopped inside it),
  // by its own graph: not one its closures ran, nor a read inside a closure.
  repeats = g_repeats;
  if (result != nullptr && site->ends_step && !in_closure && repeats != nullptr &&
      repeats->counts_owner.ptr() == site->counts) {
    int64_t own_until = t_closures_from >= 0 ? t_closures_from : repeats->counts[0];
    if (site->empty_sync_ends_step || own_until > executions_before) ++repeats->counts[1];
  }
  if (!in_closure) t_closures_from = -1;
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
  Py_VISIT(site->slow);
  Py_VISIT(site->on_raise);
  Py_VISIT(site->contexts);
  return 0;
}

int SyncSiteClear(PyObject* self) {
  auto* site = reinterpret_cast<SyncSiteObject*>(self);
  Py_CLEAR(site->original);
  Py_CLEAR(site->counts);
  Py_CLEAR(site->dict);
  Py_CLEAR(site->slow);
  Py_CLEAR(site->on_raise);
  Py_CLEAR(site->contexts);
  return 0;
}

void SyncSiteDealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  SyncSiteClear(self);
  auto* site = reinterpret_cast<SyncSiteObject*>(self);
  Py_CLEAR(site->cause);
  Py_CLEAR(site->detail);
  Py_CLEAR(site->closure_detail);
  Py_CLEAR(site->syncing_entry);
  Py_CLEAR(site->mid_step);
  Py_CLEAR(site->device_flag);
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

SyncSiteObject* NewSyncSite(vectorcallfunc call, py::object original, py::str cause, py::str detail,
                            py::object counts, bool ends_step, bool empty_sync_ends_step, bool runs_closures) {
  auto* site = PyObject_GC_New(SyncSiteObject, g_sync_site_type);
  if (site == nullptr) throw py::error_already_set();
  site->vectorcall = call;
  site->original = original.release().ptr();
  site->cause = cause.release().ptr();
  site->closure_detail = py::str(std::string(detail) + " in a step closure").release().ptr();
  site->detail = detail.release().ptr();
  site->counts = counts.release().ptr();
  site->dict = nullptr;
  site->ends_step = ends_step;
  site->empty_sync_ends_step = empty_sync_ends_step;
  site->runs_closures = runs_closures;
  site->slow = site->syncing_entry = site->mid_step = site->device_flag = site->on_raise = site->contexts = nullptr;
  PyObject_GC_Track(site);
  return site;
}

// wrap_sync_site(original, cause, detail, counts, ends_step, empty_sync_ends_step, runs_closures)
py::object wrap_sync_site(py::object original, py::str cause, py::str detail, py::object counts, bool ends_step,
                          bool empty_sync_ends_step, bool runs_closures) {
  SyncSiteObject* site = NewSyncSite(SyncSiteCall, std::move(original), std::move(cause), std::move(detail),
                                     std::move(counts), ends_step, empty_sync_ends_step, runs_closures);
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(site));
}

// This thread's sync cause for the tracer's Python side: .cause and .detail, None when no sync site runs.
struct SyncState {};

// A hit repeats a row only under the same cause.
uint64_t WithCause(uint64_t site) {
  for (PyObject* value : {t_cause, t_detail}) {  // interned per site: the pointer names the string
    if (value != nullptr && g_repeats->kept.insert(value).second) Py_INCREF(value);
    site = Mix(site, reinterpret_cast<uintptr_t>(value));
  }
  return site;
}

}  // namespace
