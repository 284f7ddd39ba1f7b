"""Quantities as a person reads them, for the analysis' sentences and every renderer."""
from __future__ import annotations


def size_text(size: float) -> str:
    """Bytes as a person reads them: 4 B, 1.2 KB, 4.9 MB, 2.0 GB (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def rounded(value: float) -> str:
    """A count or rate in a sentence: 2.67, not 2.66667; 4, not 4.0."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text if text != "-0" else "0"
