"""PyTorch/XLA's debug reports and tensors dump, parsed from fixture text that torch_xla
2.9 wrote for samples/xla/batch_size_change.py (paths shortened): no torch_xla needed."""
from __future__ import annotations

from pathlib import Path

from builders import ex, run_info

from lazyviz.analysis import analyze
from lazyviz.analysis.graphs import IRGraphs
from lazyviz.analysis.hlo import hlo_changes
from lazyviz.analysis.ir import parse_ir
from lazyviz.analysis.persistent import persistent_cache
from lazyviz.analysis.recompiles import explain_recompiles
from lazyviz.analysis.summary import split_hlo
from lazyviz.backends.xla_eager import built_at, compiled_flags
from lazyviz.backends.xla_reports import GraphDumpParser, ReportParser, hlo_entry_size, hlo_signature
from lazyviz.hlo_text import hlo_as_ir
from tui.details import counters_text
from tui.widgets.executions import COLUMNS


def diff_of(old: str, new: str):
    """What differs from one IR text to another, as the analysis asks it (IRGraphs.diff)."""
    return IRGraphs({"old": old, "new": new}).diff("old", "new")

FIXTURES = Path(__file__).parent / "fixtures" / "xla"


def test_reports_in_order_with_hash_and_frames() -> None:
    reports = ReportParser().feed((FIXTURES / "analysis.txt").read_text())
    kinds = [r.kind for r in reports]
    assert kinds[:4] == ["Compilation", "Post Compilation", "Execution", "Execution"]
    assert kinds.count("Execution") == 4 and kinds.count("Compilation") == 2
    first = reports[0]
    assert first.graph_hash == "d3f0148b7de5c665cdb2a523e7ecc940"
    assert first.frames[0] == ("/venv/site-packages/torch_xla/torch_xla.py", 87, "sync")
    assert first.frames[1:] == [("/repo/batch_size_change.py", 34, "main"), ("/repo/batch_size_change.py", 39, "<module>")]
    assert first.field("Number of Graph Inputs") == "9"
    assert first.cause == "user torch_xla.sync"


def test_reports_split_across_reads() -> None:
    text = (FIXTURES / "analysis.txt").read_text()
    parser = ReportParser()
    middle = text.index("Execution Analysis: Graph Info")
    cut = text.rfind("\n", 0, middle) + 1  # the adapter hands on whole lines only
    reports = parser.feed(text[:cut]) + parser.feed(text[cut:])
    assert [r.graph_hash for r in reports] == [r.graph_hash for r in ReportParser().feed(text)]


def _blocks(text: str) -> list[str]:
    """The fixture's blocks as XLA writes each: a newline, then its lines."""
    return ["\n" + block.strip("\n") + "\n" for block in text.split("\n\n") if " Analysis: " in block]


def test_blocks_two_threads_wrote_into_each_other_are_read_apart() -> None:
    """XLA writes a block over 1 KB in two writes (1,025 bytes, then the rest), and a
    thread per device can write its own block between them: before, the two merged into
    one report with the first one's hash, and a compile went missing (3 misses where XLA
    counted 4, 1 run in 12)."""
    blocks = [block for block in _blocks((FIXTURES / "analysis.txt").read_text())
              if "Graph Hash: " in block][:2]
    first, second = (block.replace("Graph Hash: ", "Graph Hash: " + tag) for tag, block in zip("ab", blocks))
    # Where XLA's first write ends (1,025 bytes with real paths; these are shortened):
    # inside the last frame line.
    a, b = (text.rfind(")\n", 0, len(text) - 200) - 5 for text in (first, second))
    kinds = [first.split(" Analysis: ")[0].strip(), second.split(" Analysis: ")[0].strip()]
    expected = [(kinds[1], "b"), (kinds[0], "a")]
    # One block inside the other, then the two crossing.
    for stream in (first[:a] + second + first[a:], first[:a] + second[:b] + first[a:] + second[b:]):
        reports = ReportParser().feed(stream)
        assert sorted((r.kind, r.graph_hash[:1]) for r in reports) == sorted(expected), stream
        whole = next(r for r in reports if r.graph_hash.startswith("a"))
        assert whole.field("Number of Graph Inputs") == next(
            r for r in ReportParser().feed(first)).field("Number of Graph Inputs")
    # The block inside the other: the first one's frames whole again (its cut line rejoined).
    nested = ReportParser().feed(first[:a] + second + first[a:])
    assert next(r for r in nested if r.graph_hash.startswith("a")).frames == ReportParser().feed(first)[0].frames


