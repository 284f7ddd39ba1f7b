"""The truth for a script's graphs, untraced, from torch_xla's own metrics:
`xla_counts.py N SCRIPT ARGS...` runs SCRIPT as __main__ and writes on stderr, at the end
of each optimizer step, "compiles after step K: C" (CompileTime's count), and at the end
"at exit: E executions, C compiles" (ExecuteTime's and CompileTime's). N > 0 ends it
after step N (what follows the loop is then not measured)."""
import atexit
import os
import runpy
import sys

import torch_xla.debug.metrics as met
from torch.optim.optimizer import register_optimizer_step_post_hook

last = int(sys.argv[1])
steps = 0


def count(metric: str) -> int:
    return (met.metric_data(metric) or (0,))[0]


def stepped(optimizer, args, kwargs) -> None:
    global steps
    steps += 1
    sys.stderr.write(f"compiles after step {steps}: {count('CompileTime')}\n")
    if steps == last:
        sys.stdout.flush()
        os._exit(0)


@atexit.register
def at_exit() -> None:
    sys.stderr.write(f"at exit: {count('ExecuteTime')} executions, {count('CompileTime')} compiles\n")


register_optimizer_step_post_hook(stepped)
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as `python SCRIPT` has it
runpy.run_path(sys.argv[0], run_name="__main__")
