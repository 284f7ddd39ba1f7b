"""What XLA wrote since the last read, as the XLA backend reads it: its analyses, parsed
and queued (the executions not yet handed on, the compiles awaiting their execution),
and its tensors dump's IR by graph hash. A part of XlaBackend with its own state; the
backend's set-up says where to read (the user's file, or lazyviz's own)."""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path

from lazyviz.backends.xla_dynamo import COMPILE_CAUSE
from lazyviz.backends.xla_io import Tail, echoed
from lazyviz.backends.xla_reports import GraphDumpParser, Report, ReportParser


class XlaReads:
    """reports: XLA's analysis file. dump: its tensors dump (full capture, where read),
    with the sizes its files had before the run (XLA appends). echo: the user's debug
    level, where lazyviz prints on stderr the analyses XLA would have printed there."""

    def __init__(self, reports: Tail) -> None:
        self.reports = reports
        self.dump: Path | None = None
        self.dump_sizes: dict[Path, int] = {}
        self.echo: int | None = None
        self.parser = ReportParser()
        self._graph_parser = GraphDumpParser()
        self._graphs: Tail | None = None
        # Each node's line as its reference where lazyviz's getter gave nodes theirs
        # (the hook's decode_locations); as it is else.
        self.decode: Callable[[str], str] = str
        self.pending: deque[Report] = deque()  # execution reports not yet handed on
        self.compiles: deque[Report] = deque()  # compile reports awaiting their execution
        self.ir: dict[str, str] = {}  # graph hash -> IR text, from the tensors dump
        self.last_compile: Report | None = None  # the last compile report, until an execution follows it
        self.unexpected: Report | None = None  # a sync inside torch_xla.compile(full_graph=True)
        self.compile_reports = 0  # Compilation Analyses read, and those handed on
        self.compile_reports_seen = 0

    def read_users_file(self, reports: Tail) -> None:
        """Read the user's own analysis file (PT_XLA_DEBUG_FILE) instead of lazyviz's."""
        self.reports = reports

    def echo_at(self, level: int) -> None:
        """Print on stderr what XLA would have printed there at the user's debug level."""
        self.echo = level

    def read_dump(self, dump: Path, appended: bool = False) -> None:
        """Read XLA's tensors dump for the IR; appended: the user's own, which XLA appends
        to: only what this run adds is read."""
        self.dump = dump
        self.dump_sizes = ({path: path.stat().st_size for path in dump.parent.glob(dump.name + "*")}
                           if appended else {})

    def take_refused(self) -> Report | None:
        """The report of a graph XLA refused (a sync inside torch_xla.compile(full_graph=
        True)) or failed to compile (its compile report, no execution after it), once."""
        report = self.unexpected or self.last_compile
        if self.unexpected is not None:
            self.unexpected = None
        else:
            self.last_compile = None
        return report

    def take_pending(self) -> list[Report]:
        """The execution reports read and not yet handed on, oldest first; none left."""
        batch = list(self.pending)
        self.pending.clear()
        return batch

    @property
    def settled(self) -> bool:
        """Nothing read is half handed on: no report pending, no compile awaiting its
        execution, none refused, the parser between reports."""
        return (not self.pending and not self.compiles and self.last_compile is None and self.unexpected is None
                and self.parser.idle)

    def frameless_graph(self) -> str:
        """The next graph the dump holds that ran without a report (autograd's thread); ""."""
        frameless = self._graph_parser.frameless
        return frameless.popleft() if frameless else ""

    def new_compile_reports(self) -> int:
        """Compile reports read since the last call."""
        new = self.compile_reports - self.compile_reports_seen
        self.compile_reports_seen = self.compile_reports
        return new

    def read(self, text: str | None = None) -> None:
        """The analyses XLA wrote since the last read (or `text`, read already), queued."""
        if text is None:
            text = self.reports.read()
        # At level 0 XLA prints only an unexpected execution: most texts hold none.
        if self.echo is not None and text and (self.echo >= 1 or "Unexpected Execution Analysis: " in text):
            shown = echoed(text, self.echo)
            if shown:
                sys.stderr.write(shown)
                sys.stderr.flush()
        for report in self.parser.feed(text):
            if report.kind == "Execution":
                self.pending.append(report)
                self.last_compile = None
            elif report.kind == "Compilation":
                self.compiles.append(report)
                self.compile_reports += 1
                if COMPILE_CAUSE not in report.cause:  # torch.compile's runs later: not a failed compile
                    self.last_compile = report
            elif report.kind == "Unexpected Execution":  # XLA raises at once: it never ran
                self.unexpected = report
            elif report.kind == "Post Compilation" and self.compiles:
                self.compiles[-1].add_lines(["", *report.lines])

    def read_graphs(self) -> None:
        """The graphs the tensors dump gained, by hash."""
        if self._graphs is None:
            if self.dump is None:
                return
            # XLA appends the device ordinal to the name it was given.
            found = sorted(self.dump.parent.glob(self.dump.name + "*"))
            if not found:
                return
            self._graphs = Tail(found[0], self.dump_sizes.get(found[0], 0))
        self.ir.update((graph, self.decode(text)) for graph, text in self._graph_parser.feed(self._graphs.read()).items())

    def close(self) -> None:
        self.reports.close()
        if self._graphs is not None:
            self._graphs.close()
