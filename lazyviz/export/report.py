"""`lazyviz report`: the run summary as text (for people) or JSON (a versioned contract)."""
from __future__ import annotations

import json
from pathlib import Path

from lazyviz.analysis import Analysis, analyze
from lazyviz.analysis.ranks import Divergence
from lazyviz.analysis.recompiles import Recompile
from lazyviz.analysis.summary import graph_stats
from lazyviz.export import Renderer, RenderRequest, RunData
from lazyviz.present import divergence_text, plural, short_path, site_text
from lazyviz.trace.model import Execution, RunInfo

REPORT_FORMAT = "lazyviz-report"
REPORT_VERSION = 1


def recompile_json(recompile: Recompile) -> dict:
    return {
        "execution": recompile.execution,
        "step": recompile.step,
        "graph": recompile.graph,
        "closest_graph": recompile.closest,
        "closest_execution": recompile.closest_execution,
        "same_site": recompile.same_site,
        "new_graph": recompile.new_graph,  # no earlier graph is close: closest_graph is only the nearest
        "choice": recompile.choice,
        "warmup": recompile.warmup,
        "site": recompile.frame.to_json() if recompile.frame else None,
        "summary": recompile.headline(),
        "changes": [
            {"kind": c.kind, "node": c.node or c.old_node, "op": c.op, "before": c.before,
             "after": c.after, "origin": c.origin,
             "source": recompile.frame.to_json() if recompile.frame else None,  # the sync site
             # The line that built the node (TS with --capture full, XLA): "train.py:28".
             "location": c.source_line, "built_at": _built_at(c.location)}
            for c in recompile.changes
        ],
        "context": recompile.context,
    }


def _built_at(location: str) -> dict | None:
    """{"file": "train.py", "line": 28, "function": "main"} from "main@train.py:28"."""
    function, _, where = location.rpartition("@")
    file, _, line = where.rpartition(":")
    return {"file": file, "line": int(line), "function": function} if file and line.isdigit() else None


def json_report(run: RunInfo, executions: list[Execution], ir_texts: dict[str, str]) -> dict:
    """The machine-readable report; field names and meanings are stable within a version."""
    analysis = analyze(run, executions, ir_texts)
    summary = analysis.summary
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "run": {
            "argv": run.argv,
            "source": run.source,
            "module": run.module,
            "backend": run.backend,
            "capture": run.capture,
            "torch": run.versions.get("torch"),
            "versions": run.versions,
            "python": run.versions.get("python"),
            "start_time": run.start_time,
            "finished": run.finished,
            "exit_status": run.exit_status,
            "error": run.error,
            "rank": run.rank,
        },
        "steps": summary.steps,
        "executions": [
            {
                "index": e.index,
                "step": e.step,
                "cause": e.cause,
                "detail": e.detail,
                "frame": e.frame.to_json() if e.frame else None,
                "graph": e.graph,
                "nodes": e.nodes,
                "cache": e.cache,
                "sync_ms": e.sync_ms,
                "trace_ms": e.trace_ms,
                "compile_ms": e.compile_ms,
                "execute_ms": e.execute_ms,
                "fallback_ops": e.fallback_ops,
            }
            for e in executions
        ],
        "graphs": graph_stats(executions),
        "fallbacks": summary.fallbacks,
        "recompiles": [recompile_json(r) for r in analysis.recompiles],
        "findings": [f.to_json() for f in analysis.findings],
        "summary": {
            "executions": summary.executions,
            "graphs": summary.graphs,
            "misses": summary.misses,
            "causes": summary.causes,
            "sync_ms": round(summary.sync_ms, 3),
            "trace_ms": round(summary.trace_ms, 3),
        },
    }