def test_graph_dump_gives_each_graph_once_with_locations() -> None:
    text = (FIXTURES / "graphs.txt").read_text()
    parser = GraphDumpParser()
    half = len(text) // 2
    found = {**parser.feed(text[:half]), **parser.feed(text[half:])}
    assert list(found) == ["d3f0148b7de5c665cdb2a523e7ecc940"]  # dumped twice, stored once
    graph = parse_ir(found["d3f0148b7de5c665cdb2a523e7ecc940"])
    assert len(graph) > 10 and any(node.location.endswith("batch_size_change.py:28") for node in graph.nodes)
    assert parser.feed("") == {}


def test_what_xla_would_print_on_stderr_at_the_users_level() -> None:
    from lazyviz.backends.xla_io import _LAZYVIZ_DIR, echoed

    text = (FIXTURES / "analysis.txt").read_text()
    wrapper = f"Execution Analysis:   sync_site ({_LAZYVIZ_DIR}/record/tracer.py:182)\n"
    first_frame = "Execution Analysis:   sync (/venv/site-packages/torch_xla/torch_xla.py:87)\n"
    assert first_frame in text
    text = text.replace(first_frame, first_frame + wrapper, 1)
    assert echoed(text, 0) == ""  # nothing untraced, and no unexpected execution here
    level1 = echoed(text, 1)
    assert "Compilation Analysis: " in level1 and "Execution Analysis: " not in level1.replace("Compilation", "")
    level2 = echoed(text, 2)
    assert level2.count("Execution Analysis: Execution Cause") == 4 and "lazyviz" not in level2
    unexpected = "\nUnexpected Execution Analysis: ====\nUnexpected Execution Analysis:   f (/w/t.py:7)\n"
    assert echoed(text + unexpected, 0) == unexpected


def test_hlo_signature_counts_what_xla_counts_as_a_graphs_inputs_and_outputs() -> None:
    """The entry line of a module XLA dumped (shapes and tuples hold commas of their own)."""
    module = [
        "HloModule SyncTensorsGraph.30, entry_computation_layout={(f32[16,1]{1,0})->(f32[])}\n",
        "%AddComputation.1 (x.2: f32[], y.3: f32[]) -> f32[] {\n",
        "ENTRY %SyncTensorsGraph.30 (p0.1: f32[16,1], p1.2: (f32[2], s64[]), p2.3: f32[8,16,1]) -> "
        "(f32[], /*index=1*/f32[16,1]{1,0}) {\n",
    ]
    assert hlo_signature(module) == (3, 2)
    assert hlo_signature(["ENTRY %g (p0.1: f32[4]) -> f32[4] {\n"]) == (1, 1)
    assert hlo_signature(module[:2]) is None  # not all written yet


def test_split_hlo_keeps_the_analysis_apart_from_the_module() -> None:
    text = "Compilation Cause\n  user torch_xla.sync\n\n# the HLO XLA compiled\nHloModule m\nENTRY ...\n"
    assert split_hlo(text) == ("Compilation Cause\n  user torch_xla.sync",
                               "# the HLO XLA compiled\nHloModule m\nENTRY ...\n")
    assert split_hlo("graph(%x : Tensor):\n  return (%x)\n") == ("graph(%x : Tensor):\n  return (%x)\n", "")


