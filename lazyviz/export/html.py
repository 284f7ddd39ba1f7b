"""`lazyviz report --format html`: one self-contained page (inline CSS and JS, no
network) to share a run: problems first, each linked to its executions; per-step
timing; a sortable and filterable executions table with a `why` column; and the graphs
the problems point at, drawn, with their diff, IR and backend code. Everything from the
trace is escaped."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from html import escape

from lazyviz.analysis.collectives import collective_rows
from lazyviz.analysis.findings import FallbackDetails, Finding
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.ir import IRGraph
from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.memory import peak_text
from lazyviz.analysis.recompiles import Recompile, explain_execution
from lazyviz.analysis.run import Run
from lazyviz.analysis.summary import chart_scale, step_times
from lazyviz.export import Renderer, RenderOptions
from lazyviz.export.graphviz import ExportError, execution_dot, render_svg
from lazyviz.fix.proposals import Proposal, propose
from lazyviz.present import (
    ADDED,
    CARRIED,
    CLEAN_RUN,
    KIND_LABELS,
    ORIGIN,
    collectives_text,
    diff_marks,
    finding_groups,
    readable_backend,
    readable_ir,
    site_text,
    size_text,
    why_text,
)
from lazyviz.trace.model import Execution, PeakRss, TrialRecord

MAX_DRAWN = 8  # graphs the problems point at, drawn with Graphviz; the rest say how to draw them
# Boxes per drawing on the page (`lazyviz export` draws up to 300): dot's time grows
# faster than the boxes, and eight 300-box drawings took 5.5 s of a 6.4 s page.
PAGE_MAX_NODES = 120
# Lines of a graph's IR, backend text or diff on the page: the whole text is one command away.
PAGE_MAX_LINES = 300
DIFF_CONTEXT = 3  # unchanged nodes shown around each changed one in a long diff
MIN_FALLBACK_NODES = 3  # a fallback's sync graph this small is only the op's inputs: not drawn

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ccc}
code,pre{font:12px/1.35 ui-monospace,monospace}pre{background:#f6f8fa;padding:.6em;overflow:auto;max-height:30em}
.sev-warning{color:#9a6700}.sev-error{color:#c00}.sev-info{color:#0969da}.fix{color:#1a7f37}
table{border-collapse:collapse;font-size:12px}th,td{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}
th{cursor:pointer;background:#f0f0f0;position:sticky;top:0}td.num{text-align:right}
tr.miss td.cache{color:#c00;font-weight:bold}tr.cause-other td.cause,tr.cause-item td.cause,tr.cause-print td.cause,
tr.cause-cpu td.cause,tr.cause-tolist td.cause,tr.cause-bool td.cause{color:#9a6700;font-weight:bold}
tr.cause-fallback td.cause{color:#8250df;font-weight:bold}.scroll{max-height:28em;overflow:auto}
.same{color:#888;font-style:italic}.changed{background:#ffe0e0}.carried{background:#fff6d6}.added{background:#dcffe4}.removed{background:#ffe0e0}
#filter{margin:.4em 0;width:24em}.finding{margin:.6em 0;padding:.4em .6em;border-left:4px solid #d4a72c;background:#fffbea}
.op code{color:#8250df;font-weight:bold}td.why{color:#555}tr.cause-fallback td.why{color:#8250df}tr.miss td.why{color:#c00}
.drawing{overflow:auto;cursor:zoom-in}.drawing svg{max-width:100%;height:auto}.drawing.zoom svg{max-width:none}
.drawing.zoom{cursor:zoom-out}svg.chart text{font-size:10px;fill:#555}tr:target{outline:2px solid #0969da}
"""

SCRIPT = """
(function(){
  const table=document.getElementById('executions');const body=table.tBodies[0];
  const rows=Array.from(body.rows);let dir={};
  function sortBy(col,desc){
    const idx=Array.from(table.tHead.rows[0].cells).findIndex(c=>c.dataset.col===col);
    if(idx<0)return;const num=table.tHead.rows[0].cells[idx].dataset.type==='num';
    rows.sort((a,b)=>{const x=a.cells[idx].textContent,y=b.cells[idx].textContent;
      const r=num?(parseFloat(x)-parseFloat(y)):x.localeCompare(y);return desc?-r:r;});
    rows.forEach(r=>body.appendChild(r));table.dataset.sorted=(desc?'-':'')+col;}
  function filter(text){const t=text.toLowerCase();
    rows.forEach(r=>{r.style.display=r.textContent.toLowerCase().includes(t)?'':'none';});}
  table.tHead.rows[0].addEventListener('click',e=>{const col=e.target.dataset.col;if(!col)return;
    dir[col]=!dir[col];sortBy(col,dir[col]);});
  const input=document.getElementById('filter');input.addEventListener('input',()=>filter(input.value));
  const params=new URLSearchParams(location.hash.slice(1));
  if(params.get('sort')){const s=params.get('sort');sortBy(s.replace(/^-/,''),s.startsWith('-'));}
  if(params.get('filter')){input.value=params.get('filter');filter(input.value);}
  document.querySelectorAll('.drawing').forEach(d=>d.addEventListener('click',()=>d.classList.toggle('zoom')));
})();
"""

