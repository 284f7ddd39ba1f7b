"""lazyviz's terminal UI (Textual). Reads traces through `lazyviz.trace` only: no torch,
no tracer."""