def _module(start: int, scale: str) -> str:
    """A module as XLA dumps it after optimizing: a fused slice and a constant."""
    meta = 'metadata={op_type="xla__select" op_name="xla__select" source_file="train.py" source_line=19}'
    return (
        "HloModule SyncTensorsGraph.12, is_scheduled=true\n\n"
        "%fused_computation.3 (param_0.4: f32[64,32]) -> f32[64,16] {\n"
        "  %param_0.4 = f32[64,32]{1,0} parameter(0)\n"
        f"  ROOT %slice.7 = f32[64,16]{{1,0}} slice(f32[64,32]{{1,0}} %param_0.4), "
        f"slice={{[0:64], [{start}:{start + 16}]}}, {meta}\n"
        "}\n\n"
        "ENTRY %SyncTensorsGraph.12 (p0.1: f32[64,32]) -> (f32[64,16], f32[]) {\n"
        "  %p0.1 = f32[64,32]{1,0} parameter(0)\n"
        "  %fusion.2 = f32[64,16]{1,0} fusion(f32[64,32]{1,0} %p0.1), kind=kLoop, calls=%fused_computation.3\n"
        f'  %constant.5 = f32[] constant({scale}), metadata={{op_type="prim__Constant" source_file="train.py" '
        'source_line=21}\n'
        "  ROOT %tuple.6 = (f32[64,16]{1,0}, f32[]) tuple(%fusion.2, %constant.5)\n"
        "}\n"
    )


def test_hlo_entry_size_counts_the_entry_computations_instructions() -> None:
    assert hlo_entry_size(_module(2, "0.5")) == 4  # not the fused computation's
    assert hlo_entry_size("HloModule m\n") == 0


def test_hlo_changes_name_the_values_xlas_ir_text_leaves_out() -> None:
    assert hlo_changes(_module(2, "0.5"), _module(2, "0.5")) == ()
    # Ids differ between compiles of one computation: not a change.
    assert hlo_changes(_module(2, "0.5"), _module(2, "0.5").replace(".7 ", ".9 ").replace("%p0.1", "%p0.3")) == ()
    (bound,) = hlo_changes(_module(2, "0.5"), _module(3, "0.5"))
    assert (bound.op, bound.before, bound.after, bound.location) == (
        "xla::select", "slice={[0:64], [2:18]}", "slice={[0:64], [3:19]}", "train.py:19")
    (scale,) = hlo_changes(_module(2, "0.5"), _module(2, "0.25"))
    assert (scale.op, scale.before, scale.after) == ("prim::Constant", "constant(0.5)", "constant(0.25)")
    # Another computation (an op more, or an op reading another operand): no value to name.
    grown = _module(2, "0.5").replace("  ROOT %tuple", "  %negate.8 = f32[] negate(%constant.5)\n  ROOT %tuple")
    assert hlo_changes(_module(2, "0.5"), grown) == ()
    rewired = _module(2, "0.5").replace("kind=kLoop, calls=%fused_computation.3", "kind=kLoop, calls=%other.3")
    assert hlo_changes(_module(2, "0.5"), rewired.replace("fusion(f32[64,32]{1,0} %p0.1)", "fusion(%p1.9)")) == ()


SELECTED = """IR {
  %0 = f32[64,32]{1,0} xla::device_data(), location=<module>@train.py:19, xla_shape=f32[64,32]{1,0}
  %1 = f32[64,16]{1,0} xla::select(%0), location=<module>@train.py:19, xla_shape=f32[64,16]{1,0}, ROOT=0
}
"""


def test_the_same_xla_ir_text_compiled_anew_is_a_value_its_text_leaves_out() -> None:
    """Two graphs whose XLA IR texts are the same (a select printed without its bounds):
    with their HLO the bounds that changed; without it (a launched process records
    none), a value the IR text does not print, never TorchScript's aliasing."""
    executions = [ex(i, step=i, graph=f"g{i}", cache="miss") for i in range(4)]
    hlo = {f"g{i}": f"# the HLO\n{_module(i, '0.5')}" for i in range(4)}
    info = run_info(backend="xla", steps=4)
    with_hlo = IRGraphs({g: SELECTED for g in hlo}, hlo.__getitem__)
    finding = next(f for f in analyze(info, executions, with_hlo).findings if f.kind == "recompile")
    assert "slice={[0:64], [1:17]} -> slice={[0:64], [2:18]}, built at train.py:19" in finding.message
    without = IRGraphs({g: SELECTED for g in hlo}, lambda graph: "")
    finding = next(f for f in analyze(info, executions, without).findings if f.kind == "recompile")
    assert "a value its IR text does not print changed" in finding.message and "share buffers" not in finding.message
    assert "a Python number used as a slice bound" in finding.fix


