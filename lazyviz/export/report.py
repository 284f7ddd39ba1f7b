"""`lazyviz report`: the run summary as text (for people) or JSON (a versioned contract)."""
from __future__ import annotations

import io
import itertools
import json
import os
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO

from lazyviz.analysis.collectives import Row, collective_rows, per_step
from lazyviz.analysis.findings import Finding
from lazyviz.analysis.ir import parse_location
from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.memory import peak_text
from lazyviz.analysis.persistent import persistent_cache
from lazyviz.analysis.ranks import Divergence
from lazyviz.analysis.recompiles import PendingRecompile, Recompile, compiles_past_warmup, is_compared
from lazyviz.analysis.run import Run
from lazyviz.analysis.summary import graph_memory, graph_stats
from lazyviz.export import Renderer, RenderOptions
from lazyviz.present import (
    CLEAN_RUN,
    KIND_LABELS,
    collective_line,
    collectives_text,
    compiles_text,
    divergence_text,
    finding_groups,
    findings_by_site,
    memory_text,
    plural,
    short_path,
    site_text,
    site_verdict,
    size_text,
    steps_text,
    transfers_text,
)
from lazyviz.trace.model import Execution
from lazyviz.trace.table import ExecutionTable

REPORT_FORMAT = "lazyviz-report"
# 2: a recompile whose graph pair (closest_graph -> graph) was explained before has
#    "changes_same_as": that recompile's execution, and no changes of its own.
REPORT_VERSION = 2


def recompile_json(recompile: Recompile | PendingRecompile, same_as: int | None = None) -> dict:
    """One recompile; same_as: the execution of an earlier recompile between the same two
    graphs, whose changes these are (a cache that thrashes between two graphs would list
    the same changes 100,000 times)."""
    # Not compared (warm-up on a large run, or past the first few at a site): the diff
    # costs seconds on large graphs; `lazyviz export --diff` computes it.
    explained = is_compared(recompile)
    site = recompile.frame.to_json() if recompile.frame else None
    report = {"execution": recompile.execution, "step": recompile.step, "graph": recompile.graph,
              "closest_graph": None, "closest_execution": None, "same_site": None, "new_graph": None,
              "choice": "", "warmup": recompile.warmup, "explained": explained, "site": site,
              "summary": "not compared (lazyviz export TRACE --execution N --diff compares it)",
              "changes": [], "changes_same_as": None, "context": recompile.context}
    if explained:
        report.update({
            "closest_graph": recompile.closest,
            "closest_execution": recompile.closest_execution,
            "same_site": recompile.same_site,
            "new_graph": recompile.new_graph,  # no earlier graph is close: closest_graph is only the nearest
            "choice": recompile.choice,
            "summary": recompile.headline(),
            "changes": [
                {"kind": c.kind, "node": c.node or c.old_node, "op": c.op, "before": c.before,
                 "after": c.after, "origin": c.origin,
                 "source": site,  # the sync site
                 # The line that built the node (TS with --capture full, XLA): "train.py:28".
                 "location": c.source_line, "built_at": _built_at(c.location)}
                for c in recompile.changes
            ] if same_as is None else [],
            "changes_same_as": same_as,
        })
    return report


def recompiles_json(recompiles: list[Recompile | PendingRecompile]) -> Iterator[dict]:
    """Each recompile as recompile_json makes it, in order, the changes between one pair
    of graphs listed once."""
    first_of: dict[tuple[str | None, str], int] = {}
    for recompile in recompiles:
        explained = is_compared(recompile)
        pair = (recompile.closest, recompile.graph)
        same_as = first_of.get(pair) if explained and recompile.diff is not None else None
        if same_as is None and explained and recompile.diff is not None:
            first_of[pair] = recompile.execution
        yield recompile_json(recompile, same_as)


