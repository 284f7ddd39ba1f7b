"""What every edit of `lazyviz fix` is made with: a change to a file's lines, the proposal
for one finding, the user's source and its syntax tree (Python's `ast`, never patterns
over text), and the context a run gives (stacks, the lines that built graphs, which files
are the user's). Each kind of edit is a module of its own beside this one, registered in
proposals.py."""
from __future__ import annotations

import ast
import difflib
import hashlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lazyviz.analysis.findings import Finding
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
    # The code already has this finding's edit (an earlier round made it), and the finding
    # is still there: the diagnosis was wrong or the cause is elsewhere. Words, never the edit again.
    outlived: bool = False

    @property
    def mechanical(self) -> bool:
        return bool(self.changes) or self.same_as is not None

    def diff(self, relative_to: str = "") -> str:
        """This proposal's edit as a unified diff against the files as they are now."""
        try:
            texts = read_texts(change.file for change in self.changes)
        except (OSError, UnicodeDecodeError):
            return ""
        return unified_diff(texts, self.changes, relative_to)


class Source:
    """One of the user's files: its text, lines and syntax tree. In a later round of
    --until-clean it is the copy's, with the earlier rounds' edits: origin then maps its
    lines to the user's own, which is what the user reads (`at`)."""

    def __init__(self, path: str, text: str, origin: Callable[[int], int | None] | None = None) -> None:
        self.path = path
        self.text = text
        self.lines = split_lines(text)
        self.tree = ast.parse(text, filename=path)
        self.name = os.path.basename(path)
        self.origin = origin

    def at(self, number: int) -> str:
        """"main.py:258": the user's line, where the text is an edited copy of their file."""
        if self.origin is None:
            return f"{self.name}:{number}"
        mapped = self.origin(number)
        return f"{self.name}:{mapped}" if mapped is not None else f"{self.name}:{number} (a line an earlier round added)"

    def line(self, number: int) -> str:
        return self.lines[number - 1] if 0 < number <= len(self.lines) else ""

    def indent_of(self, number: int) -> str:
        text = self.line(number)
        return text[: len(text) - len(text.lstrip(" \t"))]

    def newline(self) -> str:
        return "\r\n" if self.lines and self.lines[0].endswith("\r\n") else "\n"


_LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """The text's lines with their endings, cut where Python's parser cuts them (\\n,
    \\r\\n, \\r). str.splitlines also cuts at a form feed, \\v, \\x1c-\\x1e and
    \\u2028, which real source files hold: every line number after one would be off."""
    lines, start = [], 0
    for end in _LINE_END.finditer(text):
        lines.append(text[start:end.end()])
        start = end.end()
    if start < len(text):
        lines.append(text[start:])
    return lines


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
def children(node: ast.AST) -> Iterator[ast.AST]:
    """The statements directly inside a statement (bodies, branches, handlers)."""
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        yield from getattr(node, name, ()) or ()


def path_to_line(tree: ast.Module, line: int) -> list[ast.AST]:
    """The statements that hold `line`, outermost first, down to the innermost one."""
    chain: list[ast.AST] = []
    node: ast.AST = tree
    while True:
        inner = next((c for c in children(node) if c.lineno <= line <= (c.end_lineno or c.lineno)), None)
        if inner is None:
            return chain
        chain.append(inner)
        node = inner


def enclosing_loops(source: Source, line: int) -> list[ast.For | ast.AsyncFor | ast.While]:
    """Loops whose body runs `line` each iteration, outermost first, within its function
    (a loop around a `def` does not run the function's lines)."""
    chain = path_to_line(source.tree, line)
    scope = max((i for i, node in enumerate(chain) if isinstance(node, SCOPES)), default=-1)
    loops = []
    for node in chain[scope + 1:]:
        if isinstance(node, LOOPS) and any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in node.body):
            loops.append(node)
    return loops