def test_light_capture_explains_an_input_shape_change_from_the_hlo_once_for_both_its_sites() -> None:
    """No IR (light capture): the parameters whose shapes differ are the change, and the
    same change seen at two sync sites of a step (an .item() and the sync) is one cause."""
    def module(rows: int, out: str) -> str:
        return (f"# the HLO\nHloModule m\n\nENTRY %g.9 (p0.1: f32[{rows},8], p1.2: f32[8]) -> ({out}) {{\n"
                f"  %p0.1 = f32[{rows},8]{{1,0}} parameter(0)\n}}\n")
    executions, hlo = [], {}
    for step in range(4):
        rows = 24 if step == 3 else 16
        for at, (cause, line) in enumerate((("item", 16), ("mark_step", 17))):
            graph = f"{cause}{rows}"
            hlo[graph] = module(rows, "f32[]" if cause == "item" else "f32[], f32[8]")
            executions.append(ex(2 * step + at, step=step, graph=graph, cause=cause, line=line,
                                 cache="miss" if step in (0, 3) else "hit"))
    info = run_info(backend="xla", capture="light", steps=4)
    findings = analyze(info, executions, IRGraphs(dict.fromkeys(hlo, ""), hlo.__getitem__)).findings
    (finding,) = [f for f in findings if f.kind in ("recompile", "dynamic_shape")]  # and the .item()'s extra sync
    assert finding.message.startswith("step 3 recompiled: input shape f32[16,8] -> f32[24,8]")
    assert "one cause: 2 recompiles at 2 sync sites" in finding.message and "pad or bucket" in finding.fix
    # The same input in another dtype: a dtype change, with its own fix.
    hlo["item24"], hlo["mark_step24"] = (text.replace("f32[24,8]", "f16[16,8]") for text in
                                         (hlo["item24"], hlo["mark_step24"]))
    findings = analyze(info, executions, IRGraphs(dict.fromkeys(hlo, ""), hlo.__getitem__)).findings
    (finding,) = [f for f in findings if f.kind == "recompile"]
    assert "dtype: xla::device_data %p0: f32[16,8] -> f16[16,8]" in finding.message and "cast it once" in finding.fix


def _before(rows: int, start: int) -> str:
    """A module as XLA dumps it before optimizing, XLA_IR_DEBUG on: a batch of `rows`,
    a slice from `start` and a mean (its count a constant of the lowering)."""
    def meta(op: str, line: int) -> str:
        return f'metadata={{op_type="{op}" op_name="{op}" source_file="/repo/train.py" source_line={line}}}'
    return (
        "HloModule SyncTensorsGraph.20, entry_computation_layout={(f32[64,32]{1,0})->(f32[], f32[64,16]{1,0})}\n\n"
        "%AddComputation.5 (x.6: f32[], y.7: f32[]) -> f32[] {\n"
        "  %x.6 = f32[] parameter(0)\n  %y.7 = f32[] parameter(1)\n  ROOT %add.8 = f32[] add(%x.6, %y.7)\n}\n\n"
        f"ENTRY %SyncTensorsGraph.20 (p0.1: f32[{rows},32]) -> (f32[], f32[{rows},16]) {{\n"
        f"  %p0.1 = f32[{rows},32]{{1,0}} parameter(0), {meta('xla__device_data', 12)}\n"
        f"  %slice.2 = f32[{rows},16]{{1,0}} slice(%p0.1), slice={{[0:{rows}], [{start}:{start + 16}]}}, "
        f"{meta('xla__select', 19)}\n"
        f"  %constant.3 = f32[] constant(0), {meta('aten__mean', 21)}\n"
        f"  %reduce.9 = f32[] reduce(%slice.2, %constant.3), dimensions={{0,1}}, to_apply=%AddComputation.5, "
        f"{meta('aten__mean', 21)}\n"
        f"  %constant.10 = f32[] constant({rows * 16}), {meta('aten__mean', 21)}\n"
        f"  %divide.11 = f32[] divide(%reduce.9, %constant.10), {meta('aten__mean', 21)}\n"
        f"  ROOT %tuple.12 = (f32[], /*index=1*/f32[{rows},16]{{1,0}}) tuple(%divide.11, %slice.2)\n"
        "}\n"
    )


