"""Hugging Face generate() on PyTorch/XLA as a user first writes it: a tiny Llama from a
config (no download), greedy decoding of a few tokens. Nothing cuts the graph, so it
grows over transformers' decode loop (generation/utils.py, _sample) and every token's
sync runs the whole decode so far. Writes torch_xla's own counters to $COUNTERS_FILE.

    python hf_generate_xla.py [new tokens]
"""
import json
import os
import sys

import torch
import torch_xla
import torch_xla.debug.metrics as met
from transformers import LlamaConfig, LlamaForCausalLM

new_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 8
torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
device = torch_xla.device()
model = LlamaForCausalLM(config).to(device).eval()
prompt = torch.tensor([[1, 5, 9, 13]], device=device)
with torch.no_grad():
    out = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
print(out.cpu().tolist())
if os.environ.get("COUNTERS_FILE"):
    with open(os.environ["COUNTERS_FILE"], "w") as f:
        json.dump({name: met.counter_value(name) or 0 for name in met.counter_names()}, f)
