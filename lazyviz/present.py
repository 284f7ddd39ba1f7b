"""How lazyviz shows things, computed once for every renderer (text, JSON, HTML, SVG
and the terminal UI): short paths and sites, the mark of each node in a diff, time per
step, divergence wording, and the request for a graph drawing. Pure functions."""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lazyviz.analysis.collectives import Row
from lazyviz.analysis.diff import GraphDiff
from lazyviz.analysis.findings import (
    KIND_LABELS,
    ROOT_KINDS,
    SEVERITIES,
    FailureDetails,
    FallbackDetails,
    Finding,
    GrowingGraph,
    RepeatedBlock,
)
from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.ranks import Divergence
from lazyviz.analysis.recompiles import PendingRecompile, Recompile, is_compared
from lazyviz.analysis.summary import SiteStats, Summary
from lazyviz.analysis.units import size_text
from lazyviz.trace.model import Execution, Frame

# What a run without findings is, in every renderer's words.
CLEAN_RUN = "one execution per step, no fallbacks, no recompiles after warm-up"


def short_path(file: str, cwd: str | None = None) -> str:
    """Relative to the run's folder (cwd) or else to the viewer's working directory when
    under one, `~/...` under the home directory, else as it is: one rule for every
    place a path is shown."""
    for folder in (cwd, os.getcwd()):
        if folder and file.startswith(folder.rstrip(os.sep) + os.sep):
            return file[len(folder.rstrip(os.sep)) + 1:]
    home = str(Path.home())
    if home not in ("", "/") and file.startswith(home + os.sep):
        return "~" + file[len(home):]
    return file


def plural(count: int, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word}es" if word.endswith("s") else f"{count} {word}s"


def steps_text(summary: Summary, names: Mapping[str, str]) -> str:
    """What follows "N executions": "in 8 steps (1.0 per step)", or that there were none
    (named by the backend's step call: RunInfo.names)."""
    if summary.steps:
        return f"in {plural(summary.steps, 'step')} ({summary.executions / summary.steps:.1f} per step)"
    return f"and no {names['mark_step'].removeprefix('torch._lazy.')} (no steps)"


def compiles_text(misses: int, after_warmup: int) -> str:
    """"4 compiles (cache misses), 2 of them the usual warm-up": which misses to worry
    about, in words a newcomer reads (a site's first graph and the warm-up steps' are
    expected; the rest are recompiles)."""
    expected = misses - after_warmup
    text = f"{plural(misses, 'compile')} (cache {'miss' if misses == 1 else 'misses'})"
    if not misses:
        return text
    if expected == misses:
        return text + (", the usual warm-up" if misses == 1 else f", {'both' if misses == 2 else 'all'} the usual "
                                                                 "warm-up")
    return text + f", {expected} of them the usual warm-up" if expected else text + ", none of them warm-up"


def findings_by_site(findings: Sequence[Finding], site_of: Callable[[int], str | None]) -> dict[str, Finding]:
    """Each sync site's finding, by the executions it points at (two optimizers' step() in
    one fallback finding, the reads a growing graph explains): a finding about the site's
    own sync (a fallback, a read) before the root one (a missing mark_step()), which
    explains every sync of its loop. site_of: an execution's index -> its site."""
    found: dict[str, Finding] = {}
    for finding in sorted(findings, key=lambda f: f.kind == FindingKind.MISSING_MARK_STEP):
        for index in finding.executions:
            site = site_of(index)
            if site is not None:
                found.setdefault(site, finding)
    return found


def site_verdict(site: SiteStats, findings: Sequence[Finding], by_site: Mapping[str, Finding] | None = None) -> str:
    """Why a costly sync site costs what it does, in a few words: its finding (named at
    the site, or pointing at its executions), the step's own sync, or none (the report
    says so rather than leave the largest costs unexplained)."""
    found = next((f for f in findings if f.frame and f.frame.site == site.site), None)
    if found is None and by_site is not None:
        found = by_site.get(site.site)
    if found is not None:
        op = found.details.op if isinstance(found.details, (FallbackDetails, FailureDetails)) else None
        label = f"{KIND_LABELS.get(found.kind, found.kind)} {op or ''}".rstrip()
        return f"finding: {found.short or label}"
    if set(site.causes) == {"mark_step"}:
        return "the step's own sync"
    return "no finding"


