// What every part uses: a script's KeyboardInterrupt kept for the script, and the clock.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

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

}  // namespace