COLUMNS = [("index", "#", "num"), ("step", "step", "num"), ("cause", "cause", "text"), ("site", "site", "text"),
           ("graph", "graph", "text"), ("nodes", "nodes", "num"), ("cache", "cache", "text"),
           ("sync_ms", "sync ms", "num"), ("trace_ms", "trace ms", "num"), ("why", "why", "text")]


CHART_WIDTH = 1000  # the charts' own units: they are drawn to the page's width


def _bars(values: list[float], labels: list[str], titles: list[str], colours: list[str], top: float, unit: str,
          name: str) -> str:
    """A bar chart that fills the page's width: a value axis, a label every 40 units or so."""
    left, height, bottom = 80, 120, 18
    width = (CHART_WIDTH - left - 10) / max(1, len(values))
    every = max(1, round(40 / width))
    parts = [f'<line x1="{left - 1}" y1="0" x2="{left - 1}" y2="{height}" stroke="#888"/>',
             f'<line x1="{left - 1}" y1="{height}" x2="{CHART_WIDTH - 10}" y2="{height}" stroke="#888"/>',
             f'<text x="{left - 4}" y="10" text-anchor="end">{top:,.0f} {unit}</text>',
             f'<text x="{left - 4}" y="{height}" text-anchor="end">0</text>']
    for n, (value, label, title, colour) in enumerate(zip(values, labels, titles, colours)):
        bar = max(1.0, min(value, top) / top * height)
        x = left + n * width
        parts.append(f'<rect x="{x:.1f}" y="{height - bar:.1f}" width="{max(0.5, width - 1):.1f}" height="{bar:.1f}" '
                     f'fill="{colour}"><title>{escape(title)}</title></rect>')
        if n % every == 0:
            parts.append(f'<text x="{x:.1f}" y="{height + 14}">{escape(label)}</text>')
    return (f'<svg class="chart" viewBox="0 0 {CHART_WIDTH} {height + bottom + 4}" width="100%" '
            f'preserveAspectRatio="xMinYMin meet" role="img" aria-label="{escape(name)}">' + "".join(parts) + "</svg>")


def _step_chart(executions: list[Execution], stepped: bool) -> str:
    """Time per step as bars with a ms axis and step numbers. A run without steps: graph
    size and sync time per sync instead, where a missing mark_step() shows as growth."""
    steps = step_times(executions) if stepped else []
    if not steps:
        return _sync_charts(executions)
    if len(steps) == 1:
        only = steps[0]
        return (f"<p>one step (step {only.step}): {only.total_ms:.1f} ms, {only.executions} "
                f"execution{'s' if only.executions != 1 else ''}{', compiled' if only.compiled else ''}</p>"
                + _sync_charts(executions))
    top = chart_scale([s.total_ms for s in steps])
    chart = _bars([s.total_ms for s in steps], [str(s.step) for s in steps],
                  [f"step {s.step}: {s.total_ms:.2f} ms{' (compiled)' if s.compiled else ''}" for s in steps],
                  ["#d1242f" if s.compiled else "#54aeff" for s in steps], top, "ms", "time per step")
    return (chart + f"<p>time per step (ms) by step number; red: a step that compiled, blue: cache hits only; "
            f"scale up to {top:.1f} ms (a taller first step, which includes start-up, is cut off)</p>")


