"""The edits that fix a run's findings, made from the user's source and its syntax tree
(Python's `ast`, never patterns over text). A finding gets an edit only where the
change is mechanical; otherwise its proposal says what to change in words.

- missing mark_step(): the backend's step call at the end of the loop body that holds
  the growing graph's sync and builds most of its nodes (also before each `continue`);
- a per-step `.item()`/`print`: the statement moved into a step closure, which reads
  the value after the step's own execution (same output, no extra execution);
- a last short batch: `drop_last=True` on the DataLoader the loop reads;
- a slice whose bounds are Python numbers (baked into the graph): an index_select of
  indices made on the CPU.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lazyviz.analysis.findings import Finding, shape_change
from lazyviz.analysis.run import Run
from lazyviz.trace.model import Frame

LOOPS = (ast.For, ast.AsyncFor, ast.While)
INSTALLED = frozenset({"site-packages", "dist-packages"})  # folders of installed packages: not the user's to edit
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass(frozen=True)
class Change:
    """Lines [start, end) of a file (1-based) replaced by `lines`; start == end inserts."""

    file: str  # absolute path
    start: int
    end: int
    lines: tuple[str, ...]  # each with its line ending


@dataclass(frozen=True)
class Proposal:
    """What to do about one finding: an edit (changes) or, where none is mechanical, words."""

    finding: Finding
    summary: str  # the edit in one sentence, or what to change by hand
    changes: tuple[Change, ...] = ()
    alters_results: str = ""  # how the edit changes what the script computes, where it does
    same_as: int | None = None  # the earlier proposal (0-based) whose edit fixes this one too
    stale: str = ""  # a file the edit was for, changed since the trace was recorded: no edit then

    @property
    def mechanical(self) -> bool:
        return bool(self.changes) or self.same_as is not None

    def diff(self, relative_to: str = "") -> str:
        """This proposal's edit as a unified diff against the files as they are now."""
        texts = {}
        for change in self.changes:
            try:
                texts[change.file] = Path(change.file).read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                return ""
        return unified_diff(texts, self.changes, relative_to)


class Source:
    """One of the user's files: its text, lines and syntax tree."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.tree = ast.parse(text, filename=path)
        self.name = os.path.basename(path)

    def line(self, number: int) -> str:
        return self.lines[number - 1] if 0 < number <= len(self.lines) else ""

    def indent_of(self, number: int) -> str:
        text = self.line(number)
        return text[: len(text) - len(text.lstrip(" \t"))]

    def newline(self) -> str:
        return "\r\n" if self.lines and self.lines[0].endswith("\r\n") else "\n"


def file_hash(path: str) -> str | None:
    """SHA-256 of a file as the trace records the user's files (RunInfo.sources)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def read_source(path: str) -> Source | None:
    try:
        return Source(path, Path(path).read_bytes().decode("utf-8"))  # line endings kept
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


# -- where a line sits in the tree ------------------------------------------------------
def _children(node: ast.AST) -> Iterator[ast.AST]:
    """The statements directly inside a statement (bodies, branches, handlers)."""
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        yield from getattr(node, name, ()) or ()


def _chain(tree: ast.Module, line: int) -> list[ast.AST]:
    """The statements that hold `line`, outermost first, down to the innermost one."""
    chain: list[ast.AST] = []
    node: ast.AST = tree
    while True:
        inner = next((c for c in _children(node) if c.lineno <= line <= (c.end_lineno or c.lineno)), None)
        if inner is None:
            return chain
        chain.append(inner)
        node = inner


def _enclosing_loops(source: Source, line: int) -> list[ast.For | ast.AsyncFor | ast.While]:
    """Loops whose body runs `line` each iteration, outermost first, within its function
    (a loop around a `def` does not run the function's lines)."""
    chain = _chain(source.tree, line)
    scope = max((i for i, node in enumerate(chain) if isinstance(node, SCOPES)), default=-1)
    loops = []
    for node in chain[scope + 1:]:
        if isinstance(node, LOOPS) and any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in node.body):
            loops.append(node)
    return loops


def _all_loops(source: Source) -> list[ast.For | ast.AsyncFor | ast.While]:
    return [node for node in ast.walk(source.tree) if isinstance(node, LOOPS)]


def _in_body(loop: ast.AST, line: int) -> bool:
    return any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in loop.body)


def _own_statements(loop: ast.AST, kind: type) -> list[ast.AST]:
    """Statements of `kind` in the loop's body that belong to it, not to a nested loop or def."""
    found, todo = [], list(loop.body)
    while todo:
        node = todo.pop()
        if isinstance(node, kind):
            found.append(node)
        if not isinstance(node, (*LOOPS, *SCOPES)):
            todo.extend(_children(node))
    return found


def _alone_on_its_lines(source: Source, node: ast.stmt) -> bool:
    """Nothing but the statement (and a comment) on its lines: it can be replaced by lines."""
    before = source.line(node.lineno)[: node.col_offset]
    after = source.line(node.end_lineno or node.lineno)[node.end_col_offset or 0:].strip()
    return not before.strip() and (not after or after.startswith("#"))