def _built_at(location: str) -> dict | None:
    """{"file": "train.py", "line": 28, "function": "main"} from "main@train.py:28"."""
    parsed = parse_location(location)
    return {"file": parsed[1], "line": parsed[2], "function": parsed[0]} if parsed else None


def _executions_json(executions: Sequence[Execution]) -> list[dict]:
    return [
        {
            "index": e.index,
            "step": e.step,
            "cause": e.cause,
            "detail": e.detail,
            "frame": e.frame.to_json() if e.frame else None,
            "graph": e.graph,
            "nodes": e.nodes,
            "cache": e.cache,
            "persistent": e.persistent,
            "sync_ms": e.sync_ms,
            "trace_ms": e.trace_ms,
            "compile_ms": e.compile_ms,
            "execute_ms": e.execute_ms,
            "fallback_ops": e.fallback_ops,
        }
        for e in executions
    ]


class ExecutionLines:
    """The report's executions as JSON text, one object per line, written from the
    table's columns as they are iterated: a million executions never exist as dicts
    (json.dumps of each, as _executions_json makes them, gives the same text)."""

    def __init__(self, executions: Sequence[Execution]) -> None:
        self.table = ExecutionTable.of(executions)
        self.table.load_all()  # now: a damaged trace fails before any output, not half-way

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[str]:
        table = self.table
        dumps = json.dumps
        heads, tails = [], []
        for kind in table.kinds:
            frame = dumps(kind.frame.to_json()) if kind.frame else "null"
            heads.append(f'"cause": {dumps(kind.cause)}, "detail": {dumps(kind.detail)}, "frame": {frame}, '
                         f'"graph": {dumps(kind.graph)}, "nodes": {kind.nodes}, "cache": {dumps(kind.cache)}, '
                         f'"persistent": {dumps(kind.persistent)}')
            tails.append(dumps(kind.fallback_ops))
        for index, step, kind, sync_ms, trace_ms, compile_ms, execute_ms in zip(
                table.index, table.step, table.kind, table.sync_ms, table.trace_ms, table.compile_ms,
                table.execute_ms):
            yield (f'{{"index": {index}, "step": {step}, {heads[kind]}, "sync_ms": {sync_ms!r}, '
                   f'"trace_ms": {trace_ms!r}, "compile_ms": {compile_ms!r}, "execute_ms": {execute_ms!r}, '
                   f'"fallback_ops": {tails[kind]}}}')


class RecompileDicts:
    """The report's recompiles, each made a dict only as it is written: a run that
    recompiled 1,500 times with 200-node graphs has 300,000 changes to list."""

    def __init__(self, recompiles: list[Recompile | PendingRecompile]) -> None:
        self.recompiles = recompiles

    def __len__(self) -> int:
        return len(self.recompiles)

    def __iter__(self) -> Iterator[dict]:
        return recompiles_json(self.recompiles)


