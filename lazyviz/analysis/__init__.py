"""Pure functions from trace data to findings: no torch, no Textual, no file access."""
