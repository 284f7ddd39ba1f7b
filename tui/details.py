"""Text for the detail tabs of one execution: pure functions, tested without a UI."""
from __future__ import annotations

import bisect
import linecache
import os
from collections.abc import Callable, Sequence

from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.recompiles import Recompile
from lazyviz.present import ADDED, CARRIED, ORIGIN, diff_marks, readable_ir
from lazyviz.trace.model import Execution, Frame
from lazyviz.trace.table import ExecutionTable, Kind


def stack_text(stack: list[Frame], user: Frame | None, context: int = 3) -> str:
    """The Python stack, outermost first, the user frame marked, and the source around it."""
    if not stack:
        return "no stack recorded (capture light)" if user is None else f"> {user.site} in {user.function}"
    lines = []
    for frame in stack:
        marker = "> " if user is not None and frame == user else "  "
        lines.append(f"{marker}{frame.function} ({frame.file}:{frame.line})")
    if user is not None and os.path.isfile(user.file):
        lines += ["", f"{user.file}:"]
        for number in range(max(1, user.line - context), user.line + context + 1):
            source = linecache.getline(user.file, number).rstrip("\n")
            if source or number <= user.line:
                lines.append(f"{number:6d} {'>' if number == user.line else '|'} {source}")
    return "\n".join(lines)


PERSISTENT_WORDS = {
    "loaded": "its graph was loaded from XLA's persistent compile cache: an earlier run compiled it, this one did not",
    "not_cached": "its graph was not in XLA's persistent compile cache: compiled here, and written to it",
    "load_failed": "its graph was in XLA's persistent compile cache, but XLA could not load it: compiled again "
                   "(PersistentCacheDeserializeFailure; XLA's log on stderr says why)",
}


def counters_text(execution: Execution, executions: Sequence[Execution] = ()) -> str:
    """The counters that moved with this execution (since the one before), and, for a
    fallback that forced several executions, where its op's counter moved."""
    since = f" (since execution {execution.index - 1})" if execution.index else ""
    lines = [PERSISTENT_WORDS[execution.persistent], ""] if execution.persistent else []
    lines.append(f"counters that moved with execution {execution.index}{since}:")
    if not execution.counters:
        lines.append("  none recorded (capture light)" if not execution.fallback_ops else "")
    for name, delta in sorted(execution.counters.items()):
        lines.append(f"  {name:<40} +{delta}")
    if execution.fallback_ops:
        lines += ["", "fallback ops:"] + [f"  {op:<40} x{n}" for op, n in execution.fallback_ops.items()]
    elif execution.cause == "fallback" and execution.detail:
        counted = last_before(ExecutionTable.of(executions), execution.index,
                              lambda kind: execution.detail in kind.fallback_ops)
        if counted is not None:
            lines += ["", f"{execution.detail}'s counter moved with execution {counted.index}: one call of a "
                      "fallback op syncs each of its lazy inputs in turn, so the same call forced this "
                      "execution too"]
    lines += ["", f"sync {execution.sync_ms:.3f} ms = compile {execution.compile_ms:.3f} + execute "
              f"{execution.execute_ms:.3f}; python tracing before it {execution.trace_ms:.3f} ms"]
    return "\n".join(lines)


def last_before(table: ExecutionTable, index: int, test: Callable[[Kind], bool]) -> Execution | None:
    """The last execution before number `index` whose kind passes the test."""
    found = table.where(test)
    before = bisect.bisect_left(found, bisect.bisect_left(table.index, index))  # positions run in index order
    return table[found[before - 1]] if before else None


def diff_text(execution: Execution, recompile: Recompile | None, graphs: IRGraphs, raw: bool = False) -> str:
    """The new graph's IR with each line marked against the closest earlier graph:
    '!' where a change came in, '~' carried from operands, '+' added, '-' removed."""
    if recompile is None:
        return "# nothing compiled before this graph to compare with"
    header = [f"# execution {execution.index} (graph {execution.graph[:8]}) vs execution "
              f"{recompile.closest_execution} (graph {(recompile.closest or '?')[:8]}, "
              f"{'same site' if recompile.same_site else 'another site'})"]
    if execution.graph == recompile.closest:
        return "\n".join(header + ["# same graph: nothing changed"])
    if recompile.diff is None:
        return "\n".join(header + [f"# {recompile.note or 'no IR to compare'}"])
    if recompile.choice:
        header.append(f"# {recompile.choice}")
    origins = recompile.diff.origins
    if origins:
        header.append(f"# what changed ({len(origins)}):")
        for change in origins:
            # The line that built it on a line of its own: it stays on screen at 80 columns.
            what, _, built = change.describe().partition(", built at ")
            header.append(f"#   {what}")
            if built:
                header.append(f"#       built at {built}")
    else:
        header.append(f"# {recompile.headline()}")
    new_graph, old_graph = graphs.parsed(execution.graph), graphs.parsed(recompile.closest)
    new_ir, old_ir = graphs.text(execution.graph), graphs.text(recompile.closest)
    if new_graph is None or old_graph is None:
        return "\n".join(header + ["# cannot read the IR"])
    tidy = (lambda line: line) if raw else readable_ir
    symbols = {ORIGIN: "!", CARRIED: "~", ADDED: "+"}
    marks = {node: symbols[mark] for node, mark in diff_marks(recompile.diff).items()}
    raw_lines = new_ir.splitlines()
    body = [f"{marks.get(node.id, ' ')} {tidy(raw_lines[node.line - 1].strip())}" for node in new_graph.nodes]
    removed = [c.old_node for c in recompile.diff.changes if c.kind == "op_removed"]
    old_lines = old_ir.splitlines()
    body += [f"- {tidy(old_lines[old_graph.by_id[node_id].line - 1].strip())}" for node_id in removed
             if node_id in old_graph.by_id]
    return "\n".join(header + [""] + body)


def graphs_with(term: str, ir_texts: dict[str, str]) -> set[str]:
    """Graph ids whose IR mentions the term (an op name, a shape)."""
    term = term.strip().lower()
    return {graph for graph, text in ir_texts.items() if term and term in text.lower()}


def matches(execution: Execution | Kind, term: str, graphs: set[str]) -> bool:
    """Does the search term name this execution's site, graph, cause, detail, or an op
    in its IR (graphs: from graphs_with)?"""
    term = term.strip().lower()
    if not term:
        return False
    site = execution.frame.site.lower() if execution.frame else ""
    return (term in site or execution.graph.startswith(term) or term == execution.cause
            or term in (execution.detail or "").lower() or execution.graph in graphs)
