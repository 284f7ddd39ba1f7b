"""The record every finding's facts extend. It lives outside the findings package: the
failure explainer (analysis.failures) declares one, and the findings package imports it."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, kw_only=True)
class Details:
    """A kind's facts beyond its message: one record per kind, declared by the kind's
    module, that the finder writes and readers (fix edits, the report) read as fields.
    The JSON report writes every field (a nested record by its to_json)."""

    def to_json(self) -> dict:
        return {f.name: _json(getattr(self, f.name)) for f in fields(self)}

    @property
    def subject(self) -> str:
        """What the finding is about, in a word or two (an op, a read's cause): a trial's label."""
        return ""


def _json(value: object) -> object:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_json(item) for item in value]
    return value