def json_report(recorded: Run, lines: bool = False) -> dict:
    """The machine-readable report; field names and meanings are stable within a version.
    lines: its executions as ExecutionLines and its recompiles as RecompileDicts (for
    dumps_report), not lists of dicts."""
    run, executions, analysis = recorded.info, recorded.executions, recorded.analysis
    summary = analysis.summary
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "run": {
            "argv": run.argv,
            "source": run.source,
            "module": run.module,
            "backend": run.backend,
            "capabilities": run.capabilities.to_json(),  # what the backend could give (trace.model.Capabilities)
            "capture": run.capture,
            "torch": run.versions.get("torch"),
            "versions": run.versions,
            "python": run.versions.get("python"),
            "start_time": run.start_time,
            "finished": run.finished,
            "exit_status": run.exit_status,
            "error": run.error,
            # Executions the backend failed to compile or run, with the message the script got.
            "failures": [{"execution": f.execution, "error": f.error} for f in run.failures],
            "rank": run.rank,
            # What `lazyviz fix --try` measured on this run's script, where it ran (TrialRecord).
            "fix_trial": run.fix_trial.to_json() if run.fix_trial else None,
        },
        "steps": summary.steps,
        "executions": ExecutionLines(executions) if lines else _executions_json(executions),
        "graphs": _with_memory(graph_stats(executions), recorded),
        "fallbacks": summary.fallbacks,
        "recompiles": RecompileDicts(analysis.recompiles) if lines else list(recompiles_json(analysis.recompiles)),
        "findings": [f.to_json() for f in analysis.findings],
        # SPMD (PyTorch/XLA): each collective of the run, alike ones of several graphs added up.
        "collectives": [{**row._asdict(), "axes": list(row.axes), "sent_per_step": round(row.sent_per_step)}
                        for row in collective_rows(recorded.collectives, summary.steps)],
        "summary": {
            "executions": summary.executions,
            "graphs": summary.graphs,
            "misses": summary.misses,
            "causes": summary.causes,
            "sync_ms": round(summary.sync_ms, 3),
            "trace_ms": round(summary.trace_ms, 3),
            "transfers": summary.transfers,
            # The process's peak resident memory where it rose: {execution, step, kb (KiB)}.
            "peak_rss": [peak._asdict() for peak in run.peak_rss],
            # XLA's persistent compile cache: graphs loaded from it, compiled and written, failed to load.
            "persistent_cache": cached.to_json() if (cached := persistent_cache(executions)) else None,
        },
    }


TOP_GROUPS = 8  # finding groups in a summary that fits one screen; --all shows every finding


def _finding_lines(finding: Finding, recorded: Run) -> list[str]:
    where = f" [{site_text(finding.frame, recorded.info.cwd)}]" if finding.frame else ""
    lines = [f"    {finding.severity}: {finding.message}{where}"]
    # A recompile's other origins, once, under its headline (which shows the first).
    recompile = (recorded.recompile_at(finding.executions[0])
                 if finding.kind == FindingKind.RECOMPILE and finding.executions else None)
    if recompile is not None and recompile.diff is not None:
        lines += [f"      also: {change.describe()}" for change in recompile.diff.origins[1:4]]
    if finding.fix:
        lines.append(f"      fix: {finding.fix}")
    return lines


def _findings_lines(recorded: Run, all_findings: bool) -> list[str]:
    """The findings, each with its line and fix; grouped by kind and site, the top few,
    unless all_findings."""
    run, analysis, trace_path = recorded.info, recorded.analysis, recorded.path
    lines = ["  findings:"]
    if all_findings:
        for finding in analysis.findings:
            lines += _finding_lines(finding, recorded)
    else:
        groups = finding_groups(analysis.findings)
        for group in groups[:TOP_GROUPS]:
            first = group[0]
            if len(group) == 1:
                lines += _finding_lines(first, recorded)
                continue
            cost = sum(f.cost_ms for f in group)
            lines.append(f"    {first.severity}: {len(group)} {KIND_LABELS.get(first.kind, first.kind)} "
                         f"findings at {site_text(first.frame, run.cwd)} ({cost:.1f} ms), the first: "
                         f"{first.message}")
            if first.fix:
                lines.append(f"      fix: {first.fix}")
        shown = sum(len(g) for g in groups[:TOP_GROUPS])
        if len(groups) > TOP_GROUPS or shown < len(analysis.findings):
            where = f" {trace_path}" if trace_path else ""
            lines.append(f"    ... {plural(len(analysis.findings), 'finding')} in {len(groups)} groups; "
                         f"every one: lazyviz report --all{where}")
    return lines


def _site_of(table: ExecutionTable) -> Callable[[int], str | None]:
    """An execution's index -> its sync site."""
    def site(index: int) -> str | None:
        position = table.position_of(index)
        return table.kind_at(position).site if position is not None else None
    return site