# -- imports --------------------------------------------------------------------------
def _bound_modules(source: Source) -> dict[str, str]:
    """Names the module's top-level imports bind -> the module each names."""
    bound: dict[str, str] = {}
    for node in source.tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    bound.setdefault(root, root)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _imported_anywhere(source: Source) -> set[str]:
    names = set()
    for node in source.tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _import_change(source: Source, statement: str) -> Change:
    """`statement` after the module's last top-level import (or at its top)."""
    imports = [node for node in source.tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    after = (imports[-1].end_lineno or imports[-1].lineno) if imports else 0
    return Change(source.path, after + 1, after + 1, (statement + source.newline(),))


def _call_name(source: Source, dotted: str, module: str) -> tuple[str, tuple[Change, ...]]:
    """How the file names `dotted` (a module attribute, "torch._lazy.mark_step"), with the
    import to add when the file binds no name for `module`."""
    bound = _bound_modules(source)
    attribute = dotted[len(module) + 1:]
    for name, bound_module in bound.items():
        if bound_module == module and name != module.split(".")[0]:  # import torch_xla.core.xla_model as xm
            return f"{name}.{attribute}", ()
    root = module.split(".")[0]
    loaded = any(m == module or m.startswith(module + ".") for m in _imported_anywhere(source))
    if bound.get(root) == root and (loaded or module == root):
        return dotted, ()
    if module == "torch_xla.core.xla_model":
        return f"xm.{attribute}", (_import_change(source, "import torch_xla.core.xla_model as xm"),)
    return dotted, (_import_change(source, f"import {module}"),)


# The backends' names (RunInfo.names) -> (dotted call, its module).
STEP_CALLS = {"torch._lazy.mark_step()": ("torch._lazy.mark_step", "torch._lazy"),
              "torch_xla.sync()": ("torch_xla.sync", "torch_xla")}
CLOSURE_CALLS = {"torch._lazy.add_step_closure": ("torch._lazy.add_step_closure", "torch._lazy"),
                 "xm.add_step_closure": ("torch_xla.core.xla_model.add_step_closure", "torch_xla.core.xla_model")}


# -- the run's side: which lines, which files ------------------------------------------
class Context:
    """What the proposals read from the run: stacks, the lines that built graphs, sources."""

    def __init__(self, run: Run, read: Callable[[str], Source | None] = read_source) -> None:
        self.run = run
        self._read = read
        self._sources: dict[str, Source | None] = {}

    def source(self, path: str) -> Source | None:
        """The user's own file at `path`: never an installed package's (torch's clip_grad.py
        runs the loop of a clip_grad_norm_ finding, but is not the user's to edit)."""
        if path not in self._sources:
            self._sources[path] = self._read(path) if self._users(path) else None
        return self._sources[path]

    def unless_stale(self, proposal: Proposal) -> Proposal:
        """An edit made from a file that changed since the trace would land on the wrong
        lines: then words, saying so."""
        recorded = self.run.info.sources
        for file in dict.fromkeys(c.file for c in proposal.changes):
            if file in recorded and file_hash(file) != recorded[file]:
                return Proposal(proposal.finding, f"{proposal.finding.fix} ({os.path.basename(file)} changed since "
                                                  "the trace was recorded: run it again for an edit)", stale=file)
        return proposal

    def _users(self, path: str) -> bool:
        if not os.path.isabs(path) or INSTALLED.intersection(Path(path).parts):
            return False
        recorded = self.run.info.sources
        return path in recorded if recorded else True

    def stack(self, finding: Finding) -> list[Frame]:
        """The user frames of the finding's first execution, outermost first."""
        frames: list[Frame] = []
        if finding.executions and self.run.trace is not None:
            try:
                execution = self.run.execution(finding.executions[0])
                frames = [f for f in self.run.trace.stack(execution.stack_id) if self.source(f.file) is not None]
            except (KeyError, ValueError):
                frames = []
        if not frames and finding.frame is not None and self.source(finding.frame.file) is not None:
            frames = [finding.frame]
        return frames

    def built_at(self, finding: Finding) -> Counter[str]:
        """"file.py:12" -> nodes, over the largest graph the finding's executions ran."""
        graphs = {self.run.execution(e).graph for e in finding.executions[:200]}
        found = [self.run.ir_texts.parsed(g) for g in graphs]
        largest = max((f for f in found if f is not None), key=len, default=None)
        return largest.built_at if largest is not None else Counter()


def _nodes_inside(source: Source, loop: ast.AST, built: Counter[str]) -> int:
    total = 0
    for where, nodes in built.items():
        name, _, line = where.rpartition(":")
        if name == source.name and line.isdigit() and _in_body(loop, int(line)):
            total += nodes
    return total


# -- the proposals ----------------------------------------------------------------------
PARAMETER_LOOPS = frozenset({"parameters", "params", "param_groups", "named_parameters"})


def _over_parameters(loop: ast.AST) -> bool:
    """A loop over the model's parameters (an update, a norm): never the step's loop."""
    return bool(_loop_reads(loop) & PARAMETER_LOOPS)


def _mark_step(finding: Finding, context: Context) -> Proposal:
    """The loop whose iterations pile up: of the loops that build at least half as many of
    the graph's nodes as the one that builds most (not one over the parameters), the one
    around the sync if there is one, else the innermost. Where the IR names no line in a
    loop, the innermost loop around the sync."""
    names = context.run.info.names
    step_call = STEP_CALLS.get(names.get("mark_step", ""))
    if step_call is None:
        return Proposal(finding, finding.fix)
    stack = context.stack(finding)
    if not stack:
        return Proposal(finding, f"{finding.fix} (its source is not readable here)")
    built = context.built_at(finding)
    building = {where.rpartition(":")[0] for where in built}
    files = dict.fromkeys([*(frame.file for frame in stack),
                           *(f for f in context.run.info.sources if os.path.basename(f) in building)])
    around_sync = {id(loop) for frame in stack if (source := context.source(frame.file))
                   for loop in _enclosing_loops(source, frame.line)}
    candidates = []
    for file in files:
        source = context.source(file)
        for loop in _all_loops(source) if source else []:
            nodes = _nodes_inside(source, loop, built)
            if nodes and not _over_parameters(loop):
                candidates.append((nodes, source, loop))
    if candidates:
        most = max(nodes for nodes, _, _ in candidates)
        good = [(source, loop) for nodes, source, loop in candidates if nodes * 2 >= most]
        # Innermost first: the smallest span (an epoch loop holds the batch loop).
        good.sort(key=lambda pair: (id(pair[1]) not in around_sync, pair[1].end_lineno - pair[1].lineno))
        source, loop = good[0]
        return _insert_at_loop_end(finding, source, loop, step_call)
    for frame in reversed(stack):
        source = context.source(frame.file)
        loops = [loop for loop in _enclosing_loops(source, frame.line) if not _over_parameters(loop)] if source else []
        if source and loops:
            return _insert_at_loop_end(finding, source, loops[-1], step_call)
    return Proposal(finding, f"{finding.fix} (lazyviz cannot tell which loop: the IR names no line inside one)")


def _insert_at_loop_end(finding: Finding, source: Source, loop: ast.AST, step_call: tuple[str, str]) -> Proposal:
    first, last = loop.body[0], loop.body[-1]
    where = f"{source.name}:{loop.lineno}"
    if first.lineno == loop.lineno:
        return Proposal(finding, f"{finding.fix} (the loop at {where} is written on one line: split it first)")
    call, imports = _call_name(source, *step_call)
    indent = source.indent_of(first.lineno)
    changes = [Change(source.path, (last.end_lineno or last.lineno) + 1, (last.end_lineno or last.lineno) + 1,
                      (f"{indent}{call}(){source.newline()}",))]
    for skip in _own_statements(loop, ast.Continue):
        if not _alone_on_its_lines(source, skip):
            return Proposal(finding, f"{finding.fix} (the `continue` at {source.name}:{skip.lineno} shares its "
                                     "line: call it before that `continue` too)")
        changes.append(Change(source.path, skip.lineno, skip.lineno,
                              (f"{source.indent_of(skip.lineno)}{call}(){source.newline()}",)))
    also = " and before each `continue`" if len(changes) > 1 else ""
    return Proposal(finding, f"call {call}() at the end of the loop at {where}{also}, so each iteration's "
                             "work runs as one graph", tuple(changes) + imports)


READS = frozenset({"item", "tolist", "cpu", "numpy"})  # calls that read a tensor's values on the host
_SCOPE_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _names_bound_in(scope: ast.AST) -> set[str]:
    """Names assigned anywhere in a function (or at a module's top level), its parameters too."""
    bound: set[str] = set()
    if isinstance(scope, _SCOPE_BINDERS):
        arguments = scope.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                    *filter(None, [arguments.vararg, arguments.kwarg])]:
            bound.add(arg.arg)
    todo = list(scope.body) if isinstance(scope.body, list) else [scope.body]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        if isinstance(node, (*SCOPES, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            continue  # their own names are theirs
        todo.extend(ast.iter_child_nodes(node))
    return bound


def _free_names(expression: ast.expr) -> list[str]:
    """Names the expression reads, in order, without those its comprehensions bind."""
    inner = {n.id for n in ast.walk(expression) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    seen = [n.id for n in ast.walk(expression) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [name for name in dict.fromkeys(seen) if name not in inner]


def _step_closure(finding: Finding, context: Context) -> Proposal:
    closure_call = CLOSURE_CALLS.get(context.run.info.names.get("step_closure", ""))
    frame = finding.frame
    source = context.source(frame.file) if frame else None
    if closure_call is None or source is None or frame is None:
        return Proposal(finding, finding.fix)
    chain = _chain(source.tree, frame.line)
    statement = chain[-1] if chain else None
    loops = _enclosing_loops(source, frame.line)
    if not loops or not isinstance(statement, ast.Expr) or not isinstance(statement.value, ast.Call) \
            or not _alone_on_its_lines(source, statement):
        return Proposal(finding, f"{finding.fix} (the read at {frame.site.rpartition('/')[2]} is not a call "
                                 "statement of its own: move it by hand)")
    computed = [call for call in ast.walk(statement.value) if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute) and call.func.attr in READS
                and not isinstance(call.func.value, (ast.Name, ast.Attribute))]
    if computed:
        # In a closure, x.sum().item() would run x.sum() as a graph of its own: no saving.
        read = ast.get_source_segment(source.text, computed[0].func.value) or "the value"
        return Proposal(finding, f"compute {read} in the step (assign it to a name before "
                                 f"{context.run.info.names.get('mark_step', 'mark_step()')}), then read that name in "
                                 f"{context.run.info.names.get('step_closure', 'a step closure')}: a closure that "
                                 "computes on the device runs a graph of its own")
    scope = next((node for node in reversed(chain) if isinstance(node, SCOPES)), source.tree)
    # Bound as the closure's arguments: it runs at the step's end, after the loop body
    # may have rebound them.
    names = [n for n in _free_names(statement.value) if n in _names_bound_in(scope)]
    call, imports = _call_name(source, *closure_call)
    expression = ast.get_source_segment(source.text, statement.value) or ""
    if names:
        listed = ", ".join(names)
        moved = f"{call}(lambda {listed}: {expression}, args=({listed}{',' if len(names) == 1 else ''}))"
    else:
        moved = f"{call}(lambda: {expression})"
    head = source.line(statement.lineno)[: statement.col_offset]
    tail = source.line(statement.end_lineno or statement.lineno)[statement.end_col_offset or 0:]
    text = head + moved + tail
    change = Change(source.path, statement.lineno, (statement.end_lineno or statement.lineno) + 1,
                    tuple(text.splitlines(keepends=True)))
    return Proposal(finding, f"move the read at {source.name}:{statement.lineno} into a step closure "
                             f"({call}): it prints the same values after the step, without an extra execution",
                    (change, *imports))


_LEADING = re.compile(r"\[(\d+)")  # the first dimension of a shape such as Float[16,32]


def _short_batch(finding: Finding, context: Context) -> bool:
    """The recompile is a smaller first dimension: the last, short batch of a loader."""
    recompile = context.run.recompile_at(finding.executions[0]) if finding.executions else None
    if recompile is None or not shape_change(recompile):
        return False
    inputs = [c for c in recompile.diff.origins if c.kind == "input_shape"]
    if not inputs:
        return False  # a size made on the device: no loader's batch
    for change in inputs:
        before, after = _LEADING.search(change.before), _LEADING.search(change.after)
        if not before or not after or int(after.group(1)) >= int(before.group(1)):
            return False
    return True


def _is_loader(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "DataLoader") or \
        (isinstance(func, ast.Attribute) and func.attr == "DataLoader")


def _loader_calls(source: Source) -> list[tuple[ast.Call, str | None]]:
    """DataLoader(...) calls and the name each is assigned to (None: not assigned)."""
    assigned: dict[int, str | None] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = node.targets[0]
            assigned[id(node.value)] = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
    return [(node, assigned.get(id(node))) for node in ast.walk(source.tree)
            if isinstance(node, ast.Call) and _is_loader(node.func)]


def _loop_reads(loop: ast.AST) -> set[str]:
    iterated = getattr(loop, "iter", None)
    if iterated is None:
        return set()
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(iterated)
            if isinstance(n, (ast.Name, ast.Attribute))}


def _arguments_for(caller: Source, call_line: int, callee: Source, callee_line: int, parameters: set[str]) -> set[str]:
    """The names the caller's call at `call_line` passes for the callee's `parameters`."""
    chain = _chain(callee.tree, callee_line)
    function = next((n for n in reversed(chain) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    statement = _chain(caller.tree, call_line)
    if function is None or not statement:
        return set()
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    names = set()
    for call in ast.walk(statement[-1]):
        if not isinstance(call, ast.Call):
            continue
        called = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        if called != function.name:
            continue
        shift = 1 if isinstance(call.func, ast.Attribute) and positional[:1] in (["self"], ["cls"]) else 0
        for parameter in parameters:
            argument = next((k.value for k in call.keywords if k.arg == parameter), None)
            if argument is None and parameter in positional:
                index = positional.index(parameter) - shift
                argument = call.args[index] if 0 <= index < len(call.args) else None
            if isinstance(argument, ast.Name):
                names.add(argument.id)
            elif isinstance(argument, ast.Attribute):
                names.add(argument.attr)
    return names


def _drop_last(finding: Finding, context: Context) -> Proposal:
    if not _short_batch(finding, context):
        return Proposal(finding, finding.fix)
    stack = context.stack(finding)
    read_by_loops: set[str] = set()
    wanted: set[str] = set()  # names the inner frames' loops read, as their callers name them
    for depth in range(len(stack) - 1, -1, -1):
        frame = stack[depth]
        source = context.source(frame.file)
        if source is None:
            break
        for loop in _enclosing_loops(source, frame.line):
            wanted |= _loop_reads(loop)
        read_by_loops |= wanted
        if depth:  # a loader passed in: the caller's argument for that parameter names it
            caller = stack[depth - 1]
            caller_source = context.source(caller.file)
            wanted = _arguments_for(caller_source, caller.line, source, frame.line, wanted) if caller_source else set()
    loaders = []
    for file in dict.fromkeys([*(f.file for f in stack), *context.run.info.sources]):
        source = context.source(file)
        for call, name in _loader_calls(source) if source else []:
            keyword = next((k for k in call.keywords if k.arg == "drop_last"), None)
            if keyword is not None and isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
                continue
            loaders.append((source, call, name, keyword))
    read = [loader for loader in loaders if loader[2] in read_by_loops]
    chosen = read if read else loaders
    if len(chosen) != 1:
        why = "no DataLoader in the files it ran" if not chosen else "several DataLoaders: pick the training one"
        return Proposal(finding, f"the last batch is smaller: drop_last=True on the DataLoader, or pad it ({why})")
    source, call, _, keyword = chosen[0]
    if keyword is not None:  # drop_last=False or a variable: set it
        line, start, end = keyword.value.lineno, keyword.value.col_offset, keyword.value.end_col_offset or 0
        if keyword.value.end_lineno != line:
            return Proposal(finding, "the last batch is smaller: set drop_last=True on the DataLoader")
        text = source.line(line)
        new = text[:start] + "True" + text[end:]
    else:
        arguments = [*call.args, *call.keywords]
        if arguments:
            last = arguments[-1]
            line, column, insert = last.end_lineno or last.lineno, last.end_col_offset or 0, ", drop_last=True"
        else:
            line, column, insert = call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1, "drop_last=True"
        text = source.line(line)
        new = text[:column] + insert + text[column:]
    return Proposal(finding, f"drop_last=True on the DataLoader at {source.name}:{call.lineno}: every batch then "
                             "has one shape (the last, short one is skipped)",
                    (Change(source.path, line, line + 1, (new,)),),
                    alters_results="drop_last=True skips each epoch's last, short batch: the model trains on fewer "
                                   "samples, so later losses differ")


_SHAPE = re.compile(r"\[([\d,]+)\]")


def padded_lengths(changes: Sequence[str]) -> list[int]:
    """The lengths a per-batch padding produced, from a shape change's history ("%25
    Long[4,24] -> Long[4,30]"): the sizes of the one dimension, not the first (the batch),
    that differs between the two shapes of a change."""
    lengths: set[int] = set()
    for change in changes:
        shapes = [[int(d) for d in m.group(1).split(",")] for m in _SHAPE.finditer(change)]
        if len(shapes) != 2 or len(shapes[0]) != len(shapes[1]):
            continue
        differ = [d for d, (a, b) in enumerate(zip(*shapes)) if a != b]
        if len(differ) == 1 and differ[0] > 0:
            lengths.update({shapes[0][differ[0]], shapes[1][differ[0]]})
    return sorted(lengths)


def padding_multiple(lengths: Sequence[int]) -> tuple[int, int, float]:
    """(pad_to_multiple_of, the shapes it leaves of the lengths seen, the padding it adds
    over them as a share of their tokens): the smallest power of two from 8 that puts
    every length seen in one shape; a longer batch later gets the next multiple."""
    multiple = 8
    while multiple < max(lengths):
        multiple *= 2
    padded = [-(-length // multiple) * multiple for length in lengths]
    return multiple, len(set(padded)), (sum(padded) - sum(lengths)) / sum(lengths)


def _padding_calls(source: Source) -> list[ast.Call]:
    """Calls that pad each batch to its own longest: DataCollatorWithPadding (padding=True
    by default) and any call given padding=True or "longest" (a tokenizer's __call__,
    tokenizer.pad), without a pad_to_multiple_of already."""
    found = []
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call) or any(k.arg == "pad_to_multiple_of" for k in node.keywords):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        padding = next((k.value for k in node.keywords if k.arg == "padding"), None)
        # `is True`: Conv2d(..., padding=1) pads by one, and 1 == True.
        per_batch = isinstance(padding, ast.Constant) and (padding.value is True or padding.value == "longest")
        if per_batch or (name == "DataCollatorWithPadding" and padding is None):
            found.append(node)
    return found


def _pad_to_multiple(finding: Finding, context: Context) -> Proposal:
    """Each batch padded to its own longest: a new sequence length is a new graph. The
    padding call given pad_to_multiple_of, the multiple chosen from the lengths the
    trace saw: one shape for all of them."""
    history = [change for entry in finding.details.get("history", []) for change in entry.get("changes", [])]
    lengths = padded_lengths(history)
    if len(lengths) < 2:
        return Proposal(finding, finding.fix)
    calls = [(source, call) for file in dict.fromkeys([*(f.file for f in context.stack(finding)),
                                                       *context.run.info.sources])
             if (source := context.source(file)) is not None for call in _padding_calls(source)]
    if not calls:  # a collate function of the user's, pad_sequence: in words
        return Proposal(finding, finding.fix)
    if len(calls) > 1:
        return Proposal(finding, f"{finding.fix} ({len(calls)} calls pad per batch: give the one the training "
                                 "batches come from pad_to_multiple_of)")
    source, call = calls[0]
    multiple, shapes, cost = padding_multiple(lengths)
    arguments = [*call.args, *call.keywords]
    if arguments:
        last = arguments[-1]
        line, column, insert = last.end_lineno or last.lineno, last.end_col_offset or 0, \
            f", pad_to_multiple_of={multiple}"
    else:
        line, column, insert = call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1, \
            f"pad_to_multiple_of={multiple}"
    text = source.line(line)
    shown = f"{len(lengths)} lengths seen ({lengths[0]} to {lengths[-1]})"
    return Proposal(finding, f"pad_to_multiple_of={multiple} on the padding at {source.name}:{call.lineno}: the "
                             f"{shown} become {shapes} shape{'s' * (shapes != 1)}, so one graph serves them, for "
                             f"{cost:.0%} more tokens over those lengths",
                    (Change(source.path, line, line + 1, (text[:column] + insert + text[column:],)),),
                    # Measured on tests/programs/bert_classifier.py without dropout: SGD's loss the
                    # same to the last digit, AdamW's 0.6962 -> 0.6950 after 12 steps.
                    alters_results="the padding is masked, but sums run over more elements (float rounding, which "
                                   "Adam's update magnifies) and dropout draws a number for every padded token too: "
                                   "losses differ a little")


# torch.nn.utils.clip_grad_norm_'s 2-norm from ops that lower on the lazy device: the
# same arithmetic (the norm of all gradients, scaled by max_norm / (norm + 1e-6) clamped
# to 1), without linalg_vector_norm, which falls back once per parameter on TorchScript.
LOWERED_CLIP = """\


def clip_grad_norm_lowered(parameters, max_norm):
    \"\"\"torch.nn.utils.clip_grad_norm_ (the 2-norm) from ops that lower on the lazy device:
    torch's takes each gradient's norm with linalg_vector_norm, which falls back there.\"\"\"
    tensors = [parameters] if isinstance(parameters, {torch}.Tensor) else parameters
    grads = [p.grad for p in tensors if p.grad is not None]
    if not grads:
        return {torch}.tensor(0.0)
    total = {torch}.stack([g.detach().float().pow(2).sum() for g in grads]).sum().sqrt()
    scale = {torch}.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.detach().mul_(scale.to(g.dtype))
    return total
"""
LOWERED_CLIP_NAME = "clip_grad_norm_lowered"


def _clip_call(call: ast.Call) -> bool:
    """clip_grad_norm_(parameters, max_norm) with the 2-norm and nothing the lowered one
    leaves out (error_if_nonfinite=True raises on a NaN norm: it reads the norm on the host)."""
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    if name != "clip_grad_norm_" or len(call.args) > 2 or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    keywords = {k.arg: k.value for k in call.keywords}
    if None in keywords or len(call.args) + sum(k in keywords for k in ("parameters", "max_norm")) != 2:
        return False
    norm = keywords.get("norm_type", call.args[2] if len(call.args) > 2 else None)
    if norm is not None and not (isinstance(norm, ast.Constant) and norm.value in (2, 2.0)):
        return False
    error = keywords.get("error_if_nonfinite")
    if error is not None and not (isinstance(error, ast.Constant) and error.value is False):
        return False
    return set(keywords) <= {"parameters", "max_norm", "norm_type", "error_if_nonfinite", "foreach"}


def _lowered_clip(finding: Finding, context: Context) -> Proposal:
    """clip_grad_norm_ falls back once per parameter (its linalg_vector_norm): the same
    clipping from ops that lower, as a function put once in the user's file, called instead."""
    frame = finding.frame
    source = context.source(frame.file) if frame is not None else None
    if source is None or frame is None:
        return Proposal(finding, finding.fix)
    calls = [node for node in ast.walk(source.tree) if isinstance(node, ast.Call)
             and node.lineno <= frame.line <= (node.end_lineno or node.lineno)
             and (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")) == "clip_grad_norm_"]
    if len(calls) != 1 or not _clip_call(calls[0]) or calls[0].func.end_lineno != calls[0].func.lineno:
        return Proposal(finding, f"{finding.fix} (the call at {source.name}:{frame.line} is not one the lowered "
                                 "function can stand for: another norm, or error_if_nonfinite)")
    call = calls[0]
    line = call.func.lineno
    text = source.line(line)
    changes = [Change(source.path, line, line + 1,
                      (text[:call.func.col_offset] + LOWERED_CLIP_NAME + text[call.func.end_col_offset or 0:],))]
    defined = any(isinstance(node, ast.FunctionDef) and node.name == LOWERED_CLIP_NAME for node in source.tree.body)
    if not defined:
        torch, imports = _call_name(source, "torch.stack", "torch")
        prefix = torch.rpartition(".")[0]
        body = LOWERED_CLIP.format(torch=prefix).replace("\n", source.newline())
        top = [node for node in source.tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        after = (top[-1].end_lineno or top[-1].lineno) if top else 0
        changes += [*imports, Change(source.path, after + 1, after + 1, tuple(body.splitlines(keepends=True)))]
    return Proposal(finding, f"clip_grad_norm_ at {source.name}:{line} as {LOWERED_CLIP_NAME}, the same clipping "
                             "(the 2-norm of all gradients, scaled by max_norm / (norm + 1e-6) up to 1) from ops "
                             "that lower, defined once in the file: no fallback, no sync per parameter",
                    tuple(changes))


def _bare(element: ast.expr) -> bool:
    """`:` alone: the whole of a dimension."""
    return isinstance(element, ast.Slice) and element.lower is None and element.upper is None and element.step is None


def _python_bound_slice(subscript: ast.Subscript) -> tuple[int, ast.Slice] | None:
    """(dimension, slice) of `x[a:b]` or `x[:, a:b]`: one slice whose bounds are Python
    expressions (a constant pair never changes), every other index `:`, the sliced value
    a name (read twice by the edit, so never a call)."""
    if not isinstance(subscript.ctx, ast.Load) or not isinstance(subscript.value, (ast.Name, ast.Attribute)):
        return None
    elements = subscript.slice.elts if isinstance(subscript.slice, ast.Tuple) else [subscript.slice]
    bounded = [(dim, e) for dim, e in enumerate(elements) if not _bare(e)]
    if len(bounded) != 1:
        return None
    dim, element = bounded[0]
    if not isinstance(element, ast.Slice) or element.step is not None or element.upper is None:
        return None
    if all(bound is None or isinstance(bound, ast.Constant) for bound in (element.lower, element.upper)):
        return None
    return dim, element


def _pure(expression: ast.expr) -> bool:
    """A value the edit may read twice: a name, its attributes, a constant index of one."""
    while isinstance(expression, (ast.Attribute, ast.Subscript)):
        if isinstance(expression, ast.Subscript) and not isinstance(expression.slice, ast.Constant):
            return False
        expression = expression.value
    return isinstance(expression, ast.Name)


def _python_index(subscript: ast.Subscript) -> tuple[list[ast.expr], int, ast.expr] | None:
    """(the constant indices before it, its dimension after them, the index) of `x[i]`,
    `x[:, t]`, `x[0, t - 1]`: one index that is a Python expression (not a constant, a
    slice or a tensor-looking call), `:` or constant integers before it, only `:` after;
    the value one the edit may read twice. A store (`x[i] = ...`) is never rewritten: the
    edit's index_select copies, and the write would go to the copy."""
    if not isinstance(subscript.ctx, ast.Load) or not _pure(subscript.value):
        return None
    elements = subscript.slice.elts if isinstance(subscript.slice, ast.Tuple) else [subscript.slice]
    variable = [n for n, e in enumerate(elements) if not _bare(e) and not isinstance(e, (ast.Constant, ast.Slice))]
    if len(variable) != 1:
        return None
    at = variable[0]
    index = elements[at]
    if isinstance(index, (ast.Starred, ast.List, ast.Tuple, ast.Compare, ast.BoolOp)) or (
            isinstance(index, ast.Call) and not (isinstance(index.func, ast.Name) and index.func.id in ("int", "len"))):
        return None  # a mask, a list of indices or a tensor made by a call: not one Python number
    before, after = elements[:at], elements[at + 1:]
    if not all(_bare(e) or (isinstance(e, ast.Constant) and type(e.value) is int) for e in before) \
            or not all(_bare(e) for e in after):
        return None
    constants = [e for e in before if isinstance(e, ast.Constant)]
    if constants and any(_bare(e) for e in before[:before.index(constants[-1])]):
        return None  # `x[:, 0, t]`: keep to the forms whose constants come first
    return constants, sum(1 for e in before if _bare(e)), index


def _negative_possible(index: ast.expr) -> bool:
    """Could this Python index be negative (Python counts it from the end; index_select
    refuses it)? Where it subtracts or negates, the edit wraps it as Python would."""
    return any(isinstance(node, (ast.Sub, ast.USub)) for node in ast.walk(index))


def indices_as_data(module: str, line: str, indexed: list[tuple[ast.Subscript, tuple[list[ast.expr], int, ast.expr]]],
                    tensor: str = "torch.tensor") -> str:
    """The line with each Python-number index (_python_index's) made an index_select of a
    one-element index tensor made on the CPU, squeezed back to the indexed shape."""
    for node, (constants, dim, index) in sorted(indexed, key=lambda pair: -pair[0].col_offset):  # right to left
        value = ast.get_source_segment(module, node.value)
        base = f"{value}[{', '.join(str(c.value) for c in constants)}]" if constants else value
        made = f"{tensor}([{ast.get_source_segment(module, index)}])"
        if _negative_possible(index):  # -1 is the last, as in Python
            made = f"({made} % {base}.size({dim}))"
        line = (line[:node.col_offset] + f"{base}.index_select({dim}, {made}.to({value}.device)).squeeze({dim})"
                + line[node.end_col_offset:])
    return line


def _index_select(finding: Finding, context: Context) -> Proposal:
    """A slice bound or an index that is a Python number bakes it into the graph: every new
    value compiles a new one. The slice (or the index) as an index_select of indices made
    on the CPU and moved to the device: they reach the graph as data, and every step runs
    one graph, with the same values and shapes out. Every line the changed values were
    built at is rewritten, or none."""
    recompile = context.run.recompile_at(finding.executions[0]) if finding.executions else None
    origins = recompile.diff.origins if recompile is not None and recompile.diff is not None else ()
    changed = [c for c in origins if c.kind == "attribute" and c.location]
    if not changed:
        return Proposal(finding, finding.fix)
    changes: list[Change] = []
    imports: dict[Change, None] = {}
    slices = indices = 0
    for where in dict.fromkeys(c.source_line for c in changed):
        name, _, number = where.rpartition(":")
        files = [f for f in dict.fromkeys([*(frame.file for frame in context.stack(finding)),
                                           *context.run.info.sources])
                 if os.path.basename(f) == name and context.source(f) is not None]
        if len(files) != 1 or not number.isdigit():
            return Proposal(finding, finding.fix)
        source, line = context.source(files[0]), int(number)
        assert source is not None
        subscripts = [node for node in ast.walk(source.tree) if isinstance(node, ast.Subscript)
                      and node.lineno == line == node.end_lineno]
        sliced = [(node, bound) for node in subscripts if (bound := _python_bound_slice(node)) is not None]
        inside = {id(inner) for node, _ in sliced for inner in ast.walk(node.value)}
        indexed = [(node, index) for node in subscripts if (index := _python_index(node)) is not None
                   and id(node) not in inside]
        nested = {id(inner) for node, _ in indexed for inner in ast.walk(node.value)}
        indexed = [(node, index) for node, index in indexed if id(node) not in nested]
        # Each rewritten index must be one the graph saw change: a line that also indexes a
        # list with a Python number (`names[i]`) has more candidates than changed values.
        # (TorchScript selects the index, XLA slices one element: aten::select_copy, xla::generic_slice.)
        selects = sum(1 for c in changed if c.source_line == where and ("select" in c.op or "slice" in c.op))
        if not sliced and not indexed:
            return Proposal(finding, f"{finding.fix} (no slice or Python-number index of a tensor at {where} to "
                                     "rewrite)")
        if indexed and len(sliced) + len(indexed) > max(selects, 1):
            return Proposal(finding, f"{finding.fix} ({len(sliced) + len(indexed)} slices and indices at {where} "
                                     f"but {selects} changing in the graph: which are tensors is not sure)")
        text = source.line(line)
        if sliced:
            arange, made = _call_name(source, "torch.arange", "torch")
            imports.update(dict.fromkeys(made))
            for node, (dim, element) in sorted(sliced, key=lambda pair: -pair[0].col_offset):  # right to left
                value = ast.get_source_segment(source.text, node.value)
                lower = ast.get_source_segment(source.text, element.lower) if element.lower is not None else "0"
                upper = ast.get_source_segment(source.text, element.upper)
                text = (text[:node.col_offset]
                        + f"{value}.index_select({dim}, {arange}({lower}, {upper}).to({value}.device))"
                        + text[node.end_col_offset:])
        if indexed:
            tensor, made = _call_name(source, "torch.tensor", "torch")
            imports.update(dict.fromkeys(made))
            text = indices_as_data(source.text, text, indexed, tensor)
        slices, indices = slices + len(sliced), indices + len(indexed)
        changes.append(Change(source.path, line, line + 1, (text,)))
    places = " and ".join(f"{os.path.basename(c.file)}:{c.start}" for c in changes)
    if not indices:
        many, its = ("slice", "its") if slices == 1 else (f"{slices} slices", "their")
        return Proposal(finding, f"the {many} at {places} as index_select with indices made on the CPU: {its} "
                                 "bounds reach the device as data, not as constants in the graph, so one graph "
                                 "serves every step (index_select copies: where the code writes into the slice, "
                                 "edit by hand)", (*changes, *imports))
    what = " and ".join(part for part in (f"{slices} slice{'s' * (slices != 1)}" if slices else "",
                                          "the index" if indices == 1 and not slices else
                                          f"{indices} ind{'ices' if indices != 1 else 'ex'}") if part)
    return Proposal(finding, f"{what} at {places} as index_select with indices made on the CPU: they reach the "
                             "device as data, not as constants in the graph, so one graph serves every step, with "
                             "the same values and shapes out (where the code writes into the indexed tensor, edit "
                             "by hand)", (*changes, *imports))


def _proposal(finding: Finding, context: Context) -> Proposal:
    if finding.kind == "missing_mark_step":
        return _mark_step(finding, context)
    if finding.kind == "extra_sync" and finding.details.get("cause") in ("item", "print", "tolist"):
        return _step_closure(finding, context)
    if finding.kind == "fallback" and (finding.details.get("call") or "").endswith("clip_grad_norm_") \
            and finding.details.get("op") == "aten::linalg_vector_norm":
        return _lowered_clip(finding, context)
    if finding.kind == "dynamic_shape" and not _short_batch(finding, context):
        return _pad_to_multiple(finding, context)
    if finding.kind in ("recompile", "dynamic_shape") and "input_shape" in finding.details.get("changes", ()):
        return _drop_last(finding, context)
    if finding.kind == "recompile" and finding.details.get("changes") == ["attribute"]:
        return _index_select(finding, context)
    return Proposal(finding, finding.fix)


def propose(run: Run, read: Callable[[str], Source | None] = read_source) -> list[Proposal]:
    """A proposal for each finding, in the findings' order. An edit that another finding's
    edit already makes is not made twice; one that overlaps it becomes words."""
    context = Context(run, read)
    proposals: list[Proposal] = []
    taken: dict[Change, int] = {}  # change -> the proposal that makes it
    for finding in run.findings:
        proposal = context.unless_stale(_proposal(finding, context))
        if proposal.changes:
            new = [c for c in proposal.changes if c not in taken]
            main = proposal.changes[0]  # the edit itself (the rest: imports, the `continue`s)
            if main in taken:
                proposal = Proposal(finding, proposal.summary, (), same_as=taken[main])
            elif any(_overlap(c, t) for c in new for t in taken):
                proposal = Proposal(finding, f"{finding.fix} (the edit for an earlier finding changes the same lines)")
            else:
                taken.update(dict.fromkeys(new, len(proposals)))
                proposal = Proposal(finding, proposal.summary, tuple(new), proposal.alters_results)
        proposals.append(proposal)
    return proposals


def _overlap(a: Change, b: Change) -> bool:
    """Two changes that cannot both be made: replaced ranges that meet, or an insertion
    inside a replaced range."""
    if a.file != b.file or (a.start == a.end and b.start == b.end):
        return False
    if a.start == a.end:
        return b.start < a.start < b.end
    if b.start == b.end:
        return a.start < b.start < a.end
    return a.start < b.end and b.start < a.end


def apply_changes(texts: Mapping[str, str], changes: Sequence[Change]) -> dict[str, str]:
    """The files' new texts, every change applied (bottom first, so line numbers hold)."""
    patched: dict[str, str] = {}
    by_file: dict[str, list[Change]] = {}
    for change in changes:
        by_file.setdefault(change.file, []).append(change)
    for file, file_changes in by_file.items():
        lines = texts[file].splitlines(keepends=True)
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += "\n"
        # Inserts at one line keep their order: later first, since each goes in at start.
        ordered = sorted(enumerate(file_changes), key=lambda p: (p[1].start, p[1].end, p[0]), reverse=True)
        for _, change in ordered:
            lines[change.start - 1:change.end - 1] = list(change.lines)
        patched[file] = "".join(lines)
    return patched


def unified_diff(texts: Mapping[str, str], changes: Sequence[Change], relative_to: str = "") -> str:
    """The changes as one unified diff (a/ and b/ paths, relative to `relative_to` where
    the file is inside it), as `git apply` and `patch -p1` read it."""
    patched = apply_changes(texts, changes)
    parts = []
    for file in sorted(patched):
        name = os.path.relpath(file, relative_to) if relative_to else file
        if name.startswith(".."):
            name = file
        name = name.lstrip("/")
        parts.extend(difflib.unified_diff(texts[file].splitlines(keepends=True),
                                          patched[file].splitlines(keepends=True),
                                          f"a/{name}", f"b/{name}"))
    return "".join(parts)
