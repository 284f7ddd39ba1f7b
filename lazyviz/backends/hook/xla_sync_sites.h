// PyTorch/XLA's sync sites: the common call without Python.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

// ---- PyTorch/XLA's sync sites ----------------------------------------------------------
//
// On XLA a sync site polls before its call (what ran before it is not its own) and after
// it, names the cause in the backend's SyncCause (a threading.local its Python polls
// read) and in its syncing dict, and counts the step. The tracer's Python wrapper
// (tracer._wrap_sync_site) cost a tiny step about 12 us for its three wrapped calls; here
// the common call runs without a frame. The rare ones go to that Python wrapper (`slow`):
// a read inside a step closure, a library's sync in the middle of a step. A closure
// runner with no closure waiting passes the call on; otherwise its Python wrapper runs.

// owner.name, a new reference; nullptr (cleared) where it cannot be read.
PyObject* Read(PyObject* owner, PyObject* name) {
  PyObject* value = PyObject_GetAttr(owner, name);
  if (value == nullptr) PyErr_Clear();
  return value;
}

// owner.name's truth; `otherwise` where it cannot be read.
bool Truth(PyObject* owner, PyObject* name, bool otherwise) {
  PyObject* value = Read(owner, name);
  if (value == nullptr) return otherwise;
  int truth = PyObject_IsTrue(value);
  Py_DECREF(value);
  if (truth < 0) PyErr_Clear();
  return truth < 0 ? otherwise : truth == 1;
}

// The caller is a library function that syncs in the middle of a step (SyncSite.mid_step).
bool MidStepCaller(const SyncSiteObject* site) {
  if (site->mid_step == nullptr) return false;
  PyFrameObject* frame = PyEval_GetFrame();  // the caller's: this call adds no frame
  if (frame == nullptr) return false;
  PyCodeObject* code = PyFrame_GetCode(frame);
  PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_name");
  Py_DECREF(code);
  if (name == nullptr) {
    PyErr_Clear();
    return false;
  }
  int found = PyDict_Contains(site->mid_step, name);
  Py_DECREF(name);
  if (found < 0) PyErr_Clear();
  return found == 1;
}

// Any device's step closures wait to run (torch_xla 2.9 keeps them on its device contexts).
bool ClosuresWaiting(PyObject* contexts) {
  static PyObject* step_closures = PyUnicode_InternFromString("step_closures");
  static PyObject* async_step_closures = PyUnicode_InternFromString("async_step_closures");
  PyObject* values = PyDict_Values(contexts);  // a copy: a closure may add a device
  if (values == nullptr) {
    PyErr_Clear();
    return true;
  }
  bool waiting = false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values) && !waiting; ++i) {
    PyObject* context = PyList_GET_ITEM(values, i);
    waiting = Truth(context, step_closures, false) || Truth(context, async_step_closures, false);
  }
  Py_DECREF(values);
  return waiting;
}

// The sync's poll: the hook's, else Python's. False, with its exception set, where Python's raised.
bool PollHere(XlaSteady* s) {
  if (xla_poll()) return true;
  PyObject* poll = s->poll.ptr();
  Py_INCREF(poll);
  PyObject* done = PyObject_CallNoArgs(poll);
  Py_DECREF(poll);
  Py_XDECREF(done);
  return done != nullptr;
}

bool Live(const XlaSteady* s, const SyncSiteObject* site) {
  return s != nullptr && s->counts_owner.ptr() == site->counts;
}

// A failed sync: the tracer keeps the executions the backend says failed (a polling
// backend learns of them only here), with the message the script gets.
void TellRaised(const SyncSiteObject* site) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != nullptr) PyException_SetTraceback(value, traceback);
  PyObject* done = PyObject_CallOneArg(site->on_raise, value);
  if (done == nullptr) PyErr_Clear();
  Py_XDECREF(done);
  PyErr_Restore(type, value, traceback);
}

