"""A bare F.scaled_dot_product_attention in the user's own code, causal, as GPT code calls
it: on torch 2.13's TS backend the op falls back through isneginf, all.dim and where."""
import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn.functional as F

torch._lazy.ts_backend.init()
torch.manual_seed(0)
q, k, v = (torch.randn(2, 2, 8, 16).to("lazy") for _ in range(3))
for _ in range(4):
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
    q = q + 0.1 * y
    torch._lazy.mark_step()
print(f"{q.sum().item():.4f}")
