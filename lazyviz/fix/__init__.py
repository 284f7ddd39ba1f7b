"""From finding to fix: the edits that fix a run's findings, made from the user's source
and its syntax tree (proposals), and their proof by a bounded re-run of a patched copy
(trial). Reads findings and source files; never the traced process."""
from lazyviz.fix.proposals import Change, Proposal, apply_changes, propose, unified_diff

__all__ = ["Change", "Proposal", "apply_changes", "propose", "unified_diff"]
