"""Sync sites every lazy backend shares: reading a tensor's value, and collectives."""
from __future__ import annotations

from lazyviz.backends import SyncSite


def tensor_sync_sites() -> list[SyncSite]:
    import torch

    tensor = torch.Tensor
    return [
        SyncSite(tensor, "item", "item", "Tensor.item()"),
        SyncSite(tensor, "__repr__", "print", "repr(tensor)"),
        SyncSite(tensor, "__format__", "print", "format(tensor)"),
        SyncSite(tensor, "cpu", "cpu", "Tensor.cpu()"),
        SyncSite(tensor, "to", "cpu", "Tensor.to()"),
        SyncSite(tensor, "numpy", "cpu", "Tensor.numpy()"),
        SyncSite(tensor, "tolist", "tolist", "Tensor.tolist()"),
        SyncSite(tensor, "__bool__", "bool", "bool(tensor)"),
        # float(t) and int(t) read a scalar just as .item() does.
        SyncSite(tensor, "__float__", "item", "float(tensor)"),
        SyncSite(tensor, "__int__", "item", "int(tensor)"),
        SyncSite(tensor, "__index__", "item", "index(tensor)"),
    ]


def collective_sites() -> list[SyncSite]:
    """A collective on a lazy tensor runs its pending graph first: name it."""
    import torch.distributed as dist

    if not dist.is_available():
        return []
    names = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
             "reduce_scatter_tensor", "reduce", "all_to_all", "all_to_all_single", "barrier")
    return [SyncSite(dist, name, "other", f"distributed.{name}()") for name in names if hasattr(dist, name)]
