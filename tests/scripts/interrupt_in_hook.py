"""A SIGALRM handler that raises KeyboardInterrupt only when the signal lands inside
lazyviz's execution callback: the script must see it, as it would see Ctrl-C."""
import signal
import sys

import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
# The execution callback, and the source-line classifier the C++ hook calls while the
# script builds IR nodes (full capture).
CALLBACK = {"_on_execution", "_record", "stack", "user_frame", "is_user_file", "on_raw_execution",
            "classify_code"}
landed = []


def handler(number, frame):
    while frame is not None:
        if frame.f_code.co_name in CALLBACK and "lazyviz" in frame.f_code.co_filename:
            landed.append(frame.f_code.co_name)
            raise KeyboardInterrupt
        frame = frame.f_back


signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
try:
    x = torch.ones(64, 64, device="lazy")
    for step in range(int(sys.argv[1])):
        x = torch.tanh(x @ x) + step
        torch._lazy.mark_step()
    print("never interrupted")
except KeyboardInterrupt:
    signal.setitimer(signal.ITIMER_REAL, 0)
    print("interrupted in", landed[0] if landed else "the script")
    x = torch.ones(64, 64, device="lazy")  # it may have landed before x was made
    torch._lazy.mark_step()  # lazy tensors still work after it
    print("after", x.sum().item() == x.sum().item())
