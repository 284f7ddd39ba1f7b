"""Reading SPMD collectives from HLO text, without torch: lines as XLA writes them.

The module-level lines are from torch_xla 2.9's own dump of tests/programs/xla_spmd_mlp.py
(`wrong`, 4 CPU devices); the iota forms are those XLA prints for larger meshes."""
from __future__ import annotations

from lazyviz.analysis.collectives import Tiling, advice, expectation, graph_collectives, mesh_axes
from lazyviz.trace.model import Annotation, Frame

WRONG = """HloModule SyncTensorsGraph.66_spmd, entry_computation_layout={...}

ENTRY %SyncTensorsGraph.66_spmd (param.1: f32[64,64], param: f32[64,64], param.2: f32[256,16]) -> (f32[64,16]) {
  %param = f32[64,64]{1,0} parameter(1), sharding={replicated}, metadata={op_type="xla__device_data" source_file="/p/mlp.py" source_line=36}
  %param.1 = f32[64,64]{1,0} parameter(0), sharding={devices=[1,4]0,1,2,3}, metadata={op_type="xla__device_data" source_file="/p/mlp.py" source_line=36}
  %param.2 = f32[256,16]{1,0} parameter(2), sharding={devices=[1,4]0,1,2,3}, metadata={op_type="xla__device_data" source_file="/p/mlp.py" source_line=37}
  %copy.9 = f32[64,64]{1,0} copy(%param.1)
  %copy.10 = f32[256,16]{1,0} copy(%param.2)
  %dot = f32[64,64]{1,0} dot(%param, %copy.9), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="aten__mm" source_file="/p/mlp.py" source_line=36}
  %maximum_copy_fusion = f32[64,64]{0,1} fusion(%dot), kind=kLoop, calls=%fused_computation.5
  %all-gather = f32[64,256]{0,1} all-gather(%maximum_copy_fusion), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true, metadata={op_type="aten__mm" op_name="aten__mm" source_file="/p/mlp.py" source_line=37}
  %copy.5 = f32[64,256]{1,0} copy(%all-gather), metadata={op_type="aten__mm" source_file="/p/mlp.py" source_line=37}
  ROOT %dot.1 = f32[64,16]{1,0} dot(%copy.5, %copy.10), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_type="aten__mm" source_file="/p/mlp.py" source_line=37}
  %all-reduce.1 = f32[64,256]{1,0} all-reduce(%dot), channel_id=4, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add.clone, metadata={op_type="aten__mm" op_name="aten__mm"}
}
"""


def annotation(line: int, shape: tuple, spec: tuple, sharding: str, mesh=(1, 4), names=("data", "model"),
               parameter: bool = True) -> Annotation:
    return Annotation(Frame("/p/mlp.py", line, "main"), shape, spec, sharding, mesh, names, (0, 1, 2, 3), parameter)


W1 = annotation(28, (64, 256), (None, "model"), "{devices=[1,4]0,1,2,3}")
W2 = annotation(29, (256, 64), (None, "model"), "{devices=[1,4]0,1,2,3}")


def test_each_collective_with_its_line_shape_and_the_bytes_a_ring_sends() -> None:
    gather, reduce = graph_collectives(WRONG)
    assert (gather.kind, gather.shape, gather.location, gather.op, gather.dimension) == \
           ("all-gather", "f32[64,256]", "mlp.py:37", "aten::mm", 1)
    assert gather.bytes == 64 * 256 * 4 and gather.sent == gather.bytes * 3 // 4  # 3 of the 4 pieces come in
    assert (reduce.kind, reduce.location, reduce.sent) == ("all-reduce", "", 2 * 64 * 256 * 4 * 3 // 4)
    assert graph_collectives("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(0)\n}\n") == ()


def test_the_gather_the_layout_did_not_ask_for_and_the_spec_that_avoids_it() -> None:
    gather, reduce = graph_collectives(WRONG)
    assert expectation(gather, [W1, W2]) == "" and expectation(reduce, [W1, W2]).startswith("a sum")
    found = advice(WRONG, gather, [W1, W2])
    assert found is not None and found.annotation == W2 and found.spec == ("model", None)
    # A weight split on the dimension the matmul sums over already: nothing to advise.
    rows = annotation(29, (256, 64), ("model", None), "{devices=[4,1]0,1,2,3}")
    assert advice(WRONG.replace("devices=[1,4]0,1,2,3}, metadata={op_type=\"xla__device_data\" source_file=\"/p/mlp.py\" "
                                "source_line=37", "devices=[4,1]0,1,2,3}, metadata={op_type=\"xla__device_data\" "
                                "source_file=\"/p/mlp.py\" source_line=37").replace("f32[256,16]{1,0} parameter(2)",
                                                                                  "f32[64,64]{1,0} parameter(2)"),
                  gather, [W1, rows]) is None


def test_groups_are_named_by_the_mesh_axes_they_run_along() -> None:
    mesh = dict(mesh=(2, 2), names=("data", "model"))
    batch = annotation(30, (64, 64), ("data", None), "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
                       parameter=False, **mesh)
    assert mesh_axes(((0, 1), (2, 3)), [batch]) == ("model",)
    assert mesh_axes(((0, 2), (1, 3)), [batch]) == ("data",)
    assert mesh_axes(((0, 1, 2, 3),), [batch]) == ("data", "model")
    line = ("  %all-reduce = f32[128,64]{1,0} all-reduce(%dot), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), "
            "use_global_device_ids=true, to_apply=%add")
    [reduce] = graph_collectives(f"HloModule m\n{line}\n")
    assert reduce.groups == ((0, 2), (1, 3)) and mesh_axes(reduce.groups, [batch]) == ("data",)
    assert expectation(reduce, [batch]) == "summed over the batch's devices (data parallel)"


def test_tilings_in_both_of_xlas_forms() -> None:
    assert Tiling.parse("{devices=[1,4]0,1,2,3}") == Tiling((1, 4), (0, 1, 2, 3))
    assert Tiling.parse("{devices=[1,4]<=[4]}") == Tiling((1, 4), (0, 1, 2, 3))
    assert Tiling.parse("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}") == Tiling((2, 1), (0, 2, 1, 3))
    assert Tiling.parse("{replicated}") is None
