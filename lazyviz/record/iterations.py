"""A training loop's iterations where it has no steps: torch.optim's global post-step hook
counts optimizer steps and notes how many executions had run by each. A loop without
mark_step() is then still a loop: `lazyviz run --iterations N` can end it, `fix --try`
can bound both sides of a trial by it, and the analysis can see optimizer steps that no
sync separated (a graph that grows across iterations)."""
from __future__ import annotations

import threading
from array import array
from collections.abc import Callable
from typing import Any

MAX_MARKS = 4096  # executions before each of the first optimizer steps: enough to bound a trial


class IterationCounter:
    """Counts optimizer.step() calls of any torch optimizer while installed."""

    def __init__(self, executions: array, limit: int | None, on_limit: Callable[[int], None],
                 save: Callable[[dict[str, object]], None],
                 where: Callable[[], tuple[str, int, str] | None] = lambda: None) -> None:
        """executions: the tracer's [executions, steps] counts, read at each optimizer step.
        limit: end the script (on_limit(iterations) raises) once this many have run.
        save: hands the run fields to the trace, at the 1st, 2nd, 4th, 8th... optimizer
        step (a killed run keeps what it had) and at the end.
        where: the user's line that called the optimizer's step, asked at the first."""
        self._executions = executions
        self.limit = limit
        self._on_limit = on_limit
        self._save = save
        self.count = 0
        self.marks = array("q")  # executions recorded when each optimizer step returned
        self._where = where
        self.step_at: tuple[str, int, str] | None = None  # the user's line of the first optimizer step
        self._handle: Any = None

    def install(self) -> None:
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except ImportError:  # a torch without global optimizer hooks: no iterations known
            return
        self._handle = register_optimizer_step_post_hook(self._stepped)

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _stepped(self, optimizer: object, args: object, kwargs: object) -> None:
        self.count += 1
        if self.count == 1:
            # Where the loop is, though no sync may ever tell (a loop that never syncs).
            try:
                self.step_at = self._where()
            except Exception:  # never the script's problem
                self.step_at = None
        if len(self.marks) < MAX_MARKS:
            self.marks.append(self._executions[0])
        if self.count & (self.count - 1) == 0:  # a power of two: log2(steps) saves in all
            self._save(self.run_fields())
        if self.limit is not None and self.count >= self.limit and threading.current_thread() is threading.main_thread():
            self._on_limit(self.count)

    def run_fields(self) -> dict[str, object]:
        """What the trace keeps: the total and the first steps' marks."""
        if not self.count:
            return {}
        return {"optimizer_steps": self.count, "optimizer_marks": list(self.marks),
                "optimizer_step_at": list(self.step_at) if self.step_at else None}