def _memory_chart(peaks: list[PeakRss], stepped: bool) -> str:
    """The process's peak resident memory by step (by execution in a run without steps):
    a graph that grows without mark_step() climbs here; "" where the trace has none."""
    if not peaks:
        return ""
    key = (lambda peak: peak.step) if stepped else (lambda peak: peak.execution)
    by_key = {key(peak): peak.kb for peak in peaks}
    keys = range(key(peaks[0]), key(peaks[-1]) + 1)
    values, kb = [], 0
    for at in keys:
        kb = by_key.get(at, kb)
        values.append(kb / 1024)
    unit = "step" if stepped else "execution"
    chart = _bars(values, [str(k) for k in keys], [f"{unit} {k}: {v:,.1f} MB" for k, v in zip(keys, values)],
                  ["#8250df"] * len(values), max(values) or 1.0, "MB", f"peak resident memory by {unit}")
    return chart + (f"<p>{escape(peak_text(peaks, stepped))} (MB by {unit}: the process's high-water mark, as "
                    "lazyviz's writer found it)</p>")


def _sync_charts(executions: list[Execution]) -> str:
    """Per sync, in order: the graph's size, then its sync time (a miss in red)."""
    if not executions:
        return "<p>no executions</p>"
    labels = [str(e.index) for e in executions]
    colours = ["#d1242f" if e.is_miss else "#54aeff" for e in executions]
    nodes = _bars([float(e.nodes) for e in executions], labels,
                  [f"execution {e.index}: {e.nodes} nodes ({e.cause} at {e.site})" for e in executions],
                  colours, max(e.nodes for e in executions) or 1, "nodes", "graph size per sync")
    sync = _bars([e.sync_ms for e in executions], labels,
                 [f"execution {e.index}: {e.sync_ms:.2f} ms, {e.cache}" for e in executions],
                 colours, max(e.sync_ms for e in executions) or 1.0, "ms", "sync time per sync")
    return (f"<p>no steps: per sync, in order, the graph's size (nodes; a graph that grows sync after sync is a "
            f"loop without mark_step()) and its sync time (ms); red: a cache miss</p>{nodes}{sync}")


def _drawing(graph: IRGraph | None, execution: Execution, explained: Recompile | None) -> str:
    try:
        svg = render_svg(execution_dot(graph, execution, explained, max_nodes=PAGE_MAX_NODES), timeout=30)
    except ExportError as error:
        return f"<p>no drawing: {escape(str(error))}</p>"
    # Inline, without the XML prolog; scaled to the page, a click shows it full size.
    return f'<div class="drawing" title="click to zoom">{svg[svg.find("<svg"):]}</div>'


def _capped(text: str, execution: Execution, what: str) -> str:
    """At most PAGE_MAX_LINES lines of a graph's text, escaped, then where the rest is."""
    lines = text.splitlines()
    if len(lines) <= PAGE_MAX_LINES:
        return escape(text)
    return (escape("\n".join(lines[:PAGE_MAX_LINES])) + f"\n… {len(lines) - PAGE_MAX_LINES:,} more lines: "
            f"lazyviz export TRACE --execution {execution.index} --format {what}")


def _diff_block(execution: Execution, executions: list[Execution],
                ir_texts: IRGraphs) -> tuple[str, Recompile | None]:
    recompile = explain_execution(executions, ir_texts, execution.index)
    if recompile is None or recompile.diff is None:
        return "<p>first graph of its kind: nothing to compare with</p>", None
    css = {ORIGIN: "changed", CARRIED: "carried", ADDED: "added"}
    marks = {node: css[mark] for node, mark in diff_marks(recompile.diff).items()}
    graph = ir_texts.parsed(execution.graph)
    raw = ir_texts.text(execution.graph).splitlines()
    nodes = graph.nodes if graph else []
    # The changed nodes with a few lines around them; long unchanged runs in one line each
    # (a word LM's 4,000-node graphs made 340 KB per diff, 7 MB per page).
    near = {i + d for i, node in enumerate(nodes) if node.id in marks for d in range(-DIFF_CONTEXT, DIFF_CONTEXT + 1)}
    lines, skipped = [], 0
    for i, node in enumerate(nodes):
        if len(nodes) > PAGE_MAX_LINES and i not in near:
            skipped += 1
            continue
        if skipped:
            lines.append(f'<span class="same">… {skipped} unchanged nodes</span>')
            skipped = 0
        mark = marks.get(node.id, "")
        lines.append(f'<span class="{mark}">{escape(readable_ir(raw[node.line - 1].strip()))}</span>')
    if skipped:
        lines.append(f'<span class="same">… {skipped} unchanged nodes</span>')
    if len(lines) > PAGE_MAX_LINES:  # changes all over a big graph
        more = len(lines) - PAGE_MAX_LINES
        lines = lines[:PAGE_MAX_LINES] + [f'<span class="same">… {more:,} more lines: the Diff tab of lazyviz view '
                                          f"TRACE, or lazyviz export TRACE --execution {execution.index} --diff -o "
                                          "diff.svg</span>"]
    origins = "".join(f"<li>{escape(c.describe())}</li>" for c in recompile.diff.origins)
    return (f"<p>against graph <code>{escape(str(recompile.closest))}</code> (execution "
            f"{recompile.closest_execution}): {escape(recompile.brief())}</p><ul>{origins}</ul>"
            f"<pre>{chr(10).join(lines)}</pre>"), recompile


