"""The recording side: what runs in the traced process. `tracer.py` (the hot path) with
its parts `sync_wrappers.py` and `stack_walk.py`, `iterations.py`, and `recorder.py`
(one recording's lifecycle); `child.py` is the process `lazyviz run` starts,
`supervisor.py` its side of it, `imports.py` what a script imports without running it.
Nothing downstream (trace reader, analysis, renderers, UI) imports from here."""