def text_report(recorded: Run, all_findings: bool = False) -> str:
    """Findings first, each with its line and fix, then the run's figures. Findings of
    one kind at one site are grouped, and the top few shown, unless all_findings."""
    run, executions, analysis, trace_path = recorded.info, recorded.executions, recorded.analysis, recorded.path
    summary = analysis.summary
    lines = [f"lazyviz: {run.command} ({run.backend}, capture {run.capture}) {run.state}"]
    if analysis.findings:
        lines += _findings_lines(recorded, all_findings)
    elif executions:
        lines.append(f"  findings: none ({CLEAN_RUN})")
    if not executions:  # tensors reached the device, yet no graph ran
        fallbacks = sum(run.fallbacks_after_last_execution.values())
        ended = "before the script raised" if run.error else "in the whole run"
        lines.append(f"  no graph executed {ended}; tensors were on device '{run.device}'"
                     + (f"; {plural(fallbacks, 'fallback')}" if fallbacks else ""))
    else:
        lines.append(
            f"  {plural(summary.executions, 'graph execution')} {steps_text(summary, run.names)}; "
            f"{compiles_text(summary.misses, compiles_past_warmup(analysis.recompiles, executions, run.optimizer_marks))}; "
            f"{summary.sync_ms:.1f} ms running graphs (sync), {summary.trace_ms:.1f} ms in Python building them"
            + (f"; start-up before the first graph {run.startup_ms:.0f} ms" if run.startup_ms is not None else "")
        )
    causes = ", ".join(f"{cause} {n}" for cause, n in summary.causes.items())
    if causes:
        lines.append(f"  causes: {causes}")
    if summary.fallbacks:
        lines.append("  fallbacks: " + ", ".join(f"{op} x{n}" for op, n in summary.fallbacks.items()))
    cached = persistent_cache(executions)
    if cached is not None:
        lines.append(f"  persistent compile cache: {cached.text()}")
    if summary.transfers:
        lines.append(f"  host<->device copies: {transfers_text(summary)}")
    largest = _largest_memory(recorded)
    if largest:
        lines.append(f"  largest graph in memory: {largest}")
    if run.peak_rss:
        lines.append(f"  process memory: {peak_text(run.peak_rss, summary.steps > 0)}")
    lines += _collective_lines(collective_rows(recorded.collectives, summary.steps), summary.steps)
    if summary.sites:
        lines.append("  most frequent sync sites:")
        for site in summary.sites[:3]:
            causes = ", ".join(f"{c} {n}" for c, n in site.causes.items())
            lines.append(f"    {site.executions:6d}x  {short_path(site.site, run.cwd)} in {site.function} ({causes})")
        lines.append("  slowest sync sites (total sync ms):")
        by_site = findings_by_site(analysis.findings, _site_of(executions))
        for site in summary.slowest_sites[:3]:
            lines.append(
                f"    {site.total_ms:9.1f} ms  {short_path(site.site, run.cwd)} "
                f"({site.executions}x, {site.mean_ms:.2f} ms each): {site_verdict(site, analysis.findings, by_site)}"
            )
    if run.fix_trial:
        trial = run.fix_trial
        lines.append(f"  lazyviz fix --try measured {', '.join(trial.edits)} ({trial.bound} each side): "
                     f"{trial.measured_text()}" + (f"; {trial.ending}" if trial.ending else ""))
    if run.tracer_errors:
        lines.append(f"  lazyviz's own errors while tracing (the script was not affected): {run.tracer_errors[0]}")
    lines += [f"  note: {note}" for note in run.notes]
    if trace_path is not None:
        lines.append(f"  trace: {trace_path}")
    return "\n".join(lines) + "\n"


MAX_COLLECTIVE_LINES = 8


def _collective_lines(rows: list[Row], steps: int) -> list[str]:
    """SPMD's collectives: the bytes each device sends, then each with why it is there."""
    if not rows:
        return []
    lines = [f"  collectives: {collectives_text(rows, steps)}"]
    lines += [f"    {collective_line(row)}" for row in rows[:MAX_COLLECTIVE_LINES]]
    if len(rows) > MAX_COLLECTIVE_LINES:
        lines.append(f"    ... {len(rows) - MAX_COLLECTIVE_LINES} more: lazyviz report --format json")
    return lines


