"""A sampler written as k-diffusion writes `sample_euler`: the noise schedule (sigmas) a
tensor on the lazy device, read at each step with the loop's Python index
(`sigmas[i]`, `sigmas[i + 1]`), a small denoiser, one mark_step() a step. Each index is
baked into the graph as a constant: every step compiles a new graph.

    python euler_sampler.py [--steps 10]
"""
import argparse
import json
import os

import torch
import torch_xla
import torch_xla.debug.metrics as met

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()

torch.manual_seed(0)
device = torch_xla.device()
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
        torch_xla.sync()
print(f"sample mean {x.mean().item():.5f} std {x.std().item():.5f}")
if "COUNTERS_FILE" in os.environ:  # torch_xla's own counts: the truth the tests check against
    with open(os.environ["COUNTERS_FILE"], "w") as out:
        json.dump({"UncachedCompile": met.counter_value("UncachedCompile"),
                   "CachedCompile": met.counter_value("CachedCompile")}, out)
