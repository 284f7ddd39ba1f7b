"""A loop that runs inside one library call of the user's: transformers' decode loop in
generate(), a diffusers pipeline's denoising loop. Every sync of a growing graph comes
from the same user line through the same library functions: the innermost is where the
loop is, and where it is one lazyviz knows (HOOKS), the user cuts it through the
library's own per-iteration hook, not with a mark_step() in a loop of theirs (there is
none). Pure: from the recorded stacks alone."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lazyviz.trace.model import Frame, frame_owner

# Libraries' loops with a per-iteration hook a user can pass: the file under its package
# folder (a folder: any file in it) -> (the functions of its loops, None: any; the advice,
# with {mark_step} the backend's step call).
HOOKS: dict[str, tuple[frozenset[str] | None, str]] = {
    "transformers/generation/utils.py": (
        frozenset({"_sample", "_beam_search", "_assisted_decoding", "_dola_decoding", "_contrastive_search",
                   "_group_beam_search", "_constrained_beam_search"}),
        "generate() asks each stopping criterion once per new token: pass one that calls {mark_step} and stops "
        "nothing, stopping_criteria=StoppingCriteriaList([SyncEachToken()]), so each token runs its own small "
        "graph (lazyviz's edit writes it)"),
    "diffusers/pipelines/": (
        None,
        "the pipeline calls callback_on_step_end after each denoising step: pass one that calls {mark_step} and "
        "returns its callback_kwargs"),
}


# Library functions that call a function of the user's at each iteration of their own loop
# (file under its package folder -> (the function, the call the user made, the advice)): the
# step call goes at the end of that function of the user's, the only code of theirs inside.
CALLBACK_LOOPS: dict[str, tuple[str, str, str]] = {
    "torch/optim/lbfgs.py": (
        "step", "LBFGS.step",
        "LBFGS.step() calls your {callback}() at each of its iterations (up to max_iter) and never cuts the "
        "graph between them: call {mark_step} at the end of {callback}(), before it returns the loss"),
}
# Decorators' inner functions: never the call a user wrote.
_WRAPPERS = frozenset({"wrapper", "wrapped", "inner", "decorate_context", "decorated", "fn", "func"})


@dataclass(frozen=True)
class LibraryLoop:
    path: str  # the file under its package folder: "transformers/generation/utils.py"
    function: str  # the function whose loop it is: "_sample"
    line: int  # where in it the first sync came from
    call: str  # the library function the user's line called: "generate"
    hook: str  # how to cut it through the library's own hook ({mark_step} to fill); "" where none is known
    callback: str = ""  # the user's function it calls each iteration (LBFGS's closure), where it does so

    @property
    def known(self) -> bool:
        """A loop lazyviz knows (HOOKS), not only the library function the syncs share."""
        return bool(self.hook)

    def to_json(self) -> dict:
        return {"path": self.path, "function": self.function, "line": self.line, "call": self.call,
                "callback": self.callback}


def callback_loop(stacks: Sequence[Sequence[Frame]], packages: tuple[str, ...]) -> LibraryLoop | None:
    """Where every sync comes from one function of the user's that a library loop calls
    (CALLBACK_LOOPS: LBFGS.step() evaluating the closure): that loop, the function named.
    None where any stack does not go through it."""
    found: dict[tuple[str, str, str], int] = {}  # (path, function, callback) -> the first line in it
    for stack in stacks:
        looping = None
        for frame in stack:
            owner = _installed_path(frame.file)
            if owner in CALLBACK_LOOPS and frame.function == CALLBACK_LOOPS[owner][0]:
                looping = (owner, frame.function, frame.line)
            elif looping is not None and frame_owner(frame.file, packages) is None:
                found.setdefault((looping[0], looping[1], frame.function), looping[2])
                break
        else:
            return None
    if len(found) != 1:  # LBFGS calls the closure before its loop and in it: one callback all the same
        return None
    [((path, function, callback), line)] = found.items()
    _, call, advice = CALLBACK_LOOPS[path]
    return LibraryLoop(path, function, line, call, advice.replace("{callback}", callback), callback)


def _installed_path(file: str) -> str:
    """A file of an installed package (torch's too) under its package folder; "" for the user's."""
    return next((file.rpartition(where)[2] for where in ("/site-packages/", "/dist-packages/") if where in file), "")


def library_loop(stacks: Sequence[Sequence[Frame]], packages: tuple[str, ...]) -> LibraryLoop | None:
    """Where the syncs of these stacks (outermost first) all come from, when that is a
    library's: one user line, then the same library functions; the innermost of them is
    the loop's (known: its hook). None where the stacks leave the user's code at
    different lines (the user's own loop) or go through no library."""
    if not stacks:
        return None
    users: set[tuple[str, int]] = set()
    common: list[tuple[str, str]] | None = None
    first_inner: list[Frame] = []
    for stack in stacks:
        user, inner = None, []
        for frame in stack:
            owner = frame_owner(frame.file, packages)
            if owner is None:
                user, inner = frame, []
            elif owner:  # torch's plumbing between (no_grad's wrapper): skipped
                inner.append(frame)
        if user is None or not inner:
            return None
        users.add((user.file, user.line))
        keys = [(frame_owner(frame.file, packages) or "", frame.function) for frame in inner]
        common = keys if common is None else [key for key in common if key in keys]
        first_inner = first_inner or inner
    if len(users) != 1 or not common:
        return None
    # The innermost known loop among them, else the innermost function they share.
    known = [key for key in common if _hook(*key)]
    path, function = (known or common)[-1]
    frame = next(f for f in first_inner if f.function == function and frame_owner(f.file, packages) == path)
    # The call the user made: the outermost shared function that is not a decorator's wrapper.
    call = next((name for _, name in common if "wrap" not in name and not name.startswith(("<", "_"))
                 and name not in _WRAPPERS), common[0][1])
    return LibraryLoop(path, function, frame.line, call, _hook(path, function))


def _hook(path: str, function: str) -> str:
    for where, (functions, advice) in HOOKS.items():
        if (path == where or (where.endswith("/") and path.startswith(where))) and \
                (functions is None or function in functions):
            return advice
    return ""