def test_an_hlo_module_reads_as_xlas_ir_one_node_per_instruction() -> None:
    """Full capture writes each graph's IR from its HLO: the IR op each instruction
    lowers, its opcode, its values and the user's line, the output tuple as ROOT marks."""
    graph = parse_ir(hlo_as_ir(_before(64, 1)))
    assert [(n.op, n.attrs.get("hlo"), n.source_line) for n in graph.nodes] == [
        ("xla::device_data", None, "train.py:12"), ("xla::select", "slice", "train.py:19"),
        ("aten::mean", "constant", "train.py:21"), ("aten::mean", "reduce", "train.py:21"),
        ("aten::mean", "constant", "train.py:21"), ("aten::mean", "divide", "train.py:21")]
    assert graph.nodes[0].is_input and str(graph.nodes[0].outputs[0]) == "f32[64,32]"
    assert graph.nodes[1].attrs["slice"] == "{[0:64], [1:17]}"
    assert graph.nodes[3].operands == ("%1", "%2") and graph.nodes[3].attrs["to_apply"] == "%AddComputation"
    assert graph.nodes[4].attrs["value"] == "1024"
    assert {n.id: n.root for n in graph.nodes if n.root is not None} == {"%5": 0, "%1": 1}
    assert hlo_as_ir("HloModule m\n") == ""


def test_a_diff_of_hlo_graphs_names_the_value_and_the_input_that_changed() -> None:
    (bound,) = diff_of(hlo_as_ir(_before(64, 1)), hlo_as_ir(_before(64, 2))).origins
    assert bound.describe() == ("attribute: xla::select.slice %1: {[0:64], [1:17]} -> {[0:64], [2:18]}, "
                                "built at train.py:19")
    # Another batch: the input is the origin; the slice's and the mean's new sizes follow it.
    (batch,) = diff_of(hlo_as_ir(_before(64, 1)), hlo_as_ir(_before(48, 1))).origins
    assert (batch.kind, batch.before, batch.after, batch.source_line) == (
        "input_shape", "f32[64,32]", "f32[48,32]", "train.py:12")


def test_the_same_hlo_compiled_anew_is_not_called_a_value_the_ir_leaves_out() -> None:
    """Full capture's IR is the HLO: where two graphs' are the same, no value the IR text
    left out can be the difference (that note is for XLA's own IR text)."""
    executions = [ex(i, step=i, graph=f"g{i}", cache="miss") for i in range(3)]
    texts = {f"g{i}": hlo_as_ir(_before(64, 1)) for i in range(3)}
    recompiles = explain_recompiles(executions, IRGraphs(texts, lambda graph: _before(64, 1)))
    assert recompiles[-1].note.startswith("same HLO as graph g1, but XLA compiled it anew")
    assert "does not print" not in recompiles[-1].note and recompiles[-1].brief() == "same HLO"
    (finding,) = [f for f in analyze(run_info(backend="xla", steps=3), executions,
                                     IRGraphs(texts, lambda graph: _before(64, 1))).findings if f.kind == "recompile"]
    assert "baked into the graph" not in finding.fix and "export --format hlo" in finding.fix


def test_an_instruction_no_ir_op_lowered_is_still_a_node() -> None:
    """Without metadata (an instruction XLA added, a graph without XLA_IR_DEBUG) the node
    is its opcode, a name the IR reader takes; operands printed with their shapes too."""
    module = ("HloModule m\n\nENTRY %m.5 (p0.1: (f32[2], s32[])) -> f32[2] {\n"
              "  %p0.1 = (f32[2]{0}, s32[]) parameter(0)\n"
              "  %get-tuple-element.2 = f32[2]{0} get-tuple-element((f32[2]{0}, s32[]) %p0.1), index=0\n"
              "  ROOT %negate.3 = f32[2]{0} negate(f32[2]{0} %get-tuple-element.2)\n}\n")
    graph = parse_ir(hlo_as_ir(module))
    assert [(n.op, n.operands, n.attrs, n.root) for n in graph.nodes] == [
        ("xla::device_data", (), {}, None), ("hlo::get_tuple_element", ("%0",), {"index": "0"}, None),
        ("hlo::negate", ("%1",), {}, 0)]


