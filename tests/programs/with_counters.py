"""Runs a program (runpy, as __main__) and writes torch's lazy counters when it ends,
raised or not, to $COUNTERS_FILE as JSON: the truth the tests check lazyviz against."""
import json
import os
import runpy
import sys

import torch._lazy.metrics

program = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(program))  # as `python program` sets it
try:
    runpy.run_path(program, run_name="__main__")
finally:
    names = torch._lazy.metrics.counter_names()
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump({name: torch._lazy.metrics.counter_value(name) for name in names}, out)
