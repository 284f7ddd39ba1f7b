"""What the tracer puts in place of the backend's sync sites and launchers: wrappers that
name each sync's cause, count steps, end a bounded run (--steps, --iterations), note the
pieces a split left on the host, and hand a launched process its own trace. A part of
the Tracer with its own state: what it wrapped, the pieces and shardings it noted, the
steps each replica ended, where a bounded run stopped."""
from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, MutableSequence
from pathlib import Path
from typing import Any

from lazyviz.backends import CompiledGraph, LazyBackend, SyncCause, SyncSite, device_flag
from lazyviz.record.stack_walk import StackWalk
from lazyviz.trace.writer import TraceWriter

MAX_ANNOTATIONS = 4096  # distinct shardings asked for: FSDPv2 asks one per parameter
MAX_ERRORS = 20  # lazyviz's own errors kept for the end-of-run message; also the backend failures kept
# The backends' step calls that take no arguments, in the order the bound's pending work
# is run with one: torch_xla.sync() (xm.mark_step() also runs the step closures), then
# torch._lazy.mark_step(). Never xm.optimizer_step, which takes the optimizer.
PENDING_CALLS = ("sync", "mark_step")


class StepLimitReached(SystemExit):
    """How `lazyviz run --steps N` ends a script: a clean exit (status 0) after step N.
    Pickled back from a launched process (torch_xla.launch), it is rebuilt with its args."""

    def __init__(self, *_: object) -> None:
        super().__init__(0)


class _Process:
    """What is installed once per process and kept: the fork handler, and which tracer
    records now. Tracers come and go (lazyviz.trace runs several one after another);
    the backend's hook stays and reports to the current one."""

    current: Any = None  # the Tracer recording now
    fork_handler = False
    # Compiled graphs by the backend's key, kept by tracers that ask (lazyviz.trace): a
    # graph compiled during an earlier trace is a cache hit in a later one, and the later
    # trace must still hold its IR.
    graphs: dict[int, CompiledGraph] = {}

    @classmethod
    def after_fork_in_child(cls) -> None:
        if cls.current is not None:
            cls.current._after_fork()
            cls.current = None  # the child runs on untraced, and may start a trace of its own


