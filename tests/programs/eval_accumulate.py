"""An evaluation loop that keeps every batch's predictions on the device by concatenation,
as Hugging Face's Trainer does without eval_accumulation_steps."""
import torch
import torch._lazy
import torch._lazy.ts_backend

torch._lazy.ts_backend.init()
torch.manual_seed(0)
model = torch.nn.Linear(16, 4).to("lazy")
predictions = None
for _ in range(8):
    inputs = torch.randn(8, 16).to("lazy")
    with torch.no_grad():
        logits = model(inputs)
    predictions = logits if predictions is None else torch.cat([predictions, logits], dim=0)
    torch._lazy.mark_step()
print(f"kept {tuple(predictions.shape)}, mean {predictions.mean().item():.4f}")
