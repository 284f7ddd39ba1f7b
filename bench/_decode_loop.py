"""Greedy decoding with a tiny Hugging Face GPT-2 (random config, no download) on
PyTorch/XLA, as a generation loop streams tokens: each token runs the model on a
fixed-size buffer and reads the token back to the host. Two cached executions a token: the
step's at torch_xla.sync(), and one at a `bool(tensor)` inside transformers' causal mask
(masking_utils' _preprocess_mask_arguments), as in a user's own loop with this model.
Prints LAZYVIZ-BENCH and the milliseconds of each timed token as JSON.

    PJRT_DEVICE=CPU .venv-xla/bin/python bench/_decode_loop.py WARMUP TOKENS
"""
import json
import sys
import time

import torch
import torch_xla
from transformers import GPT2Config, GPT2LMHeadModel

warmup, tokens = int(sys.argv[1]), int(sys.argv[2])
device = torch_xla.device()
torch.manual_seed(0)
length = warmup + tokens + 1
config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=length, use_cache=False,
                    attn_implementation="eager", bos_token_id=0, eos_token_id=0)
model = GPT2LMHeadModel(config).to(device).eval()
# The whole buffer every token: the same shapes, so the same graph. Causal attention keeps
# what follows the position out of its logits.
ids = torch.zeros(1, length, dtype=torch.long, device=device)
position = torch.zeros(1, dtype=torch.long, device=device)
generated, times = [], []
with torch.no_grad():
    for _ in range(warmup + tokens):
        started = time.perf_counter()
        logits = model(ids).logits
        token = logits.index_select(1, position).argmax(-1).view(1, 1)
        position = position + 1
        ids = ids.index_copy(1, position, token)
        torch_xla.sync()  # the token's one execution: the buffer and position stay device data
        generated.append(token.item())  # streamed to the host: a copy, nothing to run
        times.append((time.perf_counter() - started) * 1000)
print("LAZYVIZ-BENCH " + json.dumps(times[warmup:]))
print("tokens", generated[-8:], file=sys.stderr)
