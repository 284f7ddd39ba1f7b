"""Greedy decoding with a tiny Hugging Face GPT-2 (random config, no download) on
PyTorch/XLA, as a generation loop streams tokens: each token runs the model on a
fixed-size ring buffer and reads the token back to the host. Two cached executions a
token: the step's at torch_xla.sync(), and one at a `bool(tensor)` inside transformers'
causal mask (masking_utils' _preprocess_mask_arguments), as in a user's own loop with
this model. Prints LAZYVIZ-BENCH and the milliseconds of each timed token as JSON.

With `relay` in place of TOKENS, it decodes in the turns bench/decode_loop.py hands out:
after the warm-up it says it is ready, then for each number N on stdin decodes N tokens
and prints their milliseconds and the CPU milliseconds this thread spent on them, until
"end" (or the end of stdin).

With $LAZYVIZ_BENCH_COLLECT naming the small library bench/decode_loop.py builds for
--instructions, callgrind counts instructions only while the timed tokens decode (the
library's call turns its collection on, then off and dumps the counts).

    PJRT_DEVICE=CPU .venv-xla/bin/python bench/_decode_loop.py WARMUP TOKENS|relay
"""
import json
import sys
import time
from collections.abc import Iterator

import _callgrind
import torch
import torch_xla
from transformers import GPT2Config, GPT2LMHeadModel

warmup = int(sys.argv[1])
relay = sys.argv[2] == "relay"
device = torch_xla.device()
torch.manual_seed(0)
length = 256  # the ring's positions: a token costs the same however many are decoded
config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=length, use_cache=False,
                    attn_implementation="eager", bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config).to(device).eval()
# The whole buffer every token: the same shapes, so the same graph. Causal attention keeps
# what follows the position out of its logits (until the ring wraps: a random model's
# tokens mean nothing either way).
ids = torch.zeros(1, length, dtype=torch.long, device=device)
position = torch.zeros(1, dtype=torch.long, device=device)
generated: list[int] = []


def decode() -> float:
    """One token; its milliseconds."""
    global ids, position
    started = time.perf_counter()
    logits = model(ids).logits
    token = logits.index_select(1, position).argmax(-1).view(1, 1)
    position = (position + 1) % length
    ids = ids.index_copy(1, position, token)
    torch_xla.sync()  # the token's one execution: the buffer and position stay device data
    generated.append(token.item())  # streamed to the host: a copy, nothing to run
    return (time.perf_counter() - started) * 1000


def say(value: object) -> None:
    print("LAZYVIZ-BENCH " + json.dumps(value), flush=True)


def turns() -> Iterator[int]:
    """How many tokens each turn decodes, the warm-up first: every token is decoded from
    the same line, as a real loop's are. XLA's analysis names the whole Python stack, so
    a token decoded from another line is another sync site to lazyviz, learnt anew (the
    counted tokens paid 1.2% for it when they had a loop of their own)."""
    yield warmup
    if not relay:
        yield int(sys.argv[2])
        return
    say("ready")
    for line in sys.stdin:
        if line.strip() == "end":
            break
        yield int(line)


collect = None if relay else _callgrind.switch()
with torch.no_grad():
    for number, count in enumerate(turns()):
        if number == 1 and collect is not None:
            collect(1)
        cpu = time.thread_time()
        turn = [decode() for _ in range(count)]
        if number == 0:
            continue
        if relay:
            say({"ms": turn, "cpu_ms": (time.thread_time() - cpu) * 1000})
        elif collect is not None:
            collect(0)
            say("counted")
        else:
            say(turn)
print("tokens", generated[-8:], file=sys.stderr)
