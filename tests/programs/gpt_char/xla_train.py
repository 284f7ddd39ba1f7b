"""train.py on PyTorch/XLA, as a user moves a CUDA script there: torch_xla imported and
its device named; the rest runs as written (no torch_xla.sync() in the loop)."""
import os
import runpy
import sys

import torch_xla

os.environ["GPT_DEVICE"] = str(torch_xla.device())
sys.argv[0] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")
runpy.run_path(sys.argv[0], run_name="__main__")
