"""Chrome trace event JSON (Perfetto, chrome://tracing): Python tracing time on one
track, executions on another, each named by cause and site, compiles marked."""
from __future__ import annotations

import json

from lazyviz.analysis.run import Run
from lazyviz.export import Renderer, RenderOptions
from lazyviz.present import site_text
from lazyviz.trace.model import Execution, RunInfo

PID = 1
STEP_TRACK, TRACING_TRACK, EXECUTION_TRACK = 1, 2, 3


def chrome_trace(run: RunInfo, executions: list[Execution]) -> dict:
    events: list[dict] = [
        {"ph": "M", "pid": PID, "name": "process_name", "args": {"name": f"lazyviz: {run.command}"}},
        {"ph": "M", "pid": PID, "tid": STEP_TRACK, "name": "thread_name", "args": {"name": "steps"}},
        {"ph": "M", "pid": PID, "tid": TRACING_TRACK, "name": "thread_name", "args": {"name": "python tracing"}},
        {"ph": "M", "pid": PID, "tid": EXECUTION_TRACK, "name": "thread_name", "args": {"name": "executions"}},
    ]
    step_spans: dict[int, list[float]] = {}
    for e in executions:
        start_us = e.start_ms * 1000
        site = site_text(e.frame, run.cwd)
        if e.trace_ms > 0:
            events.append({"ph": "X", "pid": PID, "tid": TRACING_TRACK, "name": f"tracing before #{e.index}",
                           "ts": start_us - e.trace_ms * 1000, "dur": e.trace_ms * 1000,
                           "args": {"step": e.step}})
        events.append({
            "ph": "X", "pid": PID, "tid": EXECUTION_TRACK, "name": f"{e.cause} {site}",
            "ts": start_us, "dur": max(e.sync_ms, 0.001) * 1000,
            "cat": "compile" if e.is_miss else "cached",
            "args": {"index": e.index, "step": e.step, "graph": e.graph, "nodes": e.nodes, "cache": e.cache,
                     "detail": e.detail, "site": e.frame.site if e.frame else None,
                     "compile_ms": e.compile_ms, "execute_ms": e.execute_ms, "fallback_ops": e.fallback_ops},
        })
        if e.is_miss:
            events.append({"ph": "X", "pid": PID, "tid": EXECUTION_TRACK, "name": "compile", "cat": "compile",
                           "ts": start_us, "dur": max(e.compile_ms, 0.001) * 1000, "args": {"graph": e.graph}})
        span = step_spans.setdefault(e.step, [start_us - e.trace_ms * 1000, 0.0])
        span[1] = start_us + e.sync_ms * 1000
    for step, (begin, end) in sorted(step_spans.items()):
        events.append({"ph": "X", "pid": PID, "tid": STEP_TRACK, "name": f"step {step}", "ts": begin,
                       "dur": max(end - begin, 1.0)})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"lazyviz": True, "backend": run.backend, "torch": run.versions.get("torch")}}


class ChromeRenderer(Renderer):
    name = "chrome"

    def render(self, run: Run, options: RenderOptions) -> str:
        return json.dumps(chrome_trace(run.info, run.executions)) + "\n"
