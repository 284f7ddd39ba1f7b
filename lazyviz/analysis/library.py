"""Where in a library a sync happened, and what the user can do about it from their own
file. A sync's recorded stack runs from the user's line (outermost) to the line that
synced; the innermost line outside torch itself says whose code decided to sync: the
user's (`if tensor:` in their loop) or a library's (transformers checking a mask)."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from lazyviz.trace.model import Frame, frame_owner


class Stacks:
    """An execution's recorded Python stack by its stack id, outermost frame first (the
    trace's), and the framework's packages of the run that recorded them
    (Capabilities.packages): whose frames in them are plumbing."""

    def __init__(self, read: Callable[[int | None], list[Frame]] | None = None,
                 packages: tuple[str, ...] = ("torch",)) -> None:
        self._read = read
        self.packages = packages

    def __call__(self, stack_id: int | None) -> list[Frame]:
        return self._read(stack_id) if self._read is not None else []


no_stacks = Stacks()


class LibraryLine(NamedTuple):
    frame: Frame  # the library's line that synced
    path: str  # the file under its package folder: "transformers/masking_utils.py"

    @property
    def package(self) -> str:
        return self.path.partition("/")[0]

    def __str__(self) -> str:
        return f"{self.path}:{self.frame.line} in {self.frame.function}()"


def library_line(stack: list[Frame], packages: tuple[str, ...]) -> LibraryLine | None:
    """The innermost line of the stack outside the framework's `packages` and lazyviz,
    when it is in an installed package (not the user's own file); None when the user's
    code synced."""
    for frame in reversed(stack):
        owner = frame_owner(frame.file, packages)
        if owner != "":
            return LibraryLine(frame, owner) if owner else None
    return None


# What to do from the user's own file when a library syncs or falls back at these lines:
# by the file (under its package folder), each checked for real where it says so.
LIBRARY_FIXES = {
    "transformers/masking_utils.py": (
        "transformers builds the attention mask in its own code and checks it on the host there: build the "
        "model with attn_implementation=\"eager\" and pass attention_mask as a 4D additive mask, "
        "(1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min, which transformers uses as "
        "given (checked with BERT on torch 2.13's TorchScript backend: no sync, no fallback, the same logits)"),
    "transformers/integrations/sdpa_attention.py": (
        "transformers calls scaled_dot_product_attention here, whose masked path falls back on this backend: "
        "build the model with attn_implementation=\"eager\" (checked with BERT on torch 2.13's TorchScript "
        "backend: the attention then has no fallback, the same logits)"),
}


# What to do about an op that falls back in a library's code: by the folder of the file
# (under its package folder) and the op, each measured where it says so.
LIBRARY_OP_FIXES = {
    ("transformers/generation/", "aten::isin.Tensor_Tensor"): (
        "isin is generate()'s end-of-sequence check (EosTokenCriteria, once per new token, and once at its start): "
        "no option of generate() removes it while it must stop at the end-of-sequence token. Where every output "
        "runs to max_new_tokens anyway (a fixed-length decode), eos_token_id=None leaves the check out (measured "
        "on PyTorch/XLA 2.9, a tiny Llama, 8 new tokens, torch_xla's counts: isin 11 -> 1 calls, compiles 23 -> "
        "12, the same tokens). Cut the decode loop first (the growing graph's finding): then each check is one "
        "small sync per token"),
}


def library_fix(line: LibraryLine | None, op: str | None = None) -> str | None:
    """The advice for a sync or fallback at this library line (of this op), where lazyviz has one."""
    if line is None:
        return None
    for (folder, name), advice in LIBRARY_OP_FIXES.items():
        if name == op and line.path.startswith(folder):
            return advice
    return LIBRARY_FIXES.get(line.path)
