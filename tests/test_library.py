"""Whose code synced: the innermost line of a stack outside torch, torch_xla and lazyviz
(lazyviz.analysis.library), the user's or a library's."""
from __future__ import annotations

from lazyviz.analysis.library import library_fix, library_line
from lazyviz.trace.model import Frame

SITE = "/usr/lib/python3.11/site-packages"
USER = Frame("/repo/train.py", 62, "<module>")
TORCH = Frame(f"{SITE}/torch/nn/modules/module.py", 1778, "_wrapped_call_impl")
MASKS = Frame(f"{SITE}/transformers/masking_utils.py", 354, "_ignore_bidirectional_mask_sdpa")


def test_a_librarys_line_is_the_innermost_outside_torch() -> None:
    line = library_line([USER, TORCH, Frame(f"{SITE}/transformers/models/bert/modeling_bert.py", 665, "forward"),
                         MASKS, Frame(f"{SITE}/torch/_tensor.py", 1000, "__bool__")])
    assert line is not None and line.frame == MASKS and line.package == "transformers"
    assert str(line) == "transformers/masking_utils.py:354 in _ignore_bidirectional_mask_sdpa()"
    assert library_fix(line) is not None and "attn_implementation" in library_fix(line)


def test_the_users_own_line_torchs_and_the_backends_are_no_library() -> None:
    assert library_line([USER, TORCH]) is None  # `if tensor:` in the user's loop, through a tensor method
    assert library_line([USER, Frame(f"{SITE}/torch_xla/torch_xla.py", 87, "sync")]) is None
    assert library_line([]) is None
    other = library_line([USER, Frame(f"{SITE}/somelib/ops.py", 3, "f")])
    assert other is not None and library_fix(other) is None
