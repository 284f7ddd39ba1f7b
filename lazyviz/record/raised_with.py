"""What the script's innermost frame held when it raised: the CPU tensors beside lazy
ones. "Input tensor is not a lazy tensor" names no tensor; the frame that raised does
(imagenet's `_conv_forward(self, input, weight, bias)`: the input lazy, the weight a
CPU Parameter of the Conv2d, a model never moved to the device)."""
from __future__ import annotations

import os
import sys
import types

MAX_NAMED = 6  # a message names a few; a module's dozens of parameters say the same


def cpu_tensors(error: BaseException) -> list[tuple[str, str, str]]:
    """(name, "parameter" / "buffer" / "tensor", the module's class or "") for each CPU
    tensor the innermost Python frame held (its locals, and `self`'s own parameters and
    buffers where it is a module) while it also held a tensor of another device; [] where
    it held none, or torch is not loaded. A frame of torch's own (a module's forward, a
    functional) holds the op's arguments; the user's own frame may hold anything (a CPU
    dataset beside the batch), so only its module's own tensors are named. Never raises:
    it runs while the script dies."""
    torch = sys.modules.get("torch")
    tb = error.__traceback__
    if torch is None or tb is None:
        return []
    while tb.tb_next is not None:
        tb = tb.tb_next
    try:
        return _held(tb.tb_frame, torch)
    except Exception:  # a local whose attributes raise: say nothing rather than hide the error
        return []


def _held(frame: types.FrameType, torch: types.ModuleType) -> list[tuple[str, str, str]]:
    values = dict(frame.f_locals) if frame.f_code.co_name != "<module>" else {}
    module = values.get("self")
    torchs = frame.f_code.co_filename.startswith(os.path.dirname(torch.__file__) + os.sep)
    owner = type(module).__name__ if isinstance(module, torch.nn.Module) else ""
    found: dict[str, tuple[str, str, str]] = {}
    other_device = False
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                other_device = True
            elif torchs:
                kind = "parameter" if isinstance(value, torch.nn.Parameter) else "tensor"
                found[name] = (name, kind, owner if kind == "parameter" else "")
    if owner:
        for kind, named in (("parameter", module.named_parameters(recurse=False)),
                            ("buffer", module.named_buffers(recurse=False))):
            for name, value in named:
                if value is not None and value.device.type == "cpu" and name not in found:
                    found[name] = (name, kind, owner)
    return list(found.values())[:MAX_NAMED] if other_device else []
