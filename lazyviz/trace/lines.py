"""A trace's IR lines by id (schema 5), held as they are stored: each row of lines stays
compressed, and is unpacked when one of its lines is asked for. A run that recompiles
at every step stores millions of distinct lines; as separate strings they took more
memory than the texts they came from (10,000 synthetic graphs: 568 MB against 400 MB)."""
from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

# Lines kept unpacked, the least recently asked row going first: a BERT fine-tune's
# 54,000 stay unpacked whole; past that a row is unpacked again when asked.
KEPT_UNPACKED = 400_000


class StoredLines(Sequence[str]):
    """line id -> its text; 0 names an empty line, as no stored line is. Grows as a live
    trace stores new rows (add); an id never changes its line."""

    def __init__(self, unpack: Callable[[str | bytes], list[str]]) -> None:
        self._unpack = unpack  # a row as stored -> its lines (checked readable when added)
        self._firsts: list[int] = []  # per row: its first id, in order
        self._counts: list[int] = []
        self._stored: list[str | bytes] = []
        self._end = 1  # ids below it are known or lacking
        self._lacking: list[tuple[int, int]] = []  # [start, stop) ranges no readable row holds
        self._unpacked: OrderedDict[int, list[str]] = OrderedDict()  # row -> its lines
        self._unpacked_lines = 0
        self._last: tuple[int, list[str]] = (0, [""])  # the row asked last: its first id, its lines
        self._keeping = threading.Lock()  # the UI's tabs ask from worker threads
        self.chars = 0  # of every line stored, each once (with its newline)

    def add(self, first: int, count: int, lines: list[str] | None, stored: str | bytes) -> None:
        """The row of ids first to first + count - 1 (lines None: damaged, its ids lacking)."""
        if first > self._end:
            self._lacking.append((self._end, first))
        if lines is None:
            self._lacking.append((first, first + count))
        else:
            self.chars += sum(map(len, lines)) + count
            with self._keeping:
                row = len(self._firsts)
                self._firsts.append(first)
                self._counts.append(count)
                self._stored.append(stored)
                self._keep(row, lines)
        self._end = max(self._end, first + count)

    def lacks_any(self, ids: Sequence[int]) -> bool:
        """Whether an id names no readable line (only a damaged trace has such ids)."""
        if not self._lacking:
            return False
        starts = [start for start, _ in self._lacking]
        for line_id in set(ids):
            at = bisect.bisect_right(starts, line_id) - 1
            if at >= 0 and line_id < self._lacking[at][1]:
                return True
        return False

    def __len__(self) -> int:
        return self._end

    def __getitem__(self, line_id: int) -> str:  # type: ignore[override]  # by id, never a slice
        first, lines = self._last  # a graph's new lines lie together: most asks are here
        at = line_id - first
        if 0 <= at < len(lines):
            return lines[at]
        return self._find(line_id)

    def _find(self, line_id: int) -> str:
        if line_id == 0:
            return ""
        row = bisect.bisect_right(self._firsts, line_id) - 1
        if line_id < 0 or row < 0 or line_id >= self._firsts[row] + self._counts[row]:
            raise IndexError(f"no IR line {line_id}")
        with self._keeping:
            lines = self._unpacked.get(row)
            if lines is None:
                lines = self._unpack(self._stored[row])
                self._keep(row, lines)
            else:
                self._unpacked.move_to_end(row)
        self._last = (self._firsts[row], lines)
        return lines[line_id - self._firsts[row]]

    def _keep(self, row: int, lines: list[str]) -> None:
        self._unpacked[row] = lines
        self._unpacked_lines += len(lines)
        while self._unpacked_lines > KEPT_UNPACKED and len(self._unpacked) > 1:
            _, gone = self._unpacked.popitem(last=False)
            self._unpacked_lines -= len(gone)
