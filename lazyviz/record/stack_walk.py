"""The tracer's walk of the Python stack: which frames are the user's, the call of
theirs a sync came through, and the stack record kept per execution (full capture).
A part of the Tracer with its own state: the caches of frames and files it has seen."""
from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from lazyviz.backends import OTHER_FRAME, STOP_FRAME, USER_FRAME, Frame
from lazyviz.trace.model import frame_owner
from lazyviz.trace.schema import StackRecord

LAZYVIZ_DIR = str(Path(__file__).parents[1])  # the lazyviz package: its frames are never the user's
# The wrapper every sync site calls through (sync_wrappers.py): never a frame of the stack.
_SYNC_SITE_FILE = str(Path(__file__).with_name("sync_wrappers.py"))

# What a frame is to the stack walk.
_USER, _FRAMEWORK, _SKIP, _STOP = "user", "framework", "skip", "stop"


# Names of decorators' inner functions: never the call a user wrote.
_WRAPPER_NAMES = frozenset({"wrapper", "wrapped", "inner", "decorate_context", "decorated", "fn", "func"})


def _in_library(stack: list[Frame], packages: tuple[str, ...]) -> bool:
    """Did an installed package's code sync (the innermost frame that is not the
    framework's `packages` or lazyviz's), not the user's? The stack is innermost first."""
    for file, _, _ in stack:
        owner = frame_owner(file, packages)
        if owner != "":
            return owner is not None
    return False


class StackWalk:
    """Walks the stack of each sync. outer_files: files whose frames are below the traced
    code (the runner, a notebook's shell): walks stop there. file_label: how to name a
    code object's file (a notebook cell as "In [3]")."""

    def __init__(self, capture: str, outer_files: frozenset[str],
                 file_label: Callable[[str], str] | None = None) -> None:
        self.capture = capture
        self._stack_ids: dict[tuple, int] = {}
        self._user_file: dict[str, bool] = {}
        self._frame_entries: dict[tuple[int, int], tuple] = {}
        self._not_user = [LAZYVIZ_DIR, *_never_user_paths()]  # + the backend's (add_framework)
        self._outer_files = outer_files
        self._file_label = file_label
        self._packages: tuple[str, ...] = ("torch",)  # the framework's packages (add_framework)

    def add_framework(self, paths: list[str], packages: tuple[str, ...]) -> None:
        """The backend's own folders (torch, torch_xla) and top-level packages: never the
        user's frames."""
        self._not_user += paths
        self._packages = packages

    def user_files(self) -> list[str]:
        """The user's files whose code ran while recording (real files, not "<string>")."""
        return [file for file, is_user in self._user_file.items() if is_user and os.path.isabs(file)]

    def calling_stack(self, frame: FrameType | None,
                       backend_stack: list[Frame] | None) -> tuple[list[Frame], tuple | None]:
        """The stack that synced (ours from `frame`, or the backend's own), and what
        identifies its call: the next execution of one fallback comes from the same call."""
        if backend_stack is None:
            stack = self.stack(frame, to_user_frame=self.capture != "full")
            return stack, (id(frame), frame.f_lasti) if frame is not None else None
        stack = self.clean_stack(backend_stack)
        return stack, stack[0][:2] if stack else None

    def stack_record(self, stack: list[Frame]) -> tuple[int | None, StackRecord | None]:
        """With capture full, the stack's id, and its record when it is new. Light capture
        keeps only a stack that synced in a library's code (transformers' mask): the
        advice names the library's line, since the user's line has nothing to change."""
        if self.capture != "full" and not _in_library(stack, self._packages):
            return None, None
        stack_key = tuple(stack)
        stack_id = self._stack_ids.get(stack_key)
        if stack_id is not None:
            return stack_id, None
        stack_id = self._stack_ids[stack_key] = len(self._stack_ids) + 1
        return stack_id, StackRecord(stack_id, stack[::-1])

    def clean_stack(self, frames: list[Frame]) -> list[Frame]:
        """A backend's stack without lazyviz's frames and the runner below the script."""
        stack = []
        for frame in frames:
            file = frame[0]
            if file in self._outer_files:
                break
            if not file.startswith(LAZYVIZ_DIR):
                stack.append(frame)
        return stack

    def stack(self, frame: FrameType | None, to_user_frame: bool) -> list[tuple[str, int, str]]:
        """Innermost first, without lazyviz's wrappers and the runner below the script;
        with to_user_frame, only as far as the user frame."""
        stack = []
        entries = self._frame_entries
        outer_files, label = self._outer_files, self._file_label
        while frame is not None:
            # f_lineno walks the code's line table: cache it per (code, instruction).
            key = (id(frame.f_code), frame.f_lasti)
            cached = entries.get(key)
            if cached is None:
                code = frame.f_code
                if code.co_name == "sync_site" and code.co_filename == _SYNC_SITE_FILE:
                    kind = _SKIP
                elif code.co_filename in outer_files:
                    kind = _STOP
                else:
                    kind = _USER if self.is_user_file(code.co_filename) else _FRAMEWORK
                file = label(code.co_filename) if label is not None else code.co_filename
                # The code object rides along so its id cannot be reused while cached.
                cached = entries[key] = (kind, (file, frame.f_lineno, code.co_name), code)
            kind = cached[0]
            if kind is _STOP:
                break
            if kind is not _SKIP:
                stack.append(cached[1])
                if to_user_frame and kind is _USER:
                    break
            frame = frame.f_back
        return stack

    def user_call(self, frame: FrameType | None) -> str | None:
        """The call the user's line made that led here, as a person would name it: the
        innermost module's forward between the user frame and this execution
        ("GPT2Attention.forward", "MultiheadAttention.forward"), else the outermost public
        function ("clip_grad_norm_", "Adam.step"), by its qualified name. Decorators'
        inner functions (closures: "<locals>" in their name) are never it."""
        inner = []
        while frame is not None:
            code = frame.f_code
            if code.co_filename in self._outer_files:
                return None
            if self.is_user_file(code.co_filename):
                break
            inner.append(code)
            frame = frame.f_back
        else:
            return None
        named = [code for code in reversed(inner)  # outermost first
                 if not code.co_name.startswith(("_", "<")) and code.co_name not in _WRAPPER_NAMES
                 and "<locals>" not in code.co_qualname and not code.co_filename.startswith(LAZYVIZ_DIR)]
        forwards = [code for code in named if code.co_name == "forward"]
        if forwards:
            return forwards[-1].co_qualname
        return named[0].co_qualname if named else None

    def classify_code(self, filename: str, name: str) -> tuple[int, str]:
        """For the backend's source-line walk, once per code object: the same rules as
        the stack walk below."""
        label = self._file_label(filename) if self._file_label is not None else filename
        if filename in self._outer_files:
            return STOP_FRAME, label
        return (USER_FRAME if self.is_user_file(filename) else OTHER_FRAME), label

    def is_user_file(self, file: str) -> bool:
        is_user = self._user_file.get(file)
        if is_user is None:
            is_user = self._user_file[file] = not any(file.startswith(prefix) for prefix in self._not_user)
        return is_user

    def user_frame(self, stack: list[tuple[str, int, str]]) -> tuple[str, int, str] | None:
        return next((entry for entry in stack if self.is_user_file(entry[0])), None)


def _never_user_paths() -> list[str]:
    paths = sysconfig.get_paths()
    # "<eval_with_key>": the code torch.fx generates for a graph module (torch.compile's
    # graphs, run by its backends), torch's own, never the user's.
    return [p for p in {paths["stdlib"], paths["platstdlib"]} if p] + ["<frozen ", "<eval_with_key>"]