def test_which_eager_executions_compiled_is_read_from_the_samples_end_times() -> None:
    """A compile ends before its op runs, and after the op before it ran: c c h c."""
    compiles, executions = [1.0, 2.0, 5.0], [1.5, 2.5, 3.5, 5.5]
    assert compiled_flags(4, 3, compiles, executions) == [True, True, False, True]
    # An execution still running (its sample not taken yet): the first ones compiled.
    assert compiled_flags(4, 3, compiles, executions[:3]) == [True, True, True, False]
    # A compile after every execution: the counts disagree, the totals are kept.
    assert compiled_flags(2, 1, [9.0], [1.0, 2.0]) == [True, False]


def test_an_eager_graph_is_placed_at_the_line_its_nodes_name_most(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\n\ndef batch():\n    return torch.randint(0, 10, (32,))\n")
    ir = ("IR {\n  %0 = s64[] prim::Constant(), value=0, location=train.py:4\n"
          "  %1 = s64[32]{0} aten::expand(%0), location=train.py:4\n  %2 = s64[] aten::add(%1), location=other.py:9\n}\n")
    assert built_at(ir, [(str(script), 12, "<module>")]) == (str(script), 4, "batch")
    assert built_at("IR {\n  %0 = s64[] prim::Constant(), value=0\n}\n", [(str(script), 12, "<module>")]) is None


def test_a_graph_loaded_from_the_persistent_cache_is_said_so_in_the_summary_the_list_and_the_details() -> None:
    """A hit on XLA's persistent cache (not had on PJRT CPU, whose client cannot load what
    it wrote): a cache hit in the run, counted as loaded, "load" in the execution list."""
    executions = [ex(0, graph="g", cache="hit", counters={"PersistentCacheHit": 1}),
                  ex(1, step=1, graph="g", cache="hit"),
                  ex(2, step=2, graph="h", cache="miss", counters={"PersistentCacheDeserializeFailure": 1}),
                  ex(3, step=3, graph="k", cache="miss", counters={"PersistentCacheMiss": 1})]
    cached = persistent_cache(executions)
    assert (cached.loaded, cached.load_failed, cached.not_cached) == ((0,), (2,), (3,))
    assert cached.text() == ("1 graph loaded from it, 1 compiled and written to it, 1 in it that XLA could not "
                             "load, compiled again")
    assert persistent_cache([ex(0), ex(1, cache="hit")]) is None
    cache_column = next(column for column in COLUMNS if column.title == "cache")
    assert [cache_column.cell(e) for e in executions] == ["load", "hit", "miss", "miss"]
    assert counters_text(executions[0]).startswith("its graph was loaded from XLA's persistent compile cache")
    assert not counters_text(executions[1]).startswith("its graph")


def test_copies_read_with_no_row_to_carry_them_go_with_the_next_execution() -> None:
    # The writer's thread reads XLA's copies once a second; in a window with no repeated
    # row they wait for the next execution a poll hands on, and none is counted twice.
    from lazyviz.backends.xla_counters import XlaCounters

    counters = XlaCounters(capture_ir=True)
    counters.last = {"CachedCompile": 4, "TransferFromDevice": 2}
    counters.carry({"TransferFromDevice": 3})
    counters.carry({"TransferFromDevice": 1, "TransferFromDeviceBytes": 4})
    moved = counters.moved_since_last({"CachedCompile": 5, "TransferFromDevice": 2})
    assert moved == {"CachedCompile": 1, "TransferFromDevice": 4, "TransferFromDeviceBytes": 4}
    assert counters.moved_since_last({"CachedCompile": 6, "TransferFromDevice": 2}) == {"CachedCompile": 1}
