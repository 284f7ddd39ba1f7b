"""A sampler written as k-diffusion writes `sample_euler`: the noise schedule (sigmas) a
tensor on the lazy device, read at each step with the loop's Python index
(`sigmas[i]`, `sigmas[i + 1]`), a small denoiser, one mark_step() a step. Each index is
baked into the graph as a constant: every step compiles a new graph.

    python euler_sampler.py [--steps 10]
"""
import argparse

import torch
import torch._lazy
import torch._lazy.ts_backend

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()

torch._lazy.ts_backend.init()
torch.manual_seed(0)
device = torch.device("lazy")
denoiser = torch.nn.Sequential(torch.nn.Linear(17, 64), torch.nn.SiLU(), torch.nn.Linear(64, 16)).to(device)
ramp = torch.linspace(0, 1, args.steps)
sigmas = torch.cat([(10.0 ** (1 / 7) + ramp * (0.02 ** (1 / 7) - 10.0 ** (1 / 7))) ** 7, torch.zeros(1)]).to(device)
x = torch.randn(8, 16).to(device) * sigmas[0]
with torch.no_grad():
    for i in range(args.steps):
        sigma = sigmas[i]
        denoised = x - sigma * denoiser(torch.cat([x, sigma.expand(8, 1).log()], dim=1))
        d = (x - denoised) / sigma
        x = x + d * (sigmas[i + 1] - sigma)
        torch._lazy.mark_step()
print(f"sample mean {x.mean().item():.5f} std {x.std().item():.5f}")
