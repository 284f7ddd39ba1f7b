"""The compact HTML summary shown under a `%%lazyviz` cell (and for a Recorder in a
notebook): findings first, each with its line, then the run in numbers, the first
recompile's explanation, and the drawing of the graph the first finding points at.
An HTML fragment with inline styles (notebooks strip <style> in some viewers);
everything from the trace is escaped."""
from __future__ import annotations

from html import escape

from lazyviz.analysis.recompiles import compiles_past_warmup, explain_execution
from lazyviz.analysis.run import Run
from lazyviz.errors import LazyvizError
from lazyviz.export import RenderOptions
from lazyviz.export.graphviz import SvgRenderer
from lazyviz.fix.proposals import propose
from lazyviz.present import CLEAN_RUN, compiles_text, plural, site_text, steps_text

DRAWN_NODES = 120  # a larger graph is drawn collapsed: a notebook output should stay small
COLOURS = {"error": "#c00", "warning": "#9a6700", "info": "#0969da"}


def _finding_items(recorded: Run) -> tuple[list[str], int | None]:
    run, analysis = recorded.info, recorded.analysis
    items = []
    for finding in analysis.findings:
        where = f" at <code>{escape(site_text(finding.frame, run.cwd))}</code>" if finding.frame else ""
        fix = f"<br><span style='color:#1a7f37'>fix: {escape(finding.fix)}</span>" if finding.fix else ""
        colour = COLOURS.get(finding.severity, "#222")
        items.append(f"<li><b style='color:{colour}'>{escape(finding.severity)}</b> "
                     f"{escape(finding.message)}{where}{fix}</li>")
    pointed = next((f.executions[0] for f in analysis.findings if f.executions), None)
    return items, pointed


def _numbers(recorded: Run) -> str:
    summary = recorded.summary
    steps = steps_text(summary, recorded.info.names)
    fallbacks = ", ".join(f"{escape(op)} x{n}" for op, n in summary.fallbacks.items()) or "none"
    compiles = compiles_text(summary.misses, compiles_past_warmup(recorded.recompiles, recorded.executions,
                                                             recorded.info.optimizer_marks))
    return (f"{plural(summary.executions, 'execution')} {steps} · {plural(summary.graphs, 'distinct graph')} · "
            f"{compiles} · fallbacks: {fallbacks}")


def _drawing(recorded: Run, index: int) -> str:
    execution = next((e for e in recorded.executions if e.index == index), None)
    if execution is None or not recorded.ir_texts.get(execution.graph):
        return ""  # light capture: no IR to draw
    try:
        svg = SvgRenderer().render(recorded, RenderOptions(execution=index, diff=True, max_nodes=DRAWN_NODES))
    except LazyvizError as error:  # no Graphviz here: say so, the rest of the summary stands
        return f"<p style='color:#666'>(no drawing: {escape(str(error))})</p>"
    svg = svg[svg.find("<svg"):]  # drop the XML prolog and doctype: this is inline
    return (f"<details open><summary>graph of execution {index} (what the first finding points at; "
            f"red: changed since the closest earlier graph)</summary>"
            f"<div style='max-width:100%;max-height:40em;overflow:auto'>{svg}</div></details>")


def summary_html(recorded: Run, draw: bool = True) -> str:
    run = recorded.info
    items, pointed = _finding_items(recorded)
    findings = (f"<ol style='margin:.3em 0'>{''.join(items)}</ol>" if items
                else f"<p style='color:#1a7f37'>No findings: {CLEAN_RUN}.</p>")
    parts = [
        "<div class='lazyviz-summary' style='font:13px/1.45 system-ui,sans-serif'>",
        f"<div><b>lazyviz</b> · {escape(run.command)} · {escape(run.backend)}, capture {escape(run.capture)} · "
        f"{escape(run.state)}</div>",
        f"<div style='margin-top:.4em'><b>Findings</b></div>{findings}",
        f"<div>{_numbers(recorded)}</div>",
    ]
    edits = sum(p.mechanical for p in propose(recorded))
    if edits:
        measured = (f"; measured: {escape(run.fix_trial.measured_text())}" if run.fix_trial
                    else "; <code>--try</code> measures them on a copy")
        parts.append(f"<div style='color:#1a7f37'>{edits} finding{'s have' if edits != 1 else ' has'} a proposed edit: "
                     f"<code>lazyviz fix {escape(str(recorded.path))}</code>{measured}</div>")
    first = next((r for r in recorded.recompiles if not r.warmup), None)
    if first is not None:
        explained = explain_execution(recorded.executions, recorded.ir_texts, first.execution) or first
        changes = "".join(f"<li>{escape(c.describe())}</li>" for c in (explained.diff.origins[:5] if explained.diff else []))
        parts.append(f"<div style='margin-top:.4em'><b>First recompile after warm-up</b>: execution "
                     f"{first.execution} at step {first.step}: {escape(explained.headline())}</div>"
                     + (f"<ul style='margin:.2em 0'>{changes}</ul>" if changes else ""))
    if draw and pointed is not None:
        parts.append(_drawing(recorded, pointed))
    parts.append(f"<div style='color:#666'>trace: <code>{escape(str(recorded.path))}</code> · "
                 f"<code>lazyviz view {escape(str(recorded.path))}</code> shows every execution</div></div>")
    return "".join(parts)