PyObject* XlaSyncSiteCall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* site = reinterpret_cast<SyncSiteObject*>(callable);
  XlaSteady* s = g_xla;
  // A wrapper of a stopped tracer that someone kept (wrapped again on top of it) only
  // passes the call on.
  if (!Live(s, site)) return PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  if (site->runs_closures) {  // with none waiting, Python's runner would only pass the call on
    bool waiting = site->contexts == nullptr || ClosuresWaiting(site->contexts);
    return PyObject_Vectorcall(waiting ? site->slow : site->original, args, nargsf, kwnames);
  }
  PyObject* sync = s->sync.ptr();
  PyObject* outer = Read(sync, g_cause_name);
  if (outer == nullptr) return PyObject_Vectorcall(site->slow, args, nargsf, kwnames);
  bool inside = outer != Py_None;  // the outermost cause wins (print calls item)
  Py_DECREF(outer);
  // A CPU tensor's .item() (AdamW's step counts) syncs nothing: no polls.
  if (inside || (site->device_flag != nullptr && PyVectorcall_NARGS(nargsf) > 0 &&
                 !Truth(args[0], site->device_flag, true))) {
    return PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  }
  if (Truth(sync, g_in_closure_name, false) || MidStepCaller(site)) {
    return PyObject_Vectorcall(site->slow, args, nargsf, kwnames);
  }
  if (!PollHere(s)) return nullptr;  // as Python's wrapper: executions from before are not this call's
  s = g_xla;
  if (!Live(s, site)) return PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  // Held for the call: the tracer may stop inside it, and with it the hook's state.
  py::object held_sync = s->sync, syncing = s->syncing;
  PyObject* thread = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
  if (thread == nullptr || PyObject_SetAttr(sync, g_cause_name, site->cause) < 0 ||
      PyObject_SetAttr(sync, g_detail_name, site->detail) < 0 ||
      PyObject_SetAttr(sync, g_closures_from_name, Py_None) < 0 ||
      PyDict_SetItem(syncing.ptr(), thread, site->syncing_entry) < 0) {
    PyErr_Clear();  // lazyviz's own: the call goes on as Python's wrapper would run it
    PyObject_SetAttr(sync, g_cause_name, Py_None);
    PyErr_Clear();
    Py_XDECREF(thread);
    return PyObject_Vectorcall(site->slow, args, nargsf, kwnames);
  }
  int64_t executions_before = s->counts[0];
  bool outer_site = t_in_site;
  t_in_site = true;  // XLA's analysis of this call may be left out (xla_quiet.h)
  PyObject* result = PyObject_Vectorcall(site->original, args, nargsf, kwnames);
  t_in_site = outer_site;
  s = g_xla;
  bool live = Live(s, site);
  if (result != nullptr && live) {
    if (!PollHere(s)) {
      Py_CLEAR(result);
    } else if (site->ends_step) {  // by its own graph, not one its closures ran
      PyObject* from = Read(sync, g_closures_from_name);
      int64_t own_until = from == nullptr || from == Py_None ? s->counts[0] : PyLong_AsLongLong(from);
      if (PyErr_Occurred()) PyErr_Clear();
      Py_XDECREF(from);
      if (site->empty_sync_ends_step || own_until > executions_before) ++s->counts[1];
    }
  }
  if (result == nullptr && live && PyErr_ExceptionMatches(PyExc_Exception)) TellRaised(site);
  PyObject *type, *value, *traceback;  // the call's exception, kept across the cleanup
  PyErr_Fetch(&type, &value, &traceback);
  if (PyObject_SetAttr(sync, g_cause_name, Py_None) < 0) PyErr_Clear();
  if (PyDict_DelItem(syncing.ptr(), thread) < 0) PyErr_Clear();
  Py_DECREF(thread);
  PyErr_Restore(type, value, traceback);
  return result;
}

PyObject* NoneAsNull(py::object value) { return value.is_none() ? nullptr : value.release().ptr(); }

// A sync site of PyTorch/XLA's (see above): `slow` is the tracer's Python wrapper of the
// same call; mid_step, device_flag and contexts None where the site has none.
py::object xla_wrap_sync_site(py::object original, py::object slow, py::str cause, py::str detail, py::object counts,
                              bool ends_step, bool empty_sync_ends_step, bool runs_closures, py::object mid_step,
                              py::object device_flag, py::object on_raise, py::object contexts) {
  SyncSiteObject* site = NewSyncSite(XlaSyncSiteCall, std::move(original), std::move(cause), std::move(detail),
                                     std::move(counts), ends_step, empty_sync_ends_step, runs_closures);
  auto owned = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(site));
  site->syncing_entry = PyTuple_Pack(3, site->cause, site->detail, Py_None);
  if (site->syncing_entry == nullptr) throw py::error_already_set();
  site->slow = slow.release().ptr();
  site->on_raise = on_raise.release().ptr();
  site->mid_step = NoneAsNull(std::move(mid_step));
  site->device_flag = NoneAsNull(std::move(device_flag));
  site->contexts = NoneAsNull(std::move(contexts));
  return owned;
}

}  // namespace
