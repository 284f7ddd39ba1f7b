"""The design's one direction of imports, checked on the source: recording -> trace file ->
reader -> analysis -> presentation -> renderers and UI, with no circle among lazyviz's
own modules. Every import counts, a function's local imports too."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

# Each stage, and the stages it must never import (they come after it in the flow, or
# beside it: the UI and the commands are two front ends). The recording side
# (lazyviz.record) is the traced process's: nothing downstream imports any of it; within
# it, the tracer and its parts come before the recorder that drives them.
_TRACER = ("lazyviz.record.tracer", "lazyviz.record.sync_wrappers", "lazyviz.record.stack_walk",
           "lazyviz.record.iterations")
_AFTER_TRACER = ("lazyviz.record.recorder", "lazyviz.record.child", "lazyviz.analysis", "lazyviz.present",
                 "lazyviz.export", "lazyviz.tui", "lazyviz.commands", "lazyviz.fix")
STAGES = {
    "lazyviz.trace": ("lazyviz.record", "lazyviz.backends", "lazyviz.analysis", "lazyviz.present", "lazyviz.export",
                      "lazyviz.tui", "lazyviz.commands", "lazyviz.fix"),
    "lazyviz.backends": ("lazyviz.record", "lazyviz.analysis", "lazyviz.present", "lazyviz.export", "lazyviz.tui",
                         "lazyviz.commands"),
    **dict.fromkeys(_TRACER, _AFTER_TRACER),
    "lazyviz.analysis": ("lazyviz.record", "lazyviz.backends", "lazyviz.present", "lazyviz.export", "lazyviz.tui",
                         "lazyviz.commands", "lazyviz.fix"),
    # Edits from findings and the user's source; their trial re-runs `lazyviz run` as a
    # process, never the tracer in this one.
    "lazyviz.fix": ("lazyviz.record", "lazyviz.backends", "lazyviz.tui", "lazyviz.commands", "lazyviz.export"),
    "lazyviz.present": ("lazyviz.record", "lazyviz.backends", "lazyviz.export", "lazyviz.tui", "lazyviz.commands"),
    "lazyviz.export": ("lazyviz.record", "lazyviz.backends", "lazyviz.tui", "lazyviz.commands"),
    "lazyviz.tui": ("lazyviz.record", "lazyviz.backends", "lazyviz.commands"),
}


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in ((ROOT / "lazyviz", "lazyviz"), (ROOT / "tui", "lazyviz.tui")):
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts))
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """lazyviz modules this one imports (a `from package import name` that names a
    module counts as that module)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    # Importing a.b.c runs the package a.b's __init__ first: an import loop can hide there.
    found |= {parent for module in found for parent in _parents(module) if not within(name, parent)}
    return {m for m in found if m in known and m != name}


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def within(module: str, stage: str) -> bool:
    return module == stage or module.startswith(stage + ".")


def test_no_stage_imports_one_after_it() -> None:
    back = [f"{module} imports {target}" for module, targets in graph().items() for target in sorted(targets)
            for stage, later in STAGES.items() if within(module, stage) and any(within(target, x) for x in later)]
    assert back == []


def test_no_circles() -> None:
    edges = graph()
    # A package's __init__ importing its own modules is the package, not a circle.
    edges = {m: {t for t in ts if not within(t, m)} for m, ts in edges.items()}
    circles, state = [], dict.fromkeys(edges, 0)  # 0 unseen, 1 on the path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state[target] == 1:
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif state[target] == 0:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if state[module] == 0:
            visit(module, [module])
    assert circles == []


def test_the_ui_is_installed_under_lazyviz() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '"lazyviz.tui" = "tui"' in text and '"tui*"' not in text


def _source_lines(*folders: str) -> list[tuple[str, int, str]]:
    return [(str(path.relative_to(ROOT)), number, line) for folder in folders
            for path in sorted((ROOT / folder).rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), start=1)]


def test_nothing_outside_the_backends_asks_a_backends_name() -> None:
    """What a backend can do is in the run's Capabilities: code that compared the backend's
    name ("xla" has HLO) would be wrong for the next backend, a torch_xla fork's first."""
    asked = [f"{file}:{number}: {line.strip()}" for file, number, line in _source_lines("lazyviz", "tui")
             if not file.startswith("lazyviz/backends/") and re.search(r"""[!=]=\s*["'](ts|xla)["']""", line)]
    assert asked == []


def test_finding_kinds_are_compared_as_members() -> None:
    """A kind compared as a string ("crash") is not found when the kind is renamed."""
    from lazyviz.analysis.kinds import FindingKind

    values = "|".join(kind.value for kind in FindingKind)
    pattern = re.compile(rf"""kind\s*(==|!=|in|not in)\s*[({{]?\s*["']({values})["']""")
    compared = [f"{file}:{number}: {line.strip()}" for file, number, line in _source_lines("lazyviz", "tui")
                if pattern.search(line)]
    assert compared == []
