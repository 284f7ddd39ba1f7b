"""SPMD on PyTorch/XLA: what a script asks the partitioner for (xs.mark_sharding).

The collectives the partitioner inserts are read from the HLO XLA compiled (analysis:
lazyviz/analysis/collectives.py); what asked for them is each annotation's tensor,
partition spec and mesh, noted here as the script makes it.
"""
from __future__ import annotations

from typing import Any


def annotation_calls() -> list[tuple[object, str]]:
    """mark_sharding where scripts and torch_xla's own wrappers (FSDPv2) look it up."""
    import torch_xla.distributed.spmd as spmd
    import torch_xla.distributed.spmd.xla_sharding as xla_sharding

    return [(spmd, "mark_sharding"), (xla_sharding, "mark_sharding")]


def describe_annotation(args: tuple, kwargs: dict) -> dict | None:
    """mark_sharding(t, mesh, partition_spec), after it ran: Annotation's fields."""
    import torch_xla

    names = ("t", "mesh", "partition_spec")
    given = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
    tensor, mesh, spec = given.get("t"), given.get("mesh"), given.get("partition_spec")
    if tensor is None or mesh is None or spec is None:
        return None
    tensor = getattr(tensor, "global_tensor", tensor)  # an XLAShardedTensor wraps the tensor
    mesh_shape = tuple(int(n) for n in mesh.mesh_shape)
    axis_names = tuple(str(name) for name in mesh.axis_names) if mesh.axis_names else \
        tuple(str(i) for i in range(len(mesh_shape)))
    return {
        "shape": [int(n) for n in tensor.shape],
        "spec": [_plain(entry) for entry in spec],
        "sharding": torch_xla._XLAC._get_xla_sharding_spec(tensor),
        "mesh_shape": list(mesh_shape), "axis_names": list(axis_names),
        "device_ids": [int(d) for d in mesh.device_ids.reshape(-1)],
        "parameter": bool(tensor.requires_grad and tensor.is_leaf),
    }


def _plain(entry: Any) -> Any:
    """A partition spec entry as JSON holds it: a name, an index, None, or a list of them."""
    if isinstance(entry, (tuple, list)):
        return [_plain(e) for e in entry]
    return entry if entry is None or isinstance(entry, str) else int(entry)