def _with_memory(graphs: list[dict], recorded: Run) -> list[dict]:
    """On XLA, each graph's memory after compiling (bytes), as XLA reported it."""
    if not recorded.info.capabilities.compiled_memory:
        return graphs
    memory = {graph.id: graph_memory(graph.backend_text) for graph in recorded.graphs}
    return [{**graph, "memory": memory[graph["id"]]} if memory.get(graph["id"]) else graph for graph in graphs]


def _largest_memory(recorded: Run) -> str:
    """The graph whose compiled form needs the most memory, as XLA reported it."""
    if not recorded.info.capabilities.compiled_memory:
        return ""
    memories = [(graph_memory(graph.backend_text), graph.id) for graph in recorded.graphs]
    # By size alone: two graphs of one size would compare their dicts.
    total, memory, graph_id = max(((sum(m.values()) - m.get("aliased_inputs", 0), m, g) for m, g in memories if m),
                                  key=lambda entry: entry[0], default=(0, {}, ""))
    return f"graph {graph_id[:8]}: {memory_text(memory)}" if total else ""


# Colour for a terminal: the same text, its parts styled by what they are.
# The terminal's own eight colours (as pytest uses them): its theme makes them readable
# on a dark or a light background, where fixed bright shades vanish on white.
_STYLES = [
    (r"^lazyviz: .*", "bold"),
    (r"^ *error:", "bold red"),
    (r"^ *warning:", "bold yellow"),
    (r"^ *info:", "blue"),
    (r"^ *fix: ", "bold green"),
    (r"^ *also: ", "dim"),
    (r"\[[^\]\n]+:\d+\]$", "cyan"),
    (r"^ *(trace|findings|causes|fallbacks):", "bold"),
]


def wrapped(text: str, width: int) -> str:
    """Each line cut at the terminal's width between words, its continuation indented
    under its first word (as pytest and rich do), so no word splits at the edge."""
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        body = line.lstrip(" ")
        indent = " " * (len(line) - len(body))
        lines.append(textwrap.fill(body, width, initial_indent=indent, subsequent_indent=indent + "    ",
                                   break_long_words=False, break_on_hyphens=False))
    return "\n".join(lines)


def coloured(text: str, stream: TextIO) -> str:
    """The report for a terminal: wrapped to its width, with ANSI colour unless NO_COLOR
    is set (https://no-color.org); as it is when piped or redirected."""
    if not getattr(stream, "isatty", lambda: False)():
        return text
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, io.UnsupportedOperation):
        width = 0
    if width >= 40:
        text = wrapped(text, width)
    if os.environ.get("NO_COLOR"):
        return text
    from rich.console import Console
    from rich.text import Text

    styled = Text(text)
    for pattern, style in _STYLES:
        styled.highlight_regex(re.compile(pattern, re.MULTILINE), style)
    console = Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=1 << 20,
                      highlight=False, soft_wrap=True)
    console.print(styled, end="")
    return console.file.getvalue()


class TextRenderer(Renderer):
    name = "text"
    for_people = True

    def render(self, run: Run, options: RenderOptions) -> str:
        return text_report(run, options.all_findings)


class JsonRenderer(Renderer):
    name = "json"

    def render(self, run: Run, options: RenderOptions) -> str:
        return "".join(self.stream(run, options))

    def stream(self, run: Run, options: RenderOptions) -> Iterator[str]:
        return dumps_report(json_report(run, lines=True))


# Lines of the executions (and findings) list joined into one piece of output.
LINES_PER_PIECE = 4096


