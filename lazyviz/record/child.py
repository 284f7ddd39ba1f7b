"""The traced process: `lazyviz run` starts `python -m lazyviz.record.child`, which installs
the tracer and runs the user's script as `__main__`, as `python script.py` would."""
from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import itertools
import os
import runpy
import signal
import sys
import time
import traceback
import types
import warnings

from lazyviz.backends import imports_a_framework
from lazyviz.errors import LazyvizError
from lazyviz.record.imports import top_level_imports
from lazyviz.record.raised_with import cpu_tensors
from lazyviz.record.recorder import Recorder
from lazyviz.record.stack_walk import LAZYVIZ_DIR
from lazyviz.record.tracer import RUNNER_FILES


def exit_status(exit: SystemExit) -> int:
    """What the shell sees when the interpreter exits with this SystemExit: an int is
    taken modulo 256 (sys.exit(256) exits 0, sys.exit(-1) 255, True 1); anything else
    is printed and exits 1."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return int(exit.code) & 0xFF
    print(exit.code, file=sys.stderr)
    return 1


def _print_user_traceback(error: BaseException) -> tuple[str, list[tuple[str, int, str]]]:
    """Print the traceback as `python script.py` would: without our runner's frames, and
    without the frames of lazyviz's wrappers around sync sites (PyTorch/XLA's are Python
    functions), in this exception and those chained to it. Returns its text and its
    frames (file, line, function), outermost first."""
    seen: set[int] = set()
    chained: BaseException | None = error
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = _without_lazyviz_frames(chained.__traceback__)
        chained = chained.__cause__ or chained.__context__
    tb = error.__traceback__
    text = "".join(traceback.format_exception(type(error), error, tb))
    sys.stderr.write(text)
    return text, [(frame.filename, frame.lineno or 0, frame.name) for frame in traceback.extract_tb(tb)]


def _without_lazyviz_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback chain without the runner's frames and lazyviz's own (tb_next is
    writable: the frames left are linked past the ones dropped)."""
    kept: list[types.TracebackType] = []
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if file not in RUNNER_FILES and not file.startswith(LAZYVIZ_DIR + os.sep):
            kept.append(tb)
        tb = tb.tb_next
    for this, following in itertools.pairwise(kept):
        this.tb_next = following
    if kept:
        kept[-1].tb_next = None
    return kept[0] if kept else None


def _imports_torch(target: str, module: bool) -> bool:
    """Does the script's own source import torch (at any depth of its file)?"""
    imported = top_level_imports(target, module)
    return imported is None or imports_a_framework(imported)  # cannot tell: say yes


def run_script(typed: str, args: list[str]) -> None:
    """Run a script file as `python typed args...` does: sys.argv[0] as typed, __file__
    absolute, sys.path[0] its folder, a fresh __main__ module. (runpy.run_path would
    put the absolute path in sys.argv[0].)"""
    script = os.path.abspath(typed)
    with open(script, "rb") as source:
        code = compile(source.read(), script, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __builtins__=builtins, __cached__=None, __package__=None,
                         __spec__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", script))
    sys.modules["__main__"] = main
    sys.argv = [typed, *args]
    sys.path[0] = os.path.dirname(script)
    exec(code, main.__dict__)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lazyviz.record.child")
    parser.add_argument("--trace", required=True)
    parser.add_argument("--capture", required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--module", action="store_true")
    parser.add_argument("--no-source-lines", dest="source_lines", action="store_false")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--iterations", type=int)
    parser.add_argument("target")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)

    started = time.perf_counter()
    # The same recorder the API hands out; the path was claimed by `lazyviz run`.
    recorder = Recorder.for_runner(options.trace, capture=options.capture, backend=options.backend,
                                   source_lines=options.source_lines, argv=[options.target, *options.args],
                                   module=options.module, started=started, step_limit=options.steps,
                                   iteration_limit=options.iterations)
    try:
        # Importing torch here may warn (e.g. "Failed to initialize NumPy"). Untraced,
        # the script sees that only if it imports torch itself: hold the warnings back
        # and show them then (at its start), so its stderr stays its own. The filters
        # stay the user's: under PYTHONWARNINGS=ignore nothing is recorded.
        with warnings.catch_warnings(record=True) as import_warnings:
            recorder.start()
    except LazyvizError as error:
        print(f"lazyviz: {error}", file=sys.stderr)
        return 2
    status, error_line, error_text, interrupted = 0, None, None, False
    error_frames: list[tuple[str, int, str]] = []
    cpu_at_raise: list[tuple[str, str, str]] = []
    if _imports_torch(options.target, options.module):
        for caught in import_warnings:
            warnings.showwarning(caught.message, caught.category, caught.filename, caught.lineno)
    try:
        if options.module:
            sys.argv = [options.target, *options.args]
            sys.path[0] = os.getcwd()
            runpy.run_module(options.target, run_name="__main__", alter_sys=True)
        else:
            run_script(options.target, options.args)
    except SystemExit as exit:
        status = exit_status(exit)
    except BaseException as error:
        error_line = f"{type(error).__name__}: {error}"
        error_text, error_frames = _print_user_traceback(error)
        cpu_at_raise = cpu_tensors(error)
        interrupted = isinstance(error, KeyboardInterrupt)
        status = 130 if interrupted else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        recorder.finish(status, error_line, error_text, error_frames, cpu_at_raise)
    if interrupted:  # die of SIGINT, as the interpreter does, so shells see it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
