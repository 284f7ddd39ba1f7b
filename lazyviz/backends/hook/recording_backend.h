// The recording backend: counters, uploads, and each execution reported to Python.
// A part of hook.cpp's one translation unit: included there, in order, after the includes.
#pragma once

namespace {

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

// ", location=fn@file:line", as torch's EmitShortFrameInfo prints it (the file's base
// name). Made of strings: the hook uses no C++ stream (see hook.cpp).
std::string LocationText(const SourceLocation& where) {
  size_t slash = where.file.find_last_of('/');
  return ", location=" + where.function + "@" + where.file.substr(slash == std::string::npos ? 0 : slash + 1) + ":" +
         std::to_string(where.line);
}

// The fields of Python's answer, Recorded(index, kind, repeat, fallback) in
// lazyviz/backends/__init__.py, by position: tests/test_hook_layout.py checks them.
constexpr Py_ssize_t kRecordedKind = 1, kRecordedRepeat = 2, kRecordedFallback = 3;

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
    std::string out;
    out.reserve(text.size() + marks.size() * 48);
    for (size_t start = 0, number = 0; start < text.size(); ++number) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
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
      out += line;
      out += '\n';
    }
    return out;
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
      if (repeats != nullptr && repeats == g_repeats && PyTuple_Check(recorded.ptr()) &&
          PyTuple_GET_SIZE(recorded.ptr()) > kRecordedFallback) {
        int64_t kind = PyLong_AsLongLong(PyTuple_GET_ITEM(recorded.ptr(), kRecordedKind));
        bool repeat = PyObject_IsTrue(PyTuple_GET_ITEM(recorded.ptr(), kRecordedRepeat)) == 1;
        bool fallback = PyObject_IsTrue(PyTuple_GET_ITEM(recorded.ptr(), kRecordedFallback)) == 1;
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
      if (error.matches(PyExc_MemoryError)) {
        error.restore();  // out of memory: nothing more to allocate, not even the report of it
        PyErr_Clear();
      } else if (error.matches(PyExc_Exception)) {
        // A tracing bug must never break the user's program (the tracer counts its own).
        error.discard_as_unraisable("lazyviz execution hook");
      } else {
        KeepForScript(error);  // KeyboardInterrupt, SystemExit: the script's, not ours
      }
    } catch (const std::exception&) {
      // pybind11 could not make an object (a run out of memory): this row is lost, and the
      // script goes on as it would untraced, to the backend's own error.
      PyErr_Clear();
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

}  // namespace