def collectives_text(rows: Sequence[Row], steps: int) -> str:
    """SPMD's collectives in one phrase: "each device sends 192.0 KB per step, 96.0 KB of
    it not asked for by the layout"; "" without collectives."""
    if not rows:
        return ""
    per = "per step" if steps else "in the run"
    unasked = sum(row.sent_per_step for row in rows if not row.expected)
    return (f"each device sends {size_text(sum(row.sent_per_step for row in rows))} {per}"
            + (f", {size_text(unasked)} of it not asked for by the layout" if unasked else ""))


def collective_line(row: Row) -> str:
    """One collective as the report and the Backend tab list it; one the layout did not
    ask for says so before what it is (a narrow pane cuts the line's end)."""
    if not row.expected:
        return f"{size_text(row.sent_per_step):>9}  NOT ASKED FOR: {row.describe()}"
    return f"{size_text(row.sent_per_step):>9}  {row.describe()}  [expected: {row.expected}]"


def transfers_text(summary: Summary) -> str:
    """Host<->device copies per step (or in all, without steps), where the backend
    counted them: "to the device 2.0 (4.9 MB), from it 1.0 (4 B) per step"."""
    transfers = summary.transfers
    if not transfers:
        return ""
    per = max(summary.steps, 1)

    def part(way: str, name: str) -> str:
        count, size = transfers.get(name, 0), transfers.get(f"{name}Bytes", 0)
        return f"{way} {count / per:.1f} ({size_text(size / per)})" if summary.steps else f"{way} {count} ({size_text(size)})"

    return (f"{part('to the device', 'TransferToDevice')}, {part('from it', 'TransferFromDevice')}"
            + (" per step" if summary.steps else " in all"))


MEMORY_NAMES = {"inputs": "inputs", "outputs": "outputs", "intermediates": "intermediates", "program": "program",
                "aliased_inputs": "aliased inputs"}


def memory_text(memory: dict[str, int]) -> str:
    """A graph's memory after compiling, as XLA reported it (graph_memory). A figure of 0 is
    left out: PJRT's CPU client reports 0 for what it did not measure (torch_xla 2.9: a
    Linear's step, its loss among the outputs, gave inputs, outputs and program 0 B)."""
    return ", ".join(f"{MEMORY_NAMES[key]} {size_text(size)}" for key, size in memory.items()
                     if key in MEMORY_NAMES and size)


def site_text(frame: Frame | None, cwd: str | None = None, width: int = 0) -> str:
    """file:line relative to the run's folder; width: when longer than this, the file's
    base name (width=1: always)."""
    if frame is None:
        return "?"
    text = frame.site if frame.file.startswith("In [") else f"{short_path(frame.file, cwd)}:{frame.line}"
    if width and len(text) > width and not frame.file.startswith("In ["):
        text = f"{os.path.basename(frame.file)}:{frame.line}"
    return text


# The mark of a node in a diff against the closest earlier graph. The origin of a
# change wins over what it carried to, whatever order the changes come in.
ORIGIN, CARRIED, ADDED = "origin", "carried", "added"


def diff_marks(diff: GraphDiff) -> dict[str, str]:
    marks: dict[str, str] = {}
    for change in diff.changes:
        if not change.node:
            continue
        mark = ADDED if change.kind == "op_added" else (ORIGIN if change.origin else CARRIED)
        if marks.get(change.node) != ORIGIN:
            marks[change.node] = mark
    return marks


def divergence_text(divergence: Divergence, cwd: str | None = None) -> str:
    where = f" at {site_text(divergence.frame, cwd)}" if divergence.frame else ""
    return divergence.message() + where


def drawing_title(execution: Execution, explained: Recompile | None = None, diff_requested: bool = False) -> str:
    """The title of a graph drawing: which execution, where, and against what it is marked."""
    title = (f"execution {execution.index}, step {execution.step}: {execution.detail or execution.cause} "
             f"at {site_text(execution.frame)}\ngraph {execution.graph}, {execution.nodes} nodes, "
             f"cache {execution.cache}")
    if execution.fallback_ops:
        title += "\nfallbacks: " + ", ".join(execution.fallback_ops)
    if explained is not None and explained.diff is not None:
        title += (f"\nred: {len(explained.diff.changed_nodes)} nodes changed since execution "
                  f"{explained.closest_execution} ({explained.headline()})")
    elif explained is not None and explained.new_graph:
        title += f"\n{explained.note}"
    elif diff_requested:
        title += "\n(no earlier graph to compare with)"
    return title


