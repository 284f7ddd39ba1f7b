"""Parsers for what PyTorch/XLA writes about its executions (checked on torch_xla 2.9):
the PT_XLA_DEBUG_LEVEL=2 analyses, the XLA_SAVE_TENSORS_FILE dump and the compiler's HLO
dump (XLA_FLAGS --xla_dump_to). Pure: text in, reports out; the adapter (xla.py) feeds
them what the files gained since its last read.

    Execution Analysis: ========...
    Execution Analysis: Execution Cause
    Execution Analysis:   user torch_xla.sync
    Execution Analysis: Graph Info:
    Execution Analysis:   Graph Hash: d3f0148b7de5c665cdb2a523e7ecc940
    Execution Analysis: Python Frame Triggered Execution:
    Execution Analysis:   main (/repo/train.py:34)
    Execution Analysis: --------...
"""
from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

from lazyviz.hlo_text import entry_computation

Frame = tuple[str, int, str]  # (file, line, function), as lazyviz.backends.Frame

_FRAME = re.compile(r"^\s+(\S.*?) \((.+):(\d+)\)$")
KINDS = ("Execution", "Compilation", "Post Compilation", "Unexpected Execution")


class Report:
    """One block of XLA's debug analysis. What is read from it is worked out once: a
    loop's cache hits hand the parser the same block again and again (ReportParser)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # one of KINDS
        self.lines: list[str] = []
        self._fields: dict[str, str] | None = None
        self._frames: list[Frame] | None = None

    def add_lines(self, lines: list[str]) -> None:
        self.lines += lines
        self._fields = self._frames = None

    def field(self, name: str) -> str:
        if self._fields is None:
            fields: dict[str, str] = {}
            for line in self.lines:
                key, sep, value = line.strip().partition(": ")
                if sep and key not in fields:
                    fields[key] = value
            self._fields = fields
        return self._fields.get(name, "")

    @property
    def cause(self) -> str:
        """XLA's words for why it ran: "user torch_xla.sync", "most likely user code trying
        to access tensor value before torch_xla.sync"."""
        at = next((i for i, line in enumerate(self.lines) if line.endswith(" Cause")), None)
        return self.lines[at + 1].strip() if at is not None and at + 1 < len(self.lines) else ""

    @property
    def graph_hash(self) -> str:
        return self.field("Graph Hash")

    @property
    def frames(self) -> list[Frame]:
        """Innermost first, as XLA prints them."""
        if self._frames is None:
            after = next((i for i, line in enumerate(self.lines) if line.startswith("Python Frame")), len(self.lines))
            frames = []
            for line in self.lines[after + 1:]:
                match = _FRAME.match(line)
                if match:
                    frames.append((match.group(2), int(match.group(3)), match.group(1)))
            self._frames = frames
        return self._frames


class ReportParser:
    """Feed it whole lines as the analysis file grows; it returns the reports completed.

    XLA appends a block in more than one write when it is over 1 KB (the first 1,025
    bytes, then the rest), with no lock: with a thread per device another thread's block
    can land between the two parts, the first ending mid-line. A block that opens inside
    another suspends it until it closes; a line without a prefix is the rest of the line
    the first part cut. The block's head (cause, hash, inputs and outputs) comes first,
    so it stays whole even where two blocks cross.

    A loop's cache hits write the same execution blocks at every sync: a text of whole
    execution blocks fed before gives the same (unchanged) reports back, unparsed."""

    _KEPT = 256  # texts of whole execution blocks whose reports are kept

    def __init__(self) -> None:
        self._report: Report | None = None
        self._suspended: list[Report] = []
        self._closed = ""  # the kind whose "----" line came last: its "====" line closes it
        self._known: dict[str, list[Report]] = {}

    @property
    def idle(self) -> bool:
        """No block is open: what was fed ended with whole blocks."""
        return self._report is None and not self._suspended and not self._closed

    def feed(self, text: str) -> list[Report]:
        idle = self.idle
        if idle and (known := self._known.get(text)) is not None:
            return list(known)
        done = self._feed(text)
        if idle and done and self._report is None and not self._suspended and not self._closed \
                and all(report.kind == "Execution" for report in done):
            if len(self._known) >= self._KEPT:
                self._known.clear()
            self._known[text] = done
        return done

    def _feed(self, text: str) -> list[Report]:
        done = []
        for line in text.splitlines():
            kind, sep, body = line.partition(" Analysis: ")
            if not sep or kind not in KINDS:
                if line and not line.startswith("Computation hash:") and self._report is not None \
                        and self._report.lines:
                    self._report.lines[-1] += line  # the rest of a line another block's write cut
                continue
            if body.startswith("===="):
                if self._closed != kind and self._report is not None:
                    self._suspended.append(self._report)  # a block opened inside another
                    self._report = None
                self._closed = ""
                continue
            self._closed = ""
            if body.startswith("----"):
                if self._report is not None:
                    done.append(self._report)
                self._report = self._suspended.pop() if self._suspended else None
                self._closed = kind
                continue
            if self._report is None or self._report.kind != kind:
                self._report = Report(kind)
            self._report.lines.append(body)
        return done


class GraphDumpParser:
    """Feed it the tensors dump as it grows; it returns {graph hash: IR text} for the
    graphs completed, each hash once (a graph is dumped at every sync). It also keeps,
    in order, the hashes of the syncs dumped without a Python frame (`frameless`): XLA
    writes no analysis for those (autograd's thread running a fallback in backward)."""

    def __init__(self) -> None:
        self._buffer = ""
        self._seen: set[str] = set()
        self.frameless: deque[str] = deque()

    def feed(self, text: str) -> dict[str, str]:
        self._buffer += text
        *entries, self._buffer = self._buffer.split("## END_GRAPH\n")
        found = {}
        for entry in entries:
            start = entry.find("## BEGIN_GRAPH\n")
            hash_at = entry.rfind("Graph Hash: ")
            if start < 0 or hash_at < 0:
                continue
            words = entry[hash_at + len("Graph Hash: "):].split()
            if not words:
                continue
            info = entry[entry.find("TensorsGraphInfo:") + len("TensorsGraphInfo:"):entry.find("Root Hashes:")]
            if "TensorsGraphInfo:" in entry and not info.strip():
                self.frameless.append(words[0])
            if words[0] in self._seen:
                continue
            self._seen.add(words[0])
            found[words[0]] = entry[start + len("## BEGIN_GRAPH\n"):hash_at].strip() + "\n"
        return found


def hlo_signature(lines: Iterable[str]) -> tuple[int, int] | None:
    """(parameters, outputs) of an HLO module's entry computation, as XLA's analyses
    count a graph's inputs and outputs; None without an entry line."""
    found = entry_computation(lines)
    return (len(found[0]), len(found[1])) if found is not None else None


def hlo_entry_size(hlo: str) -> int:
    """How many instructions an HLO module's entry computation has."""
    entry = hlo.find("\nENTRY ")
    if entry < 0:
        return 0
    body = hlo[entry:hlo.find("\n}", entry)]
    return sum(1 for line in body.splitlines() if line.startswith(("  %", "  ROOT %")))