def dumps_report(report: dict) -> Iterator[str]:
    """The report as indented JSON, in pieces: the same document as json.dumps(report,
    indent=1), except that each execution, recompile and finding is one line, written by
    the C encoder (indent makes json use its Python encoder: 12 s for 100,000
    executions) and a few thousand at a time (a million executions are 250 MB of text)."""
    yield "{\n"
    for number, (key, value) in enumerate(report.items()):
        yield f",\n {json.dumps(key)}: " if number else f" {json.dumps(key)}: "
        if isinstance(value, (ExecutionLines, RecompileDicts)) and not len(value):
            yield "[]"
        elif key in ("executions", "recompiles", "findings") and len(value):
            items = iter(value if isinstance(value, ExecutionLines) else map(json.dumps, value))
            yield "["
            separator = "\n  "
            while piece := list(itertools.islice(items, LINES_PER_PIECE)):
                yield separator + ",\n  ".join(piece)
                separator = ",\n  "
            yield "\n ]"
        else:
            yield json.dumps(value, indent=1).replace("\n", "\n ")
    yield "\n}\n"


def ranks_json_report(ranks: dict[int, Run], divergence: Divergence | None,
                      problems: dict[int, str] | None = None) -> Iterator[str]:
    """The versioned report of a multi-process run, in pieces: each rank's report as
    `lazyviz report --format json` streams one (256 ranks of 1,000 executions held as
    dicts took 1.1 GB and 19 s), then where the ranks diverge, and the ranks whose trace
    could not be read (problems: rank -> why)."""
    yield f'{{\n "format": {json.dumps(REPORT_FORMAT)},\n "version": {REPORT_VERSION},\n "ranks": ['
    for number, (rank, run) in enumerate(ranks.items()):
        yield f'{"," if number else ""}\n  {{"rank": {rank}, "trace": {json.dumps(str(run.path))}, "report": '
        yield from _without_last_newline(dumps_report(json_report(run, lines=True)))
        yield "}"
    found = [] if divergence is None else [{
        "kind": "divergence", "severity": "error", "step": divergence.step,
        "message": divergence.message(),
        "ranks": [{"ranks": ranks_, "graphs": list(seq)} for seq, ranks_ in divergence.groups.items()],
        "graphs": {str(rank): graph for rank, graph in divergence.graphs.items()},
        "site": divergence.frame.to_json() if divergence.frame else None,
        "change": divergence.change, "divergent_steps": divergence.divergent_steps,
    }]
    unreadable = [{"rank": rank, "error": error} for rank, error in sorted((problems or {}).items())]
    yield (f'\n ],\n "divergence": {json.dumps(found, indent=1)},\n "unreadable": {json.dumps(unreadable, indent=1)}'
           "\n}\n")


def _without_last_newline(pieces: Iterator[str]) -> Iterator[str]:
    previous = None
    for piece in pieces:
        if previous is not None:
            yield previous
        previous = piece
    if previous is not None:
        yield previous.rstrip("\n")


def ranks_text_report(folder: str, ranks: dict[int, Run], divergence: Divergence | None,
                      problems: dict[int, str] | None = None) -> str:
    unreadable = f" ({len(problems)} more cannot be read)" if problems else ""
    parts = [f"lazyviz: {len(ranks)} ranks in {folder}{unreadable}"]
    parts.append(f"  error: {divergence_text(divergence)}" if divergence is not None
                 else "  ranks ran the same graphs at every step")
    parts += [f"  error: rank {rank} cannot be read: {error}" for rank, error in sorted((problems or {}).items())]
    sent = {rank: per_step(run.collectives, run.steps) for rank, run in ranks.items() if run.collectives}
    if sent:  # SPMD across hosts: a process per host, each tracing its own devices' program
        each = ", ".join(f"rank {rank} {size_text(n)}" for rank, n in sent.items())
        parts.append(f"  collectives, bytes each device sends per step: {each}; {size_text(sum(sent.values()))} "
                     f"added over the {len(sent)} ranks")
    for rank, run in ranks.items():
        parts.append(f"\n[rank {rank}] " + text_report(run))
    return "\n".join(parts) + "\n"
