"""A library function that works on the host (torchvision's save_image and make_grid,
TensorBoard's SummaryWriter.add_*, matplotlib, PIL, wandb) handed a lazy tensor: whatever
it does inside (make_grid's copy of each image into the grid, a fallback per copy, a
graph per image index) is one cause at the user's call, and the user's fix is one word:
hand it `x.detach().cpu()`. The findings those executions made on their own are that
finding's, not separate ones."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from lazyviz.analysis.kinds import FindingKind
from lazyviz.analysis.library import Stacks
from lazyviz.trace.model import Frame, frame_owner

# A package's file (under its package folder) or folder -> the functions there that work
# on the host (None: every function of it).
HOST_CALLS: dict[str, frozenset[str] | None] = {
    "torchvision/utils.py": frozenset({"save_image", "make_grid", "draw_bounding_boxes", "draw_segmentation_masks",
                                       "draw_keypoints", "flow_to_image"}),
    "torch/utils/tensorboard/": None,
    "matplotlib/": None,
    "PIL/": None,
    "wandb/": None,
    "imageio/": None,
}
# Findings a host call's executions make on their own, absorbed into its finding.
ABSORBED_KINDS = frozenset({FindingKind.FALLBACK, FindingKind.RECOMPILE, FindingKind.DYNAMIC_SHAPE, FindingKind.EXTRA_SYNC,
                            FindingKind.MISSING_MARK_STEP})


def _package_path(file: str, packages: tuple[str, ...]) -> str | None:
    """The file under its package folder, torch's TensorBoard writer included (torch's
    own files are plumbing to frame_owner); "" for plumbing, None for the user's own."""
    if "torch/utils/tensorboard/" in file:
        return "torch/utils/tensorboard/" + file.rpartition("torch/utils/tensorboard/")[2]
    return frame_owner(file, packages)


def _host_side(path: str, function: str) -> bool:
    for where, functions in HOST_CALLS.items():
        if path == where or (where.endswith("/") and path.startswith(where)):
            return functions is None or function in functions
    return False


def host_call(stack: Sequence[Frame], packages: tuple[str, ...]) -> tuple[Frame, str] | None:
    """(the user's line that made the call, the host-side function it called) where the
    stack (outermost first) runs through one; None otherwise."""
    user: Frame | None = None
    for frame in stack:
        path = _package_path(frame.file, packages)
        if path is None:
            user = frame
        elif path and _host_side(path, frame.function):  # torch's plumbing between (no_grad's wrapper): skipped
            return (user, frame.function) if user is not None else None
    return None


def host_calls(stack_ids: Sequence[int | None], stacks: Stacks) -> dict[tuple[Frame, str], list[int]]:
    """(the user's line, the function) -> the positions whose stack runs through it."""
    found: dict[tuple[Frame, str], list[int]] = defaultdict(list)
    seen: dict[int | None, tuple[Frame, str] | None] = {}
    for position, stack_id in enumerate(stack_ids):
        if stack_id not in seen:
            seen[stack_id] = host_call(stacks(stack_id), stacks.packages) if stack_id is not None else None
        call = seen[stack_id]
        if call is not None:
            found[call].append(position)
    return found