def why_text(execution: Execution, recompile: Recompile | PendingRecompile | None, explained: bool = True) -> str:
    """Why this execution ran or compiled, for the table's `why` column: the op that fell
    back, the call that synced, and for a miss what changed. explained: whether analysis
    has seen this execution yet (a live run analyses about once a second)."""
    parts = []
    if execution.cause == "fallback":  # the cause column says fallback: name the op
        parts.append((execution.detail or "?").removeprefix("aten::"))
    elif execution.cause != "mark_step":
        parts.append(execution.detail or execution.cause)
    if execution.is_miss:
        if recompile is not None and not is_compared(recompile):
            parts.append("recompile (warm-up)" if recompile.warmup else "recompile")  # not compared: costly
        elif recompile is not None:
            parts.append(recompile.brief(compact=True) + (" (warm-up)" if recompile.warmup else ""))
        elif explained:
            parts.append("first graph")
    return "; ".join(parts)


# What a finding is, in a word or two: its label before finding_headline.


def finding_headline(finding: Finding, cwd: str | None = None) -> str:
    """A finding in one short line after its KIND_LABELS label, for the UI's findings
    strip and the grouped text summary: what, how often, where."""
    details = finding.details
    if isinstance(details, FallbackDetails):
        call = f" in {details.call}()" if details.call else ""
        forced = details.executions_forced
        what = f"{details.call}() through {len(details.ops)} ops" if len(details.ops) > 1 and details.call \
            else f"{details.op}{call}"
        text = (f"{what}: {plural(details.calls, 'call')}"
                + (f", {plural(forced, 'extra execution')}" if forced else ""))
    elif isinstance(details, GrowingGraph):
        text = f"the graph grows ~{details.growth_per_sync} nodes per sync over {details.syncs} syncs"
    elif isinstance(details, RepeatedBlock):
        text = f"one graph repeats a block of {len(details.pattern)} ops {details.repeats} times"
    else:
        text = finding.short or finding.message
    return f"{text} · {site_text(finding.frame, cwd, width=1)}" if finding.frame else text


_NOISE = re.compile(r", (NodeType=\S+?|device=CPU0)(?=,|$)")
_LOCATION = re.compile(r", location=([^,]+)")
_SOURCE = re.compile(r'\[source="[^"]*"\]')


def readable_ir(text: str) -> str:
    """The IR without C++ type names and the one device, each node's source line moved to
    the end of its line: what a reader scans for. The raw text is one key away (r)."""
    lines = []
    for line in text.splitlines():
        line = _NOISE.sub("", line)
        location = _LOCATION.search(line)
        if location:
            line = f"{line[:location.start()]}{line[location.end():]}  # {location.group(1)}"
        lines.append(line)
    return "\n".join(lines)


# XLA's HLO metadata: the IR op an instruction lowers and the innermost line that built it.
_METADATA = re.compile(r', metadata=\{([^}]*)\}')
_METADATA_FIELD = re.compile(r'(\w+)=(?:"([^"]*)"|(\S+))')


def _metadata(match: re.Match[str]) -> str:
    fields = {name: quoted or bare for name, quoted, bare in _METADATA_FIELD.findall(match.group(1))}
    op = fields.get("op_type", "").replace("__", "::", 1)
    where = f"{fields['source_file'].rsplit('/', 1)[-1]}:{fields.get('source_line', '?')}" if "source_file" in fields else ""
    return f"  /* {' '.join(filter(None, (op, where)))} */" if op or where else ""


def readable_backend(text: str) -> str:
    """TorchScript without its [source=...] attributes: they name the sync that lowered
    the graph, the same line on every node. XLA's HLO with its metadata cut to the op
    and the file's name and line."""
    return _METADATA.sub(_metadata, _SOURCE.sub("", text))


def finding_groups(findings: list[Finding]) -> list[list[Finding]]:
    """Findings of one kind at one site (the same op, the same kinds of change) together:
    a suite with a recompile in each of 1,800 tests is one line with its count. In the
    findings' own order (find_all's: severity, root causes, then time cost)."""
    groups: dict[tuple, list[Finding]] = {}
    for finding in findings:
        key = (finding.kind, finding.frame.site if finding.frame else "?", finding.details.subject)
        groups.setdefault(key, []).append(finding)
    return sorted(groups.values(), key=lambda g: (min(SEVERITIES.index(f.severity) for f in g),
                                                  all(f.kind not in ROOT_KINDS for f in g),
                                                  -sum(f.cost_ms for f in g)))