def _edit_html(proposal: Proposal | None, trial: TrialRecord | None, cwd: str, proposals: list[Proposal]) -> str:
    """The proposed edit (its diff behind a click) and, once `lazyviz fix --try` ran, what it measured."""
    if proposal is not None and proposal.stale:
        return (f'<br><span class="fix">no edit: {escape(os.path.basename(proposal.stale))} changed since the trace '
                "was recorded (run it again for one)</span>")
    if proposal is None or not proposal.mechanical:
        return ""
    if proposal.same_as is not None:
        same = proposals[proposal.same_as].finding
        where = f" at {site_text(same.frame, cwd)}" if same.frame else ""
        html = (f'<br><span class="fix">proposed edit: the one for the {escape(KIND_LABELS.get(same.kind, same.kind))} '
                f"finding{escape(where)} ({escape(proposals[proposal.same_as].summary)})</span>")
    else:
        diff = proposal.diff(cwd)
        html = f'<br><span class="fix">proposed edit: {escape(proposal.summary)}</span>'
        if diff:
            html += f"<details><summary>the diff (<code>lazyviz fix</code>)</summary><pre>{escape(diff)}</pre></details>"
    if trial:
        html += (f'<br><span class="fix">measured by <code>lazyviz fix --try</code> ({trial.steps} steps, all '
                 f"edits): {escape(trial.measured_text())}</span>")
    return html


def _finding_html(finding: Finding, recorded: Run, proposal: Proposal | None = None,
                  proposals: list[Proposal] | None = None) -> str:
    """One problem: what, where, the fix (and its edit), its executions linked; a
    recompile's every change behind a click."""
    links = ", ".join(f'<a href="#e-{i}">{i}</a>' for i in finding.executions[:12])
    more = f" and {len(finding.executions) - 12} more" if len(finding.executions) > 12 else ""
    site = f" at <code>{escape(site_text(finding.frame, recorded.info.cwd))}</code>" if finding.frame else ""
    html = (f'<div class="finding"><b class="sev-{escape(finding.severity)}">{escape(finding.severity)}</b> '
            f'<b>{escape(KIND_LABELS.get(finding.kind, finding.kind))}</b>{site}: {escape(finding.message)}')
    if isinstance(finding.details, FallbackDetails):
        html += f'<br><span class="op">op: <code>{escape(finding.details.op)}</code></span>'
    recompile = recorded.recompile_at(finding.executions[0]) if finding.executions else None
    changed_shape = finding.kind in (FindingKind.RECOMPILE, FindingKind.DYNAMIC_SHAPE)
    if changed_shape and recompile is not None and recompile.diff is not None:
        origins = recompile.diff.origins
        html += (f"<details><summary>what changed ({len(origins)})</summary><ul>"
                 + "".join(f"<li>{escape(c.describe())}</li>" for c in origins) + "</ul></details>")
    if finding.fix:
        html += f'<br><span class="fix">fix: {escape(finding.fix)}</span>'
    html += _edit_html(proposal, recorded.info.fix_trial, recorded.info.cwd, proposals or [])
    if links:
        html += f"<br>executions: {links}{more} · {finding.cost_ms:.1f} ms of sync"
    return html + "</div>"