def text_report(run: RunInfo, executions: list[Execution], ir_texts: dict[str, str],
                trace_path: Path | None = None) -> str:
    analysis: Analysis = analyze(run, executions, ir_texts)
    summary = analysis.summary
    lines = [f"lazyviz: {run.command} ({run.backend}, capture {run.capture}) {run.state}"]
    if summary.steps:
        steps = f"in {plural(summary.steps, 'step')} ({summary.executions / summary.steps:.1f} per step)"
    else:
        steps = "and no mark_step() (no steps)"
    lines.append(
        f"  {plural(summary.executions, 'execution')} {steps}, {plural(summary.graphs, 'distinct graph')}, "
        f"{plural(summary.misses, 'cache miss')}, sync {summary.sync_ms:.1f} ms, "
        f"tracing between graphs {summary.trace_ms:.1f} ms"
        + (f", start-up before the first graph {run.startup_ms:.0f} ms" if run.startup_ms is not None else "")
    )
    causes = ", ".join(f"{cause} {n}" for cause, n in summary.causes.items())
    if causes:
        lines.append(f"  causes: {causes}")
    if summary.fallbacks:
        lines.append("  fallbacks: " + ", ".join(f"{op} x{n}" for op, n in summary.fallbacks.items()))
    if summary.sites:
        lines.append("  most frequent sync sites:")
        for site in summary.sites[:5]:
            causes = ", ".join(f"{c} {n}" for c, n in site.causes.items())
            lines.append(f"    {site.executions:6d}x  {short_path(site.site, run.cwd)} in {site.function} ({causes})")
        lines.append("  slowest sync sites (total sync ms):")
        for site in summary.slowest_sites[:3]:
            lines.append(
                f"    {site.total_ms:9.1f} ms  {short_path(site.site, run.cwd)} "
                f"({site.executions}x, {site.mean_ms:.2f} ms each)"
            )
    if analysis.findings:
        lines.append("  findings:")
        recompiles = {r.execution: r for r in analysis.recompiles}
        for finding in analysis.findings:
            where = f" [{site_text(finding.frame, run.cwd)}]" if finding.frame else ""
            lines.append(f"    {finding.severity}: {finding.message}{where}")
            # A recompile's other origins, once, under its headline (which shows the first).
            recompile = recompiles.get(finding.executions[0]) if finding.kind == "recompile" else None
            if recompile is not None and recompile.diff is not None:
                for change in recompile.diff.origins[1:4]:
                    lines.append(f"      also: {change.describe()}")
            if finding.fix:
                lines.append(f"      fix: {finding.fix}")
    if run.tracer_errors:
        lines.append(f"  lazyviz's own errors while tracing (the script was not affected): {run.tracer_errors[0]}")
    if trace_path is not None:
        lines.append(f"  trace: {trace_path}")
    return "\n".join(lines) + "\n"


class TextRenderer(Renderer):
    name = "text"
    for_people = True

    def render(self, request: RenderRequest) -> str:
        data = request.data
        return text_report(data.run, data.executions, data.ir_texts, data.path)


class JsonRenderer(Renderer):
    name = "json"

    def render(self, request: RenderRequest) -> str:
        data = request.data
        return json.dumps(json_report(data.run, data.executions, data.ir_texts), indent=1) + "\n"


def ranks_json_report(ranks: dict[int, RunData], divergence: Divergence | None) -> dict:
    """The versioned report of a multi-process run: each rank's report, and where they diverge."""
    return {
        "format": REPORT_FORMAT, "version": REPORT_VERSION,
        "ranks": [{"rank": rank, "trace": str(data.path), "report": json_report(data.run, data.executions, data.ir_texts)}
                  for rank, data in ranks.items()],
        "divergence": [] if divergence is None else [{
            "kind": "divergence", "severity": "error", "step": divergence.step,
            "message": divergence.message(),
            "ranks": [{"ranks": ranks_, "graphs": list(seq)} for seq, ranks_ in divergence.groups.items()],
            "graphs": {str(rank): graph for rank, graph in divergence.graphs.items()},
            "site": divergence.frame.to_json() if divergence.frame else None,
            "change": divergence.change, "divergent_steps": divergence.divergent_steps,
        }],
    }


def ranks_text_report(folder: str, ranks: dict[int, RunData], divergence: Divergence | None) -> str:
    parts = [f"lazyviz: {len(ranks)} ranks in {folder}"]
    parts.append(f"  error: {divergence_text(divergence)}" if divergence is not None
                 else "  ranks ran the same graphs at every common step")
    for rank, data in ranks.items():
        parts.append(f"\n[rank {rank}] " + text_report(data.run, data.executions, data.ir_texts, data.path))
    return "\n".join(parts) + "\n"
