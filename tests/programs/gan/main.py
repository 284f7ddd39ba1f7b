"""A GAN as PyTorch-GAN and pytorch/examples' dcgan write one, ported to a lazy device by
its device line alone: two networks with an Adam optimizer each, a generator step then a
discriminator step, both losses read with .item() in the log line, a grid of samples
saved with save_image every few batches, and both networks' state_dict() saved at the
end. No mark_step() anywhere."""
import argparse
import os

import torch
import torch._lazy
import torch._lazy.ts_backend
import torch.nn as nn
from torchvision.utils import save_image

parser = argparse.ArgumentParser()
parser.add_argument("--n_batches", type=int, default=8, help="batches of training")
parser.add_argument("--batch_size", type=int, default=8, help="size of the batches")
parser.add_argument("--latent_dim", type=int, default=16, help="dimensionality of the latent space")
parser.add_argument("--img_size", type=int, default=8, help="size of each image dimension")
parser.add_argument("--sample_interval", type=int, default=3, help="interval between image samples")
opt = parser.parse_args()

torch._lazy.ts_backend.init()
torch.manual_seed(0)
device = torch.device("lazy")
os.makedirs("images", exist_ok=True)
pixels = opt.img_size * opt.img_size

generator = nn.Sequential(nn.Linear(opt.latent_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, pixels), nn.Tanh()).to(device)
discriminator = nn.Sequential(nn.Linear(pixels, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1), nn.Sigmoid()).to(device)
adversarial_loss = nn.BCELoss()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=0.0002, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=0.0002, betas=(0.5, 0.999))
data = torch.rand(opt.n_batches, opt.batch_size, pixels) * 2 - 1  # the "real" images, on the host

for i in range(opt.n_batches):
    real_imgs = data[i].to(device)
    valid = torch.ones(opt.batch_size, 1, device=device)
    fake = torch.zeros(opt.batch_size, 1, device=device)

    optimizer_G.zero_grad()
    z = torch.randn(opt.batch_size, opt.latent_dim).to(device)
    gen_imgs = generator(z)
    g_loss = adversarial_loss(discriminator(gen_imgs), valid)
    g_loss.backward()
    optimizer_G.step()

    optimizer_D.zero_grad()
    real_loss = adversarial_loss(discriminator(real_imgs), valid)
    fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
    d_loss = (real_loss + fake_loss) / 2
    d_loss.backward()
    optimizer_D.step()

    print("[Batch %d/%d] [D loss: %f] [G loss: %f]" % (i, opt.n_batches, d_loss.item(), g_loss.item()))
    if i % opt.sample_interval == 0:
        save_image(gen_imgs.data.view(-1, 1, opt.img_size, opt.img_size), "images/%d.pgm" % i, nrow=4, normalize=True)

torch.save(generator.state_dict(), "generator.pth")
torch.save(discriminator.state_dict(), "discriminator.pth")