def _group_html(group: list[Finding], recorded: Run, proposal_of: dict[int, Proposal],
                proposals: list[Proposal]) -> str:
    """One card per group of findings of one kind at one site (as the text report groups
    them): the first in full, the others one line each behind a click."""
    first = group[0]
    if len(group) == 1:
        return _finding_html(first, recorded, proposal_of.get(id(first)), proposals)
    cost = sum(f.cost_ms for f in group)
    label = KIND_LABELS.get(first.kind, first.kind)
    where = f" at <code>{escape(site_text(first.frame, recorded.info.cwd))}</code>" if first.frame else ""
    card = _finding_html(first, recorded, proposal_of.get(id(first)), proposals)
    rest = "".join(
        f"<li>{escape(f.short or f.message)}: executions "
        + ", ".join(f'<a href="#e-{i}">{i}</a>' for i in f.executions[:6]) + "</li>" for f in group[1:])
    return (f'<div class="group"><p><b>{len(group)} {escape(label)} findings</b>{where} ({cost:.1f} ms of sync), '
            f"the first:</p>{card}<details><summary>the other {len(group) - 1}</summary><ul>{rest}</ul></details>"
            "</div>")


def html_report(recorded: Run, draw: bool = True) -> str:
    """Problems first, each linked to its executions and drawn; then the step chart, the
    table and the graphs the problems point at. Other graphs are one line each (with the
    command that exports them): the page stays small on a run of hundreds of graphs."""
    run, executions, graphs = recorded.info, recorded.executions, recorded.graphs
    ir_texts, analysis = recorded.ir_texts, recorded.analysis
    summary = analysis.summary
    by_index = {e.index: e for e in executions}
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>lazyviz: {escape(run.command)}</title><style>{STYLE}</style></head><body>",
        f"<h1>lazyviz: <code>{escape(run.command)}</code></h1>",
        f"<p>{escape(run.backend)} backend, capture {escape(run.capture)}, torch "
        f"{escape(str(run.versions.get('torch')))}, {escape(run.state)}; started {escape(run.start_time)}</p>",
        f"<p><b>{summary.executions}</b> executions in <b>{summary.steps}</b> steps, <b>{summary.graphs}</b> "
        f"distinct graphs, <b>{summary.misses}</b> cache misses, fallbacks "
        f"{escape(', '.join(f'{op} x{n}' for op, n in summary.fallbacks.items()) or 'none')}</p>",
        f"<h2>Problems ({len(analysis.findings)})</h2>",
    ]
    if not analysis.findings:
        parts.append(f"<p>none: {CLEAN_RUN}</p>")
    proposals = propose(recorded)
    fixed, edits = sum(p.mechanical for p in proposals), sum(bool(p.changes) for p in proposals)
    if fixed:
        measured = (f"; measured by <code>lazyviz fix --try</code>: {escape(run.fix_trial.measured_text())}"
                    if run.fix_trial else "; <code>lazyviz fix --try</code> measures them on a copy")
        parts.append(f"<p>{fixed} of these {'have' if fixed > 1 else 'has'} a proposed edit ({edits} "
                     f"edit{'s' if edits > 1 else ''}: <code>lazyviz fix</code> prints the diff){measured}</p>")
    proposal_of = {id(p.finding): p for p in proposals}
    for group in finding_groups(analysis.findings):
        parts.append(_group_html(group, recorded, proposal_of, proposals))
    # The graphs the problems point at, drawn: a finding's first execution; for a fallback,
    # the largest graph its syncs ran (the work pending when the op fell back), and none
    # when each is only the op's inputs (device_data -> zero says nothing).
    shown: dict[str, Execution] = {}
    fallbacks: set[str] = set()  # graphs shown for a fallback: drawn without recompile colouring
    for finding in analysis.findings:
        candidates = [by_index[i] for i in finding.executions[:200] if i in by_index]
        if finding.kind == FindingKind.FALLBACK:
            candidates = sorted((e for e in candidates if e.nodes > MIN_FALLBACK_NODES), key=lambda e: -e.nodes)
        for execution in candidates[:1]:
            if len(shown) < MAX_DRAWN and execution.graph not in shown:
                shown[execution.graph] = execution
                if finding.kind == FindingKind.FALLBACK:
                    fallbacks.add(execution.graph)
    parts += [f"<h2>{'Time per step' if recorded.summary.steps > 1 else 'Graphs and sync time per sync'}</h2>",
              _step_chart(executions, recorded.summary.steps > 0),
              _memory_chart(recorded.info.peak_rss, recorded.summary.steps > 0),
              _collectives_html(recorded), "<h2>Executions</h2>",
              '<input id="filter" placeholder="filter: cause, site, graph, why…" aria-label="filter">',
              '<div class="scroll"><table id="executions"><thead><tr>']
    parts += [f'<th data-col="{col}" data-type="{kind}">{escape(title)}</th>' for col, title, kind in COLUMNS]
    parts.append("</tr></thead><tbody>")
    for e in executions:
        site = escape(site_text(e.frame, run.cwd))
        graph = (f'<a href="#graph-{escape(e.graph)}">{escape(e.graph[:8])}</a>' if e.graph in shown
                 else escape(e.graph[:8]))
        why = why_text(e, recorded.recompile_at(e.index))
        parts.append(
            f'<tr id="e-{e.index}" class="cause-{escape(e.cause)}{" miss" if e.is_miss else ""}"><td class=num>'
            f"{e.index}</td><td class=num>{e.step}</td><td class=cause>{escape(e.cause)}</td>"
            f'<td title="{escape(e.site)}">{site}</td><td>{graph}</td><td class=num>{e.nodes}</td>'
            f"<td class=cache>{escape(e.cache)}</td><td class=num>{e.sync_ms:.3f}</td>"
            f"<td class=num>{e.trace_ms:.3f}</td><td class=why>{escape(why)}</td></tr>")
    parts.append(f"</tbody></table></div><h2>Graphs the problems point at ({len(shown)})</h2>")
    graph_by_id = {g.id: g for g in graphs}
    drawable = [(graph_by_id[g], e, *_diff_block(e, executions, ir_texts)) for g, e in shown.items()
                if g in graph_by_id and graph_by_id[g].ir_text]
    # dot runs as its own process: draw them side by side.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        drawings = dict(zip((g.id for g, *_ in drawable),
                            pool.map(lambda d: _drawing(ir_texts.parsed(d[0].id), d[1],
                                                         None if d[0].id in fallbacks else d[3])
                                     if draw else "", drawable)))
    diffs = {g.id: diff_html for g, _, diff_html, _ in drawable}
    for graph_id, execution in shown.items():
        graph = graph_by_id.get(graph_id)
        if graph is None or not graph.ir_text:
            parts.append(f"<p>graph <code>{escape(graph_id)}</code>: no IR captured (capture light)</p>")
            continue
        diff_html, drawing = diffs[graph_id], drawings[graph_id]
        parts.append(
            f'<details id="graph-{escape(graph.id)}" open><summary>graph <code>{escape(graph.id)}</code>: '
            f"{graph.nodes} nodes, at execution {execution.index} ({escape(execution.cause)} at "
            f"<code>{escape(site_text(execution.frame, run.cwd))}</code>)</summary>{drawing}<h3>Diff</h3>"
            f"{diff_html}<details><summary>IR</summary><pre>{_capped(readable_ir(graph.ir_text), execution, 'ir')}"
            f"</pre></details><details><summary>Backend</summary><pre>"
            f"{_capped(readable_backend(graph.backend_text), execution, 'backend')}</pre></details></details>")
    others = [(g, e) for g, e in _first_runs(executions).items() if g not in shown]
    if others:
        parts.append(f"<h2>Other graphs ({len(others)})</h2><p>draw or print one with "
                     "<code>lazyviz export TRACE --execution N -o graph.svg</code> (or <code>--format ir</code>)</p>"
                     '<div class="scroll"><ul>')
        parts += [f"<li><code>{escape(g[:16])}</code>: {e.nodes} nodes, first at execution "
                  f'<a href="#e-{e.index}">{e.index}</a> ({escape(e.cause)} at '
                  f"<code>{escape(site_text(e.frame, run.cwd))}</code>)</li>" for g, e in others]
        parts.append("</ul></div>")
    parts += [f"<script>{SCRIPT}</script></body></html>"]
    return "\n".join(parts) + "\n"


def _collectives_html(recorded: Run) -> str:
    """SPMD's collectives, each with why it is there; "" without."""
    rows = collective_rows(recorded.collectives, recorded.summary.steps)
    if not rows:
        return ""
    body = "".join(f"<tr><td>{escape(size_text(row.sent_per_step))}</td><td>{escape(row.describe())}</td>"
                   f"<td>{escape(row.expected or 'NOT ASKED FOR')}</td></tr>" for row in rows)
    return (f"<h2>Collectives</h2><p>{escape(collectives_text(rows, recorded.summary.steps))}</p>"
            "<table><thead><tr><th>sent per step</th><th>collective</th><th>why</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


def _first_runs(executions: list[Execution]) -> dict[str, Execution]:
    first: dict[str, Execution] = {}
    for e in executions:
        first.setdefault(e.graph, e)
    return first


class HtmlRenderer(Renderer):
    name = "html"

    def render(self, run: Run, options: RenderOptions) -> str:
        return html_report(run)
