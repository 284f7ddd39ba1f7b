"""SPMD on PyTorch/XLA: what a script asks the partitioner for (xs.mark_sharding).

The collectives the partitioner inserts are read from the HLO XLA compiled (analysis:
lazyviz/analysis/collectives.py); what asked for them is each annotation's tensor,
partition spec and mesh, noted here as the script makes it.
"""
from __future__ import annotations

from typing import Any

from lazyviz.backends.xla_io import framework


def annotation_calls(package: str) -> list[tuple[object, str]]:
    """mark_sharding where scripts and torch_xla's own wrappers (FSDPv2) look it up, and
    the sharding a loader gives each batch (`MpDeviceLoader(input_sharding=
    xs.ShardingSpec(mesh, ("data", None)))`, as pytorch/xla's SPMD examples shard theirs)."""
    spmd = framework(package, "distributed.spmd")
    xla_sharding = framework(package, "distributed.spmd.xla_sharding")

    return [(spmd, "mark_sharding"), (xla_sharding, "mark_sharding"), (xla_sharding.ShardingSpec, "__post_init__")]


def describe_annotation(package: str, args: tuple, kwargs: dict) -> dict | None:
    """mark_sharding(t, mesh, partition_spec), after it ran, or a ShardingSpec made for
    a loader's batches (no tensor yet: no shape): Annotation's fields."""
    spec_class = framework(package, "distributed.spmd.xla_sharding").ShardingSpec
    if args and isinstance(args[0], spec_class):
        return _described(args[0].mesh, args[0].partition_spec) | {"shape": [], "sharding": "", "parameter": False}
    names = ("t", "mesh", "partition_spec")
    given = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
    tensor, mesh, spec = given.get("t"), given.get("mesh"), given.get("partition_spec")
    if tensor is None or mesh is None or spec is None:
        return None
    tensor = getattr(tensor, "global_tensor", tensor)  # an XLAShardedTensor wraps the tensor
    return _described(mesh, spec) | {
        "shape": [int(n) for n in tensor.shape],
        "sharding": framework(package)._XLAC._get_xla_sharding_spec(tensor),
        "parameter": bool(tensor.requires_grad and tensor.is_leaf),
    }


def _described(mesh: Any, spec: Any) -> dict:
    """The partition spec and its mesh, as plain values."""
    mesh_shape = tuple(int(n) for n in mesh.mesh_shape)
    axis_names = tuple(str(name) for name in mesh.axis_names) if mesh.axis_names else \
        tuple(str(i) for i in range(len(mesh_shape)))
    return {"spec": [_plain(entry) for entry in spec], "mesh_shape": list(mesh_shape),
            "axis_names": list(axis_names), "device_ids": [int(d) for d in mesh.device_ids.reshape(-1)]}


def _plain(entry: Any) -> Any:
    """A partition spec entry as JSON holds it: a name, an index, None, or a list of them."""
    if isinstance(entry, (tuple, list)):
        return [_plain(e) for e in entry]
    return entry if entry is None or isinstance(entry, str) else int(entry)
