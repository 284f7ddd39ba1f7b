"""The process's peak resident memory where it rose (RunInfo.peak_rss, the trace's
`memory`): how the report, the HTML report, `check --max-peak-rss` and a run killed for
memory say it."""
from __future__ import annotations

from collections.abc import Sequence

from lazyviz.analysis.units import size_text
from lazyviz.trace.model import PeakRss

# A peak that rose by less than this share over the run is flat, not "rising".
_FLAT = 0.1


def peak_kb(peaks: Sequence[PeakRss]) -> int:
    """The run's peak resident memory, KiB (0: none recorded)."""
    return max((peak.kb for peak in peaks), default=0)


def when(peak: PeakRss, stepped: bool) -> str:
    """Where in the run a figure was taken: by its step, or in a run without steps by
    its execution."""
    return f"step {peak.step}" if stepped else f"execution {peak.execution}"


def peak_text(peaks: Sequence[PeakRss], stepped: bool) -> str:
    """"peak resident memory 2.9 GB by step 40, up from 310.0 MB at step 1 (rising 38
    times)"; "" where the trace has none."""
    if not peaks:
        return ""
    first, last = peaks[0], max(peaks, key=lambda peak: peak.kb)
    text = f"peak resident memory {size_text(last.kb * 1024)} by {when(last, stepped)}"
    if last.kb > first.kb * (1 + _FLAT):
        text += (f", up from {size_text(first.kb * 1024)} at {when(first, stepped)} "
                 f"(rising {len(peaks) - 1} time{'s' if len(peaks) > 2 else ''})")
    return text


def over_budget(peaks: Sequence[PeakRss], limit_kb: int, stepped: bool) -> str | None:
    """The breach of a peak-memory budget, in words; None within it."""
    if not peaks:
        return (f"peak resident memory: the trace records none (recorded before lazyviz kept it), budget "
                f"{size_text(limit_kb * 1024)}")
    top = peak_kb(peaks)
    if top <= limit_kb:
        return None
    past = next(peak for peak in peaks if peak.kb > limit_kb)
    return (f"peak resident memory {size_text(top * 1024)} (budget {size_text(limit_kb * 1024)}): past the budget "
            f"by {when(past, stepped)}")