class SyncWrappers:
    """The wrappers one tracer puts in place: install() wraps, remove() puts the originals
    back. owner: the tracer, whose wrappers pass calls on once another one records (a
    wrapper someone kept by wrapping it again). counts: the tracer's [executions, steps];
    errors and notes: its lists, appended to; on_raise: what a sync site that raised tells it."""

    def __init__(self, owner: object, backend: LazyBackend, writer: TraceWriter, counts: MutableSequence[int],
                 stacks: StackWalk, errors: list[str], notes: list[str], on_raise: Callable[[Exception], None],
                 step_limit: int | None = None, launched: Callable[[Callable], Callable] | None = None) -> None:
        self._owner = owner
        self.backend = backend
        self.writer = writer
        self._counts = counts
        self._stacks = stacks
        self.errors = errors
        self.notes = notes
        self._on_raise = on_raise
        self.step_limit = step_limit
        self._launched = launched
        self._sync = SyncCause()  # the backend's, from install()
        self._wrapped: list[tuple[object, str, Callable, Callable]] = []  # owner, name, original, wrapper
        self._lost_pieces: list[list] = []  # [call, file, line, function]: RunInfo.lost_pieces
        self._annotations: list[dict] = []  # RunInfo.annotations, each distinct one once
        self._annotations_seen: set[tuple] = set()
        self._step_calls = threading.local()  # .depth: step-ending calls in progress (xm.optimizer_step calls sync)
        # Where threads run one replica each of the same steps (a launched process, whose
        # function runs in a thread per device, backend.replicas of them): the steps each
        # thread has ended; the run's steps are the fewest.
        self._replica_steps: dict[int, int] | None = None
        # The backend's step call wrapped as the bound's own sync (cause "bound"): what a run
        # ended by --iterations had pending, run and recorded, as the script's next read would.
        self._run_pending: Callable[[], object] | None = None
        self.stopped_at_step: int | None = None  # the step after which step_limit ended the script
        self.stopped_at_iteration: int | None = None  # the optimizer step after which iteration_limit ended it

    def install_calls(self, sync: SyncCause) -> None:
        """The calls that are not syncs: a split's (pieces left on the host), a sharding's."""
        self._sync = sync
        if self.backend.after_launch:  # a thread per device, even with one device
            self._replica_steps = {}
        for owner, attribute in self.backend.piece_calls():
            self._put(owner, attribute, self._wrap_piece_call(getattr(owner, attribute), attribute))
        for owner, attribute in self.backend.annotation_calls():
            self._put(owner, attribute, self._wrap_annotation_call(getattr(owner, attribute)))

    def install_sync_sites(self) -> None:
        step_calls: dict[str, tuple[SyncSite, Callable]] = {}  # PENDING_CALLS found: the site and its original
        for site in self.backend.sync_sites():
            original = getattr(site.owner, site.attribute, None)
            if original is None:
                continue
            ends_step = site.cause == "mark_step" and not site.runs_closures
            if site.starts_processes:
                wrapper = self._wrap_launcher(original, site.label)
            elif site.polls_around:
                wrapper = self._wrap_poll_point(original)
            else:
                # The wrapper in Python; the backend's own, where it has one, runs the
                # common call without a frame (and may leave the rare ones to it).
                slow = self._wrap_closure_runner(original, site.closures_waiting) if site.runs_closures \
                    else self._wrap_sync_site(original, site, ends_step, isinstance(site.owner, type))
                wrapper = self.backend.wrap_sync_site(original, site, self._counts, ends_step, slow,
                                                      self._on_raise) or slow
            if ends_step and self.step_limit is not None:
                wrapper = self._wrap_step_limit(wrapper, self.step_limit)
            if ends_step and site.attribute in PENDING_CALLS:
                step_calls.setdefault(site.attribute, (site, original))
            self._put(site.owner, site.attribute, wrapper, original)
        found = next((step_calls[name] for name in PENDING_CALLS if name in step_calls), None)
        if found is not None:
            site, original = found
            bound = SyncSite(site.owner, site.attribute, "bound", "the work pending at lazyviz's bound")
            slow = self._wrap_sync_site(original, bound, False, False)
            self._run_pending = self.backend.wrap_sync_site(original, bound, self._counts, False, slow,
                                                            self._on_raise) or slow

    def _put(self, owner: object, attribute: str, wrapper: Callable, original: Callable | None = None) -> None:
        original = getattr(owner, attribute) if original is None else original
        setattr(owner, attribute, wrapper)
        self._wrapped.append((owner, attribute, original, wrapper))

    def remove(self) -> None:
        """The originals back, last wrapped first; not where someone wrapped ours again."""
        for owner, name, original, wrapper in reversed(self._wrapped):
            if getattr(owner, name, None) is wrapper:
                setattr(owner, name, original)
        self._wrapped.clear()

    def _wrap_piece_call(self, original: Callable, name: str) -> Callable:
        """A call that may hand back its pieces on the host (a split that fell back): the
        line that made them is noted, since the op that raises on one is elsewhere."""
        lost, device = self.backend.lost_piece, self.backend.device

        @functools.wraps(original)
        def piece_call(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            pieces = original(tensor, *args, **kwargs)
            try:
                if pieces and getattr(tensor, "device", None) is not None and tensor.device.type == device \
                        and lost(pieces[0]):
                    self._note_lost_pieces(name)
            except Exception as failure:  # lazyviz's own: counted, never the script's
                if len(self.errors) < MAX_ERRORS:
                    self.errors.append(f"{type(failure).__name__}: {failure}")
            return pieces

        return piece_call

    def _wrap_annotation_call(self, original: Callable) -> Callable:
        """A call that asks for a tensor's sharding: what it asked, and the user's line."""

        @functools.wraps(original)
        def annotation_call(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                self._note_annotation(args, kwargs)
            except Exception as failure:  # lazyviz's own: counted, never the script's
                if len(self.errors) < MAX_ERRORS:
                    self.errors.append(f"{type(failure).__name__}: {failure}")
            return result

        return annotation_call

    def _note_annotation(self, args: tuple, kwargs: dict) -> None:
        if len(self._annotations) >= MAX_ANNOTATIONS:
            return
        frame = sys._getframe(2)
        while frame is not None and not self._stacks.is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        described = self.backend.describe_annotation(args, kwargs)
        if frame is None or described is None:
            return
        key = (frame.f_code.co_filename, frame.f_lineno, repr(described))
        if key not in self._annotations_seen:  # a forward's annotation repeats every step
            self._annotations_seen.add(key)
            self._annotations.append({"frame": [frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name],
                                      **described})
            self.writer.set_run(annotations=self._annotations)

    def _note_lost_pieces(self, name: str) -> None:
        frame = sys._getframe(2)
        while frame is not None and not self._stacks.is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return
        where = [name, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name]
        if where in self._lost_pieces:
            return
        self._lost_pieces = [*self._lost_pieces[-15:], where]  # the latest few: a crash names the last
        self.writer.set_run(lost_pieces=self._lost_pieces)

    def _wrap_sync_site(self, original: Callable, site: SyncSite, ends_step: bool,
                        is_method: bool = False) -> Callable:
        """The sync-site wrapper in Python, for backends without their own (wrap_sync_site)."""
        wrappers, owner = self, self._owner
        cause, detail, mid_step = site.cause, site.label, site.mid_step
        poll = self.backend.poll if self.backend.polls else None
        device = self.backend.device
        flag = device_flag(site.owner, device) if is_method else None
        if flag is not None:
            def on_device(tensor: Any) -> bool:
                return getattr(tensor, flag, True)
        else:
            def on_device(tensor: Any) -> bool:
                return getattr(getattr(tensor, "device", None), "type", device) == device

        sync = self._sync
        counts = self._counts  # [executions, steps]: shared with the backend, read as it counts
        empty_sync_ends_step = self.backend.empty_sync_ends_step
        replicas = self._replica_steps
        syncing = self.backend.syncing
        on_raise = self._on_raise

        @functools.wraps(original)
        def sync_site(*args: object, **kwargs: object) -> object:
            # The outermost cause wins (print calls item); a stopped tracer's wrapper that
            # someone kept (wrapped again on top of it) only passes the call on.
            if sync.cause is not None or _Process.current is not owner:
                return original(*args, **kwargs)
            if poll is not None and is_method and not on_device(args[0]):
                # A CPU tensor's .item() (AdamW's step counts) syncs nothing: skip the polls.
                return original(*args, **kwargs)
            if poll is not None:  # executions from before this call are not its own
                poll()
            ends = ends_step
            if sync.in_closure:  # a step closure's read: not the step's sync
                sync.cause, sync.detail, ends = cause, f"{detail} in a step closure", False
            elif mid_step and (caller := sys._getframe(1).f_code.co_name) in mid_step:
                sync.cause, sync.detail, ends = "other", mid_step[caller], False
            else:
                sync.cause, sync.detail = cause, detail
            executions_before = counts[0]
            if not sync.in_closure:
                sync.closures_from = None
            thread = threading.get_ident()
            # The calling line only where threads run replicas (the backend matches reports to it).
            caller = sys._getframe(1) if replicas is not None else None
            syncing[thread] = (sync.cause, sync.detail, caller and (caller.f_code.co_filename, caller.f_lineno))
            try:
                result = original(*args, **kwargs)
                if poll is not None:
                    poll()
                # Only the step's own graph ends it, not one its closures ran.
                ran = (counts[0] if sync.closures_from is None else sync.closures_from) > executions_before
                if ends and (empty_sync_ends_step or ran):
                    if replicas is None:
                        counts[1] += 1
                    else:
                        wrappers._replica_step_ended(thread)
                return result
            except Exception as error:
                if poll is not None:  # a polling backend learns of a failed graph only here
                    on_raise(error)
                raise
            finally:
                sync.cause = None
                syncing.pop(thread, None)

        return sync_site

    def _wrap_step_limit(self, wrapper: Callable, limit: int) -> Callable:
        """End the script once `limit` steps have ended: SystemExit(0) from the outermost
        step-ending call of the main thread, after its step is recorded, so the script's
        own `finally` blocks and atexit handlers run as at any exit. In a launched process,
        from each device thread's own: the launcher hands the exit back to the script."""
        wrappers, owner, counts, calls = self, self._owner, self._counts, self._step_calls

        @functools.wraps(wrapper)
        def step_limit(*args: object, **kwargs: object) -> object:
            depth = getattr(calls, "depth", 0)
            calls.depth = depth + 1
            try:
                result = wrapper(*args, **kwargs)
            finally:
                calls.depth = depth
            if depth or _Process.current is not owner:
                return result
            replicas = wrappers._replica_steps
            if replicas is None:
                steps = counts[1] if threading.current_thread() is threading.main_thread() else 0
            else:  # each device thread ends its replica at the same step, so none waits for another
                steps = replicas.get(threading.get_ident(), 0)
            if steps >= limit:
                if wrappers.stopped_at_step is None:
                    wrappers.stopped_at_step = steps
                raise StepLimitReached()
            return result

        return step_limit

    def iteration_limit_reached(self, iterations: int) -> None:
        """`lazyviz run --iterations N`: out of the optimizer's step, after its update, as
        --steps ends a script out of mark_step()."""
        if _Process.current is self._owner:
            if self.stopped_at_iteration is None:
                self.stopped_at_iteration = iterations
                self.run_pending()
            raise StepLimitReached()

    def run_pending(self) -> None:
        """Run what the script has pending (a loop that reads every 10 iterations, stopped
        at 5, has run nothing yet): as the next read would, so a bounded run's counts hold
        the work its iterations did. Not the script's error if it fails: lazyviz's own."""
        if self._run_pending is None:
            return
        try:
            self._run_pending()
        except Exception as failure:  # the script stops here either way
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(f"running the work pending at the bound: {type(failure).__name__}: {failure}")

    def _wrap_launcher(self, original: Callable, label: str) -> Callable:
        """A call that starts processes to run a function (its first argument, or `fn`):
        they inherit the environment as untraced, and the function they get is the one
        `launched` makes of it, which records each process's own trace."""
        wrappers, owner = self, self._owner

        @functools.wraps(original)
        def launcher(*args: object, **kwargs: object) -> object:
            if _Process.current is not owner:
                return original(*args, **kwargs)
            folder = None
            if wrappers._launched is not None:
                if args:
                    args = (launched := wrappers._launched(args[0]), *args[1:])  # type: ignore[arg-type]
                    folder = getattr(launched, "folder", None)
                elif "fn" in kwargs:
                    kwargs["fn"] = launched = wrappers._launched(kwargs["fn"])  # type: ignore[arg-type]
                    folder = getattr(launched, "folder", None)
            executed = wrappers._counts[0]
            try:
                with wrappers.backend.children_untraced(label, args, kwargs):
                    return original(*args, **kwargs)
            finally:
                wrappers._note_launch(folder, ran_here=wrappers._counts[0] > executed)

        return launcher

    def _replica_step_ended(self, thread: int) -> None:
        """A step has ended when every replica has ended it."""
        steps = self._replica_steps
        assert steps is not None
        steps[thread] = steps.get(thread, 0) + 1
        if len(steps) >= self.backend.replicas:
            self._counts[1] = max(self._counts[1], min(steps.values()))

    def _note_launch(self, folder: str | None, ran_here: bool) -> None:
        """Where the graphs of a launcher's processes are: their own traces, or nowhere
        (they ran untraced, and said why). debug_single_process=True runs the function
        in this process, traced here: nothing to say."""
        if ran_here:
            return
        if folder is not None and any(Path(folder).glob("rank*.trace")):
            note = (f"torch_xla.launch ran the function in processes of its own, each traced in {folder} "
                    f"(rank<R>.trace): lazyviz report {folder}")
        else:
            note = ("torch_xla.launch ran the function in processes of its own, untraced (each said why on "
                    "stderr): their graphs are not in this trace")
        if note not in self.notes:
            self.notes.append(note)

    def _wrap_poll_point(self, original: Callable) -> Callable:
        """Poll before and after a call that may run graphs without a Python frame: what
        ran during it is reported while its caller's frame is on the stack."""
        wrappers, owner = self, self._owner
        poll = self.backend.poll

        @functools.wraps(original)
        def poll_point(*args: object, **kwargs: object) -> object:
            if _Process.current is not owner or not wrappers.backend.polls:
                return original(*args, **kwargs)
            poll()
            try:
                return original(*args, **kwargs)
            finally:
                poll()

        return poll_point

    def _wrap_closure_runner(self, original: Callable, waiting: Callable[[], bool] | None = None) -> Callable:
        """The step's closures run after its sync, inside the step-ending call: the step's
        executions are handed on first, then each sync inside a closure is its own.
        waiting: whether any closure waits; with none, the step's executions are handed
        on by the step-ending call's own poll, after this."""
        wrappers, owner = self, self._owner
        poll = self.backend.poll if self.backend.polls else None
        sync = self._sync

        @functools.wraps(original)
        def run_closures(*args: object, **kwargs: object) -> object:
            if _Process.current is not owner or sync.in_closure or (waiting is not None and not waiting()):
                return original(*args, **kwargs)
            if poll is not None:
                poll()
            outer = sync.cause, sync.detail
            sync.closures_from = wrappers._counts[0]
            sync.cause, sync.detail, sync.in_closure = None, None, True
            try:
                return original(*args, **kwargs)
            finally:
                if poll is not None:
                    poll()
                (sync.cause, sync.detail), sync.in_closure = outer, False

        return run_closures
