// The calling stack's signature, for repeating a recorded row.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

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

}  // namespace
