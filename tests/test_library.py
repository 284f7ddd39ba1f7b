"""Whose code synced: the innermost line of a stack outside torch, torch_xla and lazyviz
(lazyviz.analysis.library), the user's or a library's."""
from __future__ import annotations

from lazyviz.analysis.library import library_fix, library_line
from lazyviz.analysis.library_loops import library_loop
from lazyviz.trace.model import Frame

SITE = "/usr/lib/python3.11/site-packages"
USER = Frame("/repo/train.py", 62, "<module>")
TORCH = Frame(f"{SITE}/torch/nn/modules/module.py", 1778, "_wrapped_call_impl")
MASKS = Frame(f"{SITE}/transformers/masking_utils.py", 354, "_ignore_bidirectional_mask_sdpa")
TS = ("torch",)  # the framework's packages, as a run on each backend records them
XLA = ("torch", "torch_xla")


def test_a_librarys_line_is_the_innermost_outside_torch() -> None:
    line = library_line([USER, TORCH, Frame(f"{SITE}/transformers/models/bert/modeling_bert.py", 665, "forward"),
                         MASKS, Frame(f"{SITE}/torch/_tensor.py", 1000, "__bool__")], TS)
    assert line is not None and line.frame == MASKS and line.package == "transformers"
    assert str(line) == "transformers/masking_utils.py:354 in _ignore_bidirectional_mask_sdpa()"
    assert library_fix(line) is not None and "attn_implementation" in library_fix(line)


def test_the_users_own_line_torchs_and_the_backends_are_no_library() -> None:
    assert library_line([USER, TORCH], TS) is None  # `if tensor:` in the user's loop, through a tensor method
    assert library_line([USER, Frame(f"{SITE}/torch_xla/torch_xla.py", 87, "sync")], XLA) is None
    # A fork of torch_xla under its own name: plumbing where the run's backend says so.
    fork = [USER, Frame(f"{SITE}/forkxla/core.py", 12, "sync")]
    assert library_line(fork, (*XLA, "forkxla")) is None
    assert library_line(fork, XLA) is not None
    assert library_line([], TS) is None
    other = library_line([USER, Frame(f"{SITE}/somelib/ops.py", 3, "f")], TS)
    assert other is not None and library_fix(other) is None


# generate()'s decode loop as transformers 5.24 runs it: the user's call, its decorator,
# generate, _sample, and a sync there (the stopping check) or in a stopping criterion.
CALL = Frame("/repo/generate.py", 20, "<module>")
CONTEXT = Frame(f"{SITE}/torch/utils/_contextlib.py", 120, "decorate_context")
WRAPPED = Frame(f"{SITE}/transformers/utils/generic.py", 900, "wrapped_func")
GENERATE = Frame(f"{SITE}/transformers/generation/utils.py", 2600, "generate")
SAMPLE = Frame(f"{SITE}/transformers/generation/utils.py", 3289, "_sample")
CRITERIA = Frame(f"{SITE}/transformers/generation/stopping_criteria.py", 500, "__call__")
BOOL = Frame(f"{SITE}/torch/_tensor.py", 1000, "__bool__")


def test_a_loop_inside_generate_is_transformers_decode_loop_with_its_hook() -> None:
    loop = library_loop([[CALL, CONTEXT, WRAPPED, GENERATE, SAMPLE, BOOL],
                         [CALL, CONTEXT, WRAPPED, GENERATE, Frame(SAMPLE.file, 3301, "_sample"), CRITERIA, BOOL]], TS)
    assert loop is not None and loop.known
    assert (loop.path, loop.function, loop.line, loop.call) == ("transformers/generation/utils.py", "_sample", 3289,
                                                                 "generate")
    assert "stopping_criteria=StoppingCriteriaList([SyncEachToken()])" in loop.hook


def test_syncs_from_several_lines_of_the_users_or_from_their_own_code_are_no_library_loop() -> None:
    # The user's own loop: its syncs leave their code at two lines.
    assert library_loop([[CALL, CONTEXT, GENERATE, SAMPLE, BOOL],
                         [Frame(CALL.file, 24, "<module>"), CONTEXT, GENERATE, SAMPLE, BOOL]], TS) is None
    assert library_loop([[USER, TORCH], [USER, TORCH]], TS) is None  # `if tensor:` of theirs: no library
    assert library_loop([], TS) is None
    # A library function lazyviz knows no loop of: named, without a hook to offer.
    other = library_loop([[USER, Frame(f"{SITE}/somelib/run.py", 40, "fit"), BOOL]], TS)
    assert other is not None and not other.known and (other.path, other.function) == ("somelib/run.py", "fit")


def test_lbfgs_calling_the_users_closure_is_a_loop_whose_cut_is_in_the_closure() -> None:
    """time_sequence_prediction: LBFGS.step() evaluates the closure up to max_iter times with
    no sync between, so the forward's graph grows ~23,000 nodes an evaluation (the round
    with the cells lowered took 22 GB). The syncs come from the closure, called by torch's
    lbfgs.py before its loop and in it: one loop, the closure named."""
    from lazyviz.analysis.library_loops import callback_loop

    step = Frame("/w/train.py", 110, "<module>")
    wrapper = Frame(f"{SITE}/torch/optim/optimizer.py", 517, "wrapper")
    closure = Frame("/w/train.py", 106, "closure")
    loss = Frame(f"{SITE}/torch/nn/functional.py", 3885, "mse_loss")
    stacks = [[step, wrapper, Frame(f"{SITE}/torch/optim/lbfgs.py", line, "step"), closure, loss]
              for line in (330, 457)]
    loop = callback_loop(stacks, TS)
    assert loop is not None and loop.callback == "closure" and loop.call == "LBFGS.step" and loop.line == 330
    assert "at the end of closure()" in loop.hook
    assert callback_loop([*stacks, [step, Frame("/w/train.py", 120, "evaluate"), loss]], TS) is None
    assert callback_loop([[Frame("/w/train.py", 90, "train"), wrapper, Frame(f"{SITE}/torch/optim/adam.py", 200,
                                                                              "step"), loss]], TS) is None
