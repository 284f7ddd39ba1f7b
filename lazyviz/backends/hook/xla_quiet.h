// PyTorch/XLA: a steady sync's execution analysis, not written again.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

// ---- PyTorch/XLA's analyses, left out where lazyviz knows them --------------------------
//
// XLA's execution analysis (PT_XLA_DEBUG_LEVEL=2) is lazyviz's only word of which graph a
// sync ran, and it costs a loop's cache hit 10-15 us: it walks the Python stack, formats
// the text and opens, appends to and closes the file. A steady sync writes the same text
// each time. So, where the analyses are lazyviz's own (not the user's file or stderr):
// - XLA's executor gets its analysis's Python frames from torch's GetPythonFrames; from a
//   sync site, with one cache hit since the site's poll and a stack a steady text was
//   written from, it gets none, and an analysis without frames is not written.
// - XLA's executor reaches torch's TensorCollectionBarrier with the graph's hash right
//   after; the hook's poll after the call hands the sync on as the steady text of that
//   stack and graph, or gives Python's poll the text XLA would have written (xla_steady.h).
// Both are XLA's calls into torch, redirected (redirect.h).

thread_local bool t_in_site = false;  // inside an XLA sync site's call (xla_sync_sites.h)

struct BarrierPeek : LazyGraphExecutor {
  using LazyGraphExecutor::SyncTensorCollection;  // protected there
};
using FramesFunction = std::vector<SourceLocation> (*)();
using BarrierFunction = void (*)(LazyGraphExecutor*, BarrierPeek::SyncTensorCollection*);
FramesFunction g_frames = nullptr;
BarrierFunction g_barrier = nullptr;

std::vector<SourceLocation> FramesOrLeftOut() {
  if (!t_in_site) return g_frames();
  bool leave_out = false;
  PyGILState_STATE gil = PyGILState_Ensure();  // XLA may have released it, as torch's own does
  XlaSteady* s = g_xla;
  if (s != nullptr && s->quiet) {
    // XLA makes its counters at their first count: both are there once a graph has run.
    if (s->cached == nullptr) s->cached = LazyCounter("CachedCompile");
    if (s->uncached == nullptr) s->uncached = LazyCounter("UncachedCompile");
    int64_t compiled = s->uncached != nullptr ? s->uncached->Value() : 0;
    int64_t lookups = (s->cached != nullptr ? s->cached->Value() : 0) + compiled;
    uint64_t stack = StackSignature();
    bool from_steady = std::any_of(s->texts.begin(), s->texts.end(),
                                   [&](const SteadyText& text) { return text.stack == stack; });
    std::lock_guard<std::mutex> lock(g_analysis_mu);
    // One cache hit since the site's poll, the only sync running, from a steady text's stack.
    leave_out = s->armed && !g_left_out.pending && compiled == s->compiled && lookups == s->executed + 1 &&
                from_steady && SyncsAlone(*s);
    (leave_out ? g_left_out : g_analysed) = Analysis{leave_out, stack, lookups};
    t_awaiting_hash = leave_out ? 1 : 2;
  }
  PyGILState_Release(gil);
  return leave_out ? std::vector<SourceLocation>() : g_frames();
}

void BarrierSeen(LazyGraphExecutor* executor, BarrierPeek::SyncTensorCollection* collection) {
  if (t_awaiting_hash != 0 && !collection->indices.empty()) {
    std::lock_guard<std::mutex> lock(g_analysis_mu);
    Analysis& analysis = t_awaiting_hash == 1 ? g_left_out : g_analysed;
    analysis.hashed = true;
    analysis.hash = collection->hash;
    t_awaiting_hash = 0;
  }
  g_barrier(executor, collection);
}

// Leave a steady sync's analysis out from now on (on: the analyses are lazyviz's own),
// or not; whether it does.
bool xla_quiet(bool on) {
  XlaSteady* s = g_xla;
  if (s == nullptr) return false;
  // Once: the barrier first, so that no analysis is left out without its hash.
  if (on && g_barrier == nullptr) {
    RedirectCalls("_XLAC.", "_ZN5torch4lazy17LazyGraphExecutor23TensorCollectionBarrierEPNS1_20SyncTensorCollectionE",
                  reinterpret_cast<void*>(&BarrierSeen), reinterpret_cast<void**>(&g_barrier));
  }
  if (on && g_barrier != nullptr && g_frames == nullptr) {
    RedirectCalls("_XLAC.", "_ZN5torch4lazy15GetPythonFramesEv", reinterpret_cast<void*>(&FramesOrLeftOut),
                  reinterpret_cast<void**>(&g_frames));
  }
  s->quiet = on && g_barrier != nullptr && g_frames != nullptr;
  return s->quiet;
}

// The stack the last analysis written from a sync site was written from, where it was of
// graph `hash` at XLA's `lookups`-th cache lookup (the text Python just read); else 0.
uint64_t xla_analysed(const std::string& hash, int64_t lookups) {
  std::lock_guard<std::mutex> lock(g_analysis_mu);
  Analysis analysed = g_analysed;
  g_analysed = Analysis();
  return analysed.hashed && analysed.lookups == lookups && HashToString(analysed.hash) == hash ? analysed.stack : 0;
}

}  // namespace
