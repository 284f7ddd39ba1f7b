"""`lazyviz report --format html`: one self-contained page (inline CSS and JS, no
network) to share a run: header, findings first, a sortable and filterable executions
table, per-step timing, and every distinct graph with its IR, backend code, drawing and
diff against its closest graph. Everything from the trace is escaped."""
from __future__ import annotations

from html import escape

from lazyviz.analysis import analyze
from lazyviz.analysis.ir import parsed
from lazyviz.analysis.recompiles import Recompile, explain_execution
from lazyviz.analysis.summary import chart_scale, step_times
from lazyviz.export import Renderer, RenderRequest
from lazyviz.present import ADDED, CARRIED, ORIGIN, diff_marks, site_text
from lazyviz.trace.model import Execution, Graph, RunInfo

MAX_DRAWN = 40  # graphs drawn with Graphviz; the rest say how to draw them

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
.changed{background:#ffe0e0}.carried{background:#fff6d6}.added{background:#dcffe4}.removed{background:#ffe0e0}
#filter{margin:.4em 0;width:24em}
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
})();
"""

COLUMNS = [("index", "#", "num"), ("step", "step", "num"), ("cause", "cause", "text"), ("site", "site", "text"),
           ("graph", "graph", "text"), ("nodes", "nodes", "num"), ("cache", "cache", "text"),
           ("sync_ms", "sync ms", "num"), ("trace_ms", "trace ms", "num")]


def _step_chart(executions: list[Execution]) -> str:
    steps = step_times(executions)
    if not steps:
        return "<p>no steps</p>"
    top = chart_scale([s.total_ms for s in steps])
    width = max(4, min(24, 900 // len(steps)))
    bars = []
    for n, (step, total, missed) in enumerate((s.step, s.total_ms, s.compiled) for s in steps):
        height = max(1.0, min(total, top) / top * 120)
        bars.append(f'<rect x="{n * width}" y="{130 - height:.1f}" width="{width - 1}" height="{height:.1f}" '
                    f'fill="{"#d1242f" if missed else "#54aeff"}"><title>step {step}: {total:.2f} ms'
                    f'{" (compiled)" if missed else ""}</title></rect>')
    return (f'<svg width="{len(steps) * width}" height="132" role="img" aria-label="per-step time">'
            + "".join(bars) + "</svg><p>red: a step that compiled; blue: cache hits only; "
            f"scale up to {top:.1f} ms (a taller first step, which includes start-up, is cut off)</p>")


def _drawing(graph: Graph, execution: Execution, explained: Recompile | None) -> str:
    from lazyviz.export.graphviz import ExportError, execution_dot, render_svg

    try:
        svg = render_svg(execution_dot(graph.ir_text, execution, explained), timeout=30)
    except ExportError as error:
        return f"<p>no drawing: {escape(str(error))}</p>"
    return svg[svg.find("<svg"):]  # inline: without the XML prolog and doctype


def _diff_block(execution: Execution, executions: list[Execution],
                ir_texts: dict[str, str]) -> tuple[str, Recompile | None]:
    recompile = explain_execution(executions, ir_texts, execution.index)
    if recompile is None or recompile.diff is None:
        return "<p>first graph of its kind: nothing to compare with</p>", None
    css = {ORIGIN: "changed", CARRIED: "carried", ADDED: "added"}
    marks = {node: css[mark] for node, mark in diff_marks(recompile.diff).items()}
    lines = []
    graph = parsed(ir_texts.get(execution.graph, ""))
    raw = ir_texts.get(execution.graph, "").splitlines()
    for node in graph.nodes if graph else []:
        mark = marks.get(node.id, "")
        lines.append(f'<span class="{mark}">{escape(raw[node.line - 1].strip())}</span>')
    origins = "".join(f"<li>{escape(c.describe())}</li>" for c in recompile.diff.origins)
    return (f"<p>against graph <code>{escape(str(recompile.closest))}</code> (execution "
            f"{recompile.closest_execution}): {escape(recompile.headline())}</p><ul>{origins}</ul>"
            f"<pre>{chr(10).join(lines)}</pre>"), recompile


def html_report(run: RunInfo, executions: list[Execution], graphs: list[Graph], draw: bool = True) -> str:
    ir_texts = {g.id: g.ir_text for g in graphs}
    analysis = analyze(run, executions, ir_texts)
    summary = analysis.summary
    state = run.state
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>lazyviz: {escape(run.command)}</title><style>{STYLE}</style></head><body>",
        f"<h1>lazyviz: <code>{escape(run.command)}</code></h1>",
        f"<p>{escape(run.backend)} backend, capture {escape(run.capture)}, torch "
        f"{escape(str(run.versions.get('torch')))}, {escape(state)}; started {escape(run.start_time)}</p>",
        f"<p><b>{summary.executions}</b> executions in <b>{summary.steps}</b> steps, <b>{summary.graphs}</b> "
        f"distinct graphs, <b>{summary.misses}</b> cache misses, fallbacks "
        f"{escape(', '.join(f'{op} x{n}' for op, n in summary.fallbacks.items()) or 'none')}</p>",
        "<h2>Findings</h2>",
    ]
    if not analysis.findings:
        parts.append("<p>none: one execution per step, no fallbacks, no recompiles after warm-up</p>")
    for finding in analysis.findings:
        site = f" at <code>{escape(finding.frame.site)}</code>" if finding.frame else ""
        parts.append(f'<p class="finding"><b class="sev-{escape(finding.severity)}">{escape(finding.severity)}</b> '
                     f"{escape(finding.kind)}{site}: {escape(finding.message)}"
                     + (f'<br><span class="fix">fix: {escape(finding.fix)}</span>' if finding.fix else "") + "</p>")
    late = [r for r in analysis.recompiles if not r.warmup]
    if late:
        parts.append("<h2>Recompiles after warm-up</h2><ul>")
        parts += [f"<li>execution {r.execution} (step {r.step}) vs execution {r.closest_execution}: "
                  f"{escape(r.headline())}</li>" for r in late]
        parts.append("</ul>")
    parts += ["<h2>Time per step</h2>", _step_chart(executions), "<h2>Executions</h2>",
              '<input id="filter" placeholder="filter: cause, site, graph…" aria-label="filter">',
              '<div class="scroll"><table id="executions"><thead><tr>']
    parts += [f'<th data-col="{col}" data-type="{kind}">{escape(title)}</th>' for col, title, kind in COLUMNS]
    parts.append("</tr></thead><tbody>")
    for e in executions:
        site = escape(site_text(e.frame, run.cwd))
        parts.append(
            f'<tr class="cause-{escape(e.cause)}{" miss" if e.is_miss else ""}"><td class=num>{e.index}</td>'
            f"<td class=num>{e.step}</td><td class=cause title=\"{escape(e.detail or '')}\">{escape(e.cause)}</td>"
            f'<td title="{escape(e.site)}">{site}</td><td><a href="#graph-{escape(e.graph)}">'
            f"{escape(e.graph[:8])}</a></td><td class=num>{e.nodes}</td><td class=cache>{escape(e.cache)}</td>"
            f"<td class=num>{e.sync_ms:.3f}</td><td class=num>{e.trace_ms:.3f}</td></tr>")
    parts.append("</tbody></table></div><h2>Graphs</h2>")
    first_run = {}
    for e in executions:
        first_run.setdefault(e.graph, e)
    for number, graph in enumerate(g for g in graphs if g.id in first_run):
        execution = first_run[graph.id]
        diff_html, explained = _diff_block(execution, executions, ir_texts) if graph.ir_text else ("", None)
        drawing = ""
        if draw and graph.ir_text:
            drawing = (_drawing(graph, execution, explained) if number < MAX_DRAWN else
                       f"<p>not drawn here: <code>lazyviz export TRACE --execution {execution.index} -o g.svg</code></p>")
        parts.append(
            f'<details id="graph-{escape(graph.id)}"><summary>graph <code>{escape(graph.id)}</code>: '
            f"{graph.nodes} nodes, first run at execution {execution.index} ({escape(execution.cause)} at "
            f"<code>{escape(execution.site)}</code>)</summary>{drawing}<h3>Diff</h3>{diff_html}"
            f"<h3>IR</h3><pre>{escape(graph.ir_text or 'not captured (capture light)')}</pre>"
            f"<h3>Backend</h3><pre>{escape(graph.backend_text)}</pre></details>")
    parts += [f"<script>{SCRIPT}</script></body></html>"]
    return "\n".join(parts) + "\n"



class HtmlRenderer(Renderer):
    name = "html"

    def render(self, request: RenderRequest) -> str:
        return html_report(request.data.run, request.data.executions, request.data.graphs)