def static_caller(source: Source, line: int) -> Frame | None:
    """Where the function holding `line` is called in the same file: its one call, or its
    one call inside a loop (`self._run_batch(source, targets)` in `_run_epoch`'s loop);
    None where that cannot be told."""
    defined = [node for node in path_to_line(source.tree, line) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defined:
        return None
    name = defined[-1].name
    calls = [node for node in ast.walk(source.tree) if isinstance(node, ast.Call)
             and ((isinstance(node.func, ast.Name) and node.func.id == name)
                  or (isinstance(node.func, ast.Attribute) and node.func.attr == name))]
    in_loops = [call for call in calls if enclosing_loops(source, call.lineno)]
    chosen = calls if len(calls) == 1 else in_loops if len(in_loops) == 1 else []
    if not chosen:
        return None
    call = chosen[0]
    scope = [node for node in path_to_line(source.tree, call.lineno)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return Frame(source.path, call.lineno, scope[-1].name if scope else "<module>")


def all_loops(source: Source) -> list[ast.For | ast.AsyncFor | ast.While]:
    return [node for node in ast.walk(source.tree) if isinstance(node, LOOPS)]


def in_body(loop: ast.AST, line: int) -> bool:
    return any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in loop.body)


def own_statements(loop: ast.AST, kind: type) -> list[ast.AST]:
    """Statements of `kind` in the loop's body that belong to it, not to a nested loop or def."""
    found, todo = [], list(loop.body)
    while todo:
        node = todo.pop()
        if isinstance(node, kind):
            found.append(node)
        if not isinstance(node, (*LOOPS, *SCOPES)):
            todo.extend(children(node))
    return found


def alone_on_its_lines(source: Source, node: ast.stmt) -> bool:
    """Nothing but the statement (and a comment) on its lines: it can be replaced by lines."""
    before = source.line(node.lineno)[: node.col_offset]
    after = source.line(node.end_lineno or node.lineno)[node.end_col_offset or 0:].strip()
    return not before.strip() and (not after or after.startswith("#"))


# -- imports --------------------------------------------------------------------------
def bound_modules(source: Source) -> dict[str, str]:
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


def imported_anywhere(source: Source) -> set[str]:
    names = set()
    for node in source.tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def import_change(source: Source, statement: str) -> Change:
    """`statement` after the module's last top-level import (or at its top)."""
    imports = [node for node in source.tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    after = (imports[-1].end_lineno or imports[-1].lineno) if imports else 0
    return Change(source.path, after + 1, after + 1, (statement + source.newline(),))


def call_name(source: Source, dotted: str, module: str) -> tuple[str, tuple[Change, ...]]:
    """How the file names `dotted` (a module attribute, "torch._lazy.mark_step"), with the
    import to add when the file binds no name for `module`."""
    bound = bound_modules(source)
    attribute = dotted[len(module) + 1:]
    for name, bound_module in bound.items():
        if bound_module == module and name != module.split(".")[0]:  # import torch_xla.core.xla_model as xm
            return f"{name}.{attribute}", ()
    root = module.split(".")[0]
    loaded = any(m == module or m.startswith(module + ".") for m in imported_anywhere(source))
    if bound.get(root) == root and (loaded or module == root):
        return dotted, ()
    if module.endswith(".core.xla_model"):  # as the torch_xla family's users name it
        return f"xm.{attribute}", (import_change(source, f"import {module} as xm"),)
    return dotted, (import_change(source, f"import {module}"),)


def calls_named(source: Source, line: int, name: str) -> list[ast.Call]:
    """The calls of `name` (a function or a method: `f(...)`, `x.f(...)`, `torch.nn.f(...)`)
    whose span holds the line."""
    return [node for node in ast.walk(source.tree) if isinstance(node, ast.Call)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
            and (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")) == name]


def renamed_call(source: Source, call: ast.Call, name: str) -> Change:
    """The call's function (on one line) replaced by `name`, its arguments kept."""
    line, func = call.func.lineno, call.func
    text = source.line(line)
    return Change(source.path, line, line + 1, (text[:func.col_offset] + name + text[func.end_col_offset or 0:],))


def define_once(source: Source, name: str, text: str) -> tuple[Change, ...]:
    """A function or class `name` (its text, blank lines first) put once in the file, after
    its top-level imports; nothing when the file defines it already (a later round's edit)."""
    if any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name for node in source.tree.body):
        return ()
    top = [node for node in source.tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    after = (top[-1].end_lineno or top[-1].lineno) if top else 0
    body = text.replace("\n", source.newline())
    return (Change(source.path, after + 1, after + 1, tuple(split_lines(body))),)


def read_texts(files: Iterable[str]) -> dict[str, str]:
    """Each file's text, line endings kept; "" for one an edit makes (STAND_INS)."""
    return {file: Path(file).read_bytes().decode("utf-8") if os.path.exists(file) else "" for file in files}


# The file of its own beside the user's where a stand-in for a library class goes (the
# lowered Adam, the lowered LSTM): a reviewer takes it with its one import, or leaves it.
STAND_INS = "lazy_lowered.py"
STAND_INS_HEADER = """\
\"\"\"Stand-ins lazyviz wrote for library code that does not lower on the lazy device, each
the same computation from ops that do. Take one with its import where it is used, or
delete this file and that import to take none.\"\"\"
import torch
"""


def define_beside(source: Source, name: str, text: str) -> tuple[Change, ...]:
    """A class or function `name` (its text, blank lines first, naming the module `torch`)
    put in STAND_INS beside the user's file, made if need be, and imported there in one
    line (relatively from a package's module). Where a file of that name is the user's
    own, in the user's file as define_once puts it."""
    path = os.path.join(os.path.dirname(source.path), STAND_INS)
    module = STAND_INS.removesuffix(".py")
    existing = read_source(path) if os.path.exists(path) else None
    if os.path.exists(path) and (existing is None or not existing.text.startswith(STAND_INS_HEADER)):
        return define_once(source, name, text)  # not lazyviz's file: never written over
    package = os.path.exists(os.path.join(os.path.dirname(source.path), "__init__.py"))
    statement = f"from {'.' * package}{module} import {name}"
    imported = any(isinstance(node, ast.ImportFrom) and (node.module or "") == module
                   and any(alias.name == name for alias in node.names) for node in ast.walk(source.tree))
    changes = () if imported else (import_change(source, statement),)
    if existing is not None and any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name
                                    for node in existing.tree.body):
        return changes
    end = len(existing.lines) + 1 if existing is not None else 1
    header = () if existing is not None else (Change(path, 1, 1, tuple(split_lines(STAND_INS_HEADER))),)
    return (*changes, *header, Change(path, end, end, tuple(split_lines(text))))


# -- the program's own device ----------------------------------------------------------
# A call that names the backend's device wherever it runs: xm.xla_device(),
# torch_xla.device(), torch.device("lazy").
DEVICE_CALLS = frozenset({"xla_device", "device"})


def _device_uses(scope: ast.AST) -> list[ast.expr]:
    """The devices the scope's own lines move tensors to or make them on: X of `.to(X)`
    and of `device=X`, not those of a nested def (a forward's `tokens.device`)."""
    found, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop(0)
        if isinstance(node, SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(node))
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
            found.append(node.args[0])
        found += [k.value for k in node.keywords if k.arg == "device"]
    return [x for x in found if _names_a_device(x)]


def _names_a_device(node: ast.expr) -> bool:
    """A device, not a dtype or another tensor: a string, a device call, or a name whose
    last part says device (`device`, `args.device`, `self.device`, `DEVICE`)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Call):
        return getattr(node.func, "attr", getattr(node.func, "id", "")) in DEVICE_CALLS
    last = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "device" in last.lower() or last.lower() in ("dev", "accelerator")


def _only_the_backends(source: Source, node: ast.expr, device_type: str, seen: frozenset[str] = frozenset()) -> bool:
    """Is `node` the backend's device wherever the program runs: a literal of its type, a
    call that makes it, or a name every assignment of which is one (never an argument)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.split(":")[0] == device_type
    if isinstance(node, ast.Call):
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        if name == "xla_device" or (name == "device" and not node.args):  # torch_xla.device()
            return True
        return name == "device" and len(node.args) == 1 and _only_the_backends(source, node.args[0], device_type, seen)
    text = ast.unparse(node)
    if not isinstance(node, (ast.Name, ast.Attribute)) or text in seen:
        return False
    values: list[ast.expr | None] = []
    for other in ast.walk(source.tree):
        if isinstance(other, ast.Assign):
            values += [other.value for t in other.targets if ast.unparse(t) == text]
        elif isinstance(other, (ast.AnnAssign, ast.AugAssign)) and ast.unparse(other.target) == text:
            values.append(other.value)
        elif isinstance(other, ast.arg) and other.arg == text:
            values.append(None)  # a parameter: whatever the caller passes
        elif isinstance(other, (ast.For, ast.With, ast.NamedExpr)) and text in {
                ast.unparse(t) for t in ast.walk(getattr(other, "target", other)) if isinstance(t, ast.Name)}:
            values.append(None)
    return bool(values) and all(v is not None and _only_the_backends(source, v, device_type, seen | {text})
                                for v in values)


def program_device(source: Source, line: int) -> ast.expr | None:
    """The program's own device as the code at `line` can name it: what the innermost
    function around the line (else the module) moves its tensors to most often."""
    scopes = [n for n in path_to_line(source.tree, line) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in [*reversed(scopes), source.tree]:
        uses = _device_uses(scope)
        if uses:
            counts = Counter(ast.unparse(u) for u in uses)
            return next(u for u in uses if ast.unparse(u) == counts.most_common(1)[0][0])
    return None


def device_condition(source: Source, line: int, device_type: str) -> tuple[str, tuple[Change, ...]] | None:
    """The test that the program runs on the backend's device, for a call that exists only
    there (mark_step() raises where the backend is not set up, a step closure never runs on
    the CPU): `torch.device(args.device).type == "lazy"`, from the device the program
    already takes. None where it runs only on the backend's device (a constant, a
    `torch_xla.device()`), or names none lazyviz can read: then the call goes in as it is."""
    device = program_device(source, line)
    if device is None or _only_the_backends(source, device, device_type):
        return None
    make, imports = call_name(source, "torch.device", "torch")
    return f"{make}({ast.unparse(device)}).type == \"{device_type}\"", imports


def guarded_imports(imports: tuple[Change, ...]) -> tuple[tuple[Change, ...], list[str]]:
    """The imports a backend-only call needs, split: torch's own stay at the file's top
    (always importable), the backend's package goes inside the device test as statements
    (torch_xla is not installed where the program runs on a GPU)."""
    safe = tuple(c for c in imports if c.lines[0].strip() == "import torch" or c.lines[0].startswith("import torch."))
    return safe, [c.lines[0].strip() for c in imports if c not in safe]


def device_only(source: Source, line: int, device_type: str, indent: str, call: str,
                imports: tuple[Change, ...]) -> tuple[tuple[str, ...], tuple[Change, ...]]:
    """The lines of a backend-only statement `call` to put at `line` (with `indent`): under
    the program's own device test where it runs on others too, with its import inside the
    test where the file does not import that module at its top (torch_xla is not installed
    where the program runs on a GPU)."""
    newline = source.newline()
    condition = device_condition(source, line, device_type)
    if condition is None:
        return (f"{indent}{call}{newline}",), imports
    test, test_imports = condition
    inner = indent + " " * 4
    safe, inside = guarded_imports(imports)
    lines = [f"{indent}if {test}:{newline}", *(f"{inner}{statement}{newline}" for statement in inside)]
    lines.append(f"{inner}{call}{newline}")
    return tuple(lines), (*safe, *test_imports)


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
        lines: then words, saying so. The finding's own file too: what a proposal read at
        its line (a call to move, a loop to end) may be another statement now."""
        recorded = self.run.info.sources
        frame = proposal.finding.frame
        read = [frame.file] if frame is not None else []
        for file in dict.fromkeys([*(c.file for c in proposal.changes), *read]):
            if file in recorded and file_hash(file) != recorded[file]:
                return Proposal(proposal.finding, f"{proposal.finding.fix} ({os.path.basename(file)} changed since "
                                                  "the trace was recorded: run it again for an edit)", stale=file)
        return proposal

    def _users(self, path: str) -> bool:
        if not os.path.isabs(path) or INSTALLED.intersection(Path(path).parts):
            return False
        recorded = self.run.info.sources
        return path in recorded if recorded else True

    def raising_statement(self, finding: Finding) -> tuple[Source, ast.stmt, int] | None:
        """The statement at the finding's line (the one that raised), and the last line of
        its own (a compound statement's header, not its body); None where it is not readable."""
        frame = finding.frame
        source = self.source(frame.file) if frame is not None else None
        statements = path_to_line(source.tree, frame.line) if source is not None and frame is not None else []
        if source is None or not statements:
            return None
        statement = statements[-1]
        body = getattr(statement, "body", None)
        last = body[0].lineno - 1 if isinstance(body, list) and body else statement.end_lineno or statement.lineno
        return source, statement, last

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
            # No execution to give a stack (a loop that never synced, placed by its optimizer
            # step's line): the calls of that line's function in its file, up to a loop.
            source = self.source(finding.frame.file)
            while source is not None and len(frames) < 4 and not enclosing_loops(source, frames[0].line):
                caller = static_caller(source, frames[0].line)
                if caller is None:
                    break
                frames.insert(0, caller)
        return frames

    def built_at(self, finding: Finding) -> Counter[str]:
        """"file.py:12" -> nodes, over the largest graph the finding's executions ran; where
        they ran graphs of several sizes (one that grows at every sync), the nodes each line
        added from the smallest to the largest: the loop that grows it, not work pending
        from before that every one of them holds alike (an unstepped training step under
        the evaluation loop's growing graph)."""
        executions = [self.run.execution(e) for e in finding.executions[:200]]
        # At the finding's own site where it has one: a merged finding's other sites (a
        # training step's read) are other loops' graphs.
        here = [e for e in executions if finding.frame is not None and e.frame == finding.frame] or executions
        found = [f for f in (self.run.ir_texts.parsed(g) for g in {e.graph for e in here}) if f is not None]
        if not found:
            return Counter()
        largest, smallest = max(found, key=len), min(found, key=len)
        grown = largest.built_at - smallest.built_at
        # Growth smaller than one repeat of the block is not the loop that piled up: a sample
        # loop's token a read, each read running the whole unstepped training again.
        block = len(getattr(finding.details, "pattern", ()))
        if block and sum(grown.values()) < block:
            return largest.built_at
        return grown if len(largest) > len(smallest) and grown else largest.built_at

def loop_reads(loop: ast.AST) -> set[str]:
    iterated = getattr(loop, "iter", None)
    if iterated is None:
        return set()
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(iterated)
            if isinstance(n, (ast.Name, ast.Attribute))}


def overlap(a: Change, b: Change) -> bool:
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
    """The files' new texts, every change applied (bottom first, so line numbers hold). A
    file that ended without a newline still does: the diff shows only the lines changed."""
    patched: dict[str, str] = {}
    by_file: dict[str, list[Change]] = {}
    for change in changes:
        by_file.setdefault(change.file, []).append(change)
    for file, file_changes in by_file.items():
        lines = split_lines(texts.get(file, ""))
        unterminated = bool(lines) and not lines[-1].endswith(("\n", "\r"))
        if unterminated:  # an edit may insert after the last line
            lines[-1] += "\r\n" if lines[0].endswith("\r\n") else "\n"
        # Inserts at one line keep their order: later first, since each goes in at start.
        ordered = sorted(enumerate(file_changes), key=lambda p: (p[1].start, p[1].end, p[0]), reverse=True)
        for _, change in ordered:
            lines[change.start - 1:change.end - 1] = list(change.lines)
        text = "".join(lines)
        patched[file] = text.removesuffix("\r\n" if text.endswith("\r\n") else "\n") if unterminated else text
    return patched


def unified_diff(texts: Mapping[str, str], changes: Sequence[Change], relative_to: str = "") -> str:
    """The changes as one unified diff (see diff_texts)."""
    return diff_texts(texts, apply_changes(texts, changes), relative_to)


def diff_texts(originals: Mapping[str, str], patched: Mapping[str, str], relative_to: str = "") -> str:
    """The one diff lazyviz prints, of every file whose text changed: a/ and b/ paths
    relative to `relative_to` where the file is inside it, and what `git apply` and
    `patch -p1` need to apply it to the files as they are: "\\ No newline at end of
    file" after a last line without one, line endings kept (CRLF files), a name with a
    space ended by a tab, a name with a quote, backslash or control character quoted."""
    parts: list[str] = []
    for file in sorted(patched):
        old, new = split_lines(originals.get(file, "")), split_lines(patched[file])
        if old == new:
            continue
        name = os.path.relpath(file, relative_to) if relative_to else file
        if name.startswith(".."):
            name = file
        name = name.lstrip("/").replace(os.sep, "/")
        # A file an edit makes (STAND_INS): from /dev/null, as git and patch create files.
        made = not originals.get(file) and not os.path.exists(file)
        parts += [f"--- {'/dev/null' if made else _diff_path('a', name)}\n", f"+++ {_diff_path('b', name)}\n"]
        for group in difflib.SequenceMatcher(None, old, new, autojunk=False).get_grouped_opcodes(3):
            parts.append(f"@@ -{_hunk_range(group[0][1], group[-1][2])} +{_hunk_range(group[0][3], group[-1][4])} @@\n")
            for tag, old_start, old_end, new_start, new_end in group:
                if tag == "equal":
                    parts += (_diff_line(" ", line) for line in old[old_start:old_end])
                    continue
                parts += (_diff_line("-", line) for line in old[old_start:old_end])
                parts += (_diff_line("+", line) for line in new[new_start:new_end])
    return "".join(parts)


def _hunk_range(start: int, end: int) -> str:
    """A hunk side's "first,count" (0-based slice in): an empty side names the line before it."""
    count = end - start
    return str(start + 1) if count == 1 else f"{start + (count > 0)},{count}"


def _diff_line(mark: str, line: str) -> str:
    return mark + line if line.endswith("\n") else f"{mark}{line}\n\\ No newline at end of file\n"


def _diff_path(side: str, name: str) -> str:
    """How git and GNU diff write a path both tools read back."""
    path = f"{side}/{name}"
    if any(c in path for c in '"\\') or any(ord(c) < 32 or ord(c) == 127 for c in path):
        escapes = {'"': '\\"', "\\": "\\\\", "\t": "\\t", "\n": "\\n"}
        quoted = "".join(escapes.get(c, c) if c in escapes or ord(c) >= 32 else f"\\{ord(c):03o}" for c in path)
        return f'"{quoted}"'
    return path + "\t" if " " in path else path  # patch reads a name up to a tab (diff -u puts its date there)


def keyword_set(source: Source, call: ast.Call, name: str, value: str) -> Change | None:
    """The call given `name=value`: its value replaced where the call passes one (None
    where that value spans lines), else added after its last argument."""
    keyword = next((k for k in call.keywords if k.arg == name), None)
    if keyword is not None:
        old = keyword.value
        if old.end_lineno != old.lineno:
            return None
        line, start, end, insert = old.lineno, old.col_offset, old.end_col_offset or 0, value
    else:
        arguments = [*call.args, *call.keywords]
        if arguments:
            last = arguments[-1]
            line, start, insert = last.end_lineno or last.lineno, last.end_col_offset or 0, f", {name}={value}"
        else:  # inside the parentheses
            line, start, insert = call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1, f"{name}={value}"
        end = start
    text = source.line(line)
    return Change(source.path, line, line + 1, (text[:start] + insert + text[end:],))
