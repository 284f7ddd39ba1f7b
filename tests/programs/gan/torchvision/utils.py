"""A stand-in for torchvision.utils (torchvision does not load beside torch 2.13's CPU
wheel), installed in the tests as a library (a folder named site-packages on PYTHONPATH)
under torchvision's own name. Its save_image does what torchvision's does: make_grid
copies each image into a grid with a Python loop over the batch, then the grid is moved
to the host and written (PGM)."""
import torch


def make_grid(tensor, nrow=4, padding=2, normalize=False):
    if normalize:
        tensor = tensor.clone()
        low, high = float(tensor.min()), float(tensor.max())
        tensor.clamp_(min=low, max=high).sub_(low).div_(max(high - low, 1e-5))
    nmaps = tensor.size(0)
    xmaps = min(nrow, nmaps)
    ymaps = (nmaps + xmaps - 1) // xmaps
    height, width = tensor.size(2) + padding, tensor.size(3) + padding
    grid = tensor.new_full((tensor.size(1), height * ymaps + padding, width * xmaps + padding), 0.0)
    k = 0
    for y in range(ymaps):
        for x in range(xmaps):
            if k >= nmaps:
                break
            grid.narrow(1, y * height + padding, height - padding).narrow(
                2, x * width + padding, width - padding).copy_(tensor[k])
            k += 1
    return grid


def save_image(tensor, fp, **kwargs):
    grid = make_grid(tensor, **kwargs)
    pixels = grid.mul(255).add_(0.5).clamp_(0, 255).to("cpu", torch.uint8)[0]
    with open(fp, "wb") as f:
        f.write(b"P5 %d %d 255\n" % (pixels.size(1), pixels.size(0)))
        f.write(bytes(pixels.flatten().tolist()))
