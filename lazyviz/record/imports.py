"""What a script imports, read from its source without running it."""
from __future__ import annotations

import ast
import importlib.util


def imported_modules(target: str, module: bool = False) -> set[str] | None:
    """Dotted names of the modules the script (or, with module, the module) imports at
    any depth of its file (`from torch._lazy import mark_step` gives torch._lazy and
    torch._lazy.mark_step); None when its source cannot be read."""
    try:
        if module:
            spec = importlib.util.find_spec(target)
            target = spec.origin if spec and spec.origin else ""
        with open(target, "rb") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def top_level_imports(target: str, module: bool = False) -> set[str] | None:
    """Top-level package names the script imports; None when its source cannot be read."""
    modules = imported_modules(target, module)
    return None if modules is None else {name.split(".")[0] for name in modules}
