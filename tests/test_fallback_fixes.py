"""Every lowered equivalent a fallback finding names is checked for real on torch's lazy
backend: the op falls back (LTC's own counter says so), the equivalent does not, and it
computes the same values. A fix sentence no test checks is a claim, not a fix."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from lazyviz.analysis.findings.fallback import CALL_FIXES, FALLBACK_FIXES

pytestmark = pytest.mark.torch

# op -> (inputs, the call that falls back, its equivalent from ops that lower), as Python
# source run on the lazy device. Inputs are made on the CPU with a fixed seed.
EQUIVALENTS = {
    "aten::median": ("x = torch.randn(65)",
                     "x.median()",
                     "torch.sort(x.flatten())[0][(x.numel() - 1) // 2]"),
    "aten::isnan": ("x = torch.randn(64); x[3] = float('nan')",
                    "torch.isnan(x)",
                    "x != x"),
    "aten::argmax": ("x = torch.randn(8, 16)",
                     "x.argmax(dim=1)",
                     "x.max(dim=1).indices"),
    "aten::where.self": ("a, b = torch.randn(64), torch.randn(64); cond = a > 0",
                         "torch.where(cond, a, b)",
                         "a.masked_fill(cond == 0, 0) + b.masked_fill(cond, 0)"),
    "aten::index.Tensor": ("x = torch.randn(16, 4); idx = torch.tensor([3, 1, 7])",
                           "x[idx]",
                           "x.index_select(0, idx)"),
    "aten::linalg_vector_norm": ("x = torch.randn(64)",
                                 "torch.linalg.vector_norm(x)",
                                 "(x * x).sum().sqrt()"),
    "aten::lerp.Scalar": ("a, b = torch.randn(64), torch.randn(64)",
                          "a.lerp(b, 0.1)",
                          "a.mul(1 - 0.1).add(b, alpha=0.1)"),
    "aten::lerp.Tensor": ("a, b, w = torch.randn(64), torch.randn(64), torch.rand(64)",
                          "a.lerp(b, w)",
                          "a + w * (b - a)"),
    "aten::kthvalue.values": ("x = torch.randn(4, 9)",
                              "x.kthvalue(3, dim=1).values",
                              "torch.sort(x, dim=1)[0].select(1, 3 - 1)"),
    "aten::mse_loss": ("out, target = torch.randn(8, 4), torch.randn(8, 4)",
                       "torch.nn.functional.mse_loss(out, target)",
                       "((out - target) ** 2).mean()"),
    "aten::isneginf": ("q, k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8); "
                       "mask = torch.ones(5, 5).tril().bool(); bias = torch.zeros(5, 5).masked_fill(~mask, -1e9)",
                       "torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
                       "torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias, dim=-1) @ v"),
}
# The same manual attention answers every op of SDPA's masked path.
SAME_AS = {"aten::all.dim": "aten::isneginf", "aten::where.self_out": "aten::isneginf",
           "aten::mse_loss_backward": "aten::mse_loss"}

PROBE = textwrap.dedent("""
    import math, sys
    import torch, torch._lazy, torch._lazy.ts_backend, torch._lazy.metrics as metrics
    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    setup, original, equivalent = sys.argv[1:4]
    scope = {"torch": torch, "math": math}
    exec(setup, scope)
    expected = eval(original, scope)
    def on_lazy(expression):
        lazy = {name: value.to("lazy") if isinstance(value, torch.Tensor) else value for name, value in scope.items()}
        torch._lazy.mark_step()
        metrics.reset()
        result = eval(expression, lazy)
        torch._lazy.mark_step()
        fallbacks = sorted(n for n in metrics.counter_names() if n.startswith("aten::") and metrics.counter_value(n))
        return result.cpu(), [n for n in fallbacks if n != "aten::_local_scalar_dense"]
    first, falls = on_lazy(original)
    second, stays = on_lazy(equivalent)
    same = torch.allclose(second.double(), expected.double(), atol=1e-5, equal_nan=True)
    print(repr((falls, stays, same)))
""")


def probe(op: str) -> tuple[list[str], list[str], bool]:
    result = subprocess.run([sys.executable, "-c", PROBE, *EQUIVALENTS[op]], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return eval(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("op", sorted(EQUIVALENTS))
def test_the_named_equivalent_lowers_and_computes_the_same(op: str) -> None:
    falls, stays, same = probe(op)
    assert op in falls, f"{op} no longer falls back on this torch: its fix sentence is out of date ({falls})"
    assert stays == [], f"the equivalent named for {op} falls back too: {stays}"
    assert same, f"the equivalent named for {op} computes other values"


def test_every_fix_that_names_an_equivalent_is_checked_here() -> None:
    assert set(FALLBACK_FIXES) <= set(EQUIVALENTS) | set(SAME_AS)
    assert set(CALL_FIXES) == {"clip_grad_norm_"}  # checked by test_real_programs' clipped training


def test_the_probe_tells_an_op_that_falls_back() -> None:
    # The check above can fail: an "equivalent" that is the op itself falls back.
    saved = EQUIVALENTS["aten::median"]
    EQUIVALENTS["aten::median"] = (saved[0], saved[1], saved[1])
    try:
        _, stays, _ = probe("aten::median")
    finally:
        EQUIVALENTS["aten::median"] = saved
    assert stays == ["aten::median"]


MASK_PROBE = textwrap.dedent("""
    import torch, torch._lazy, torch._lazy.ts_backend, torch._lazy.metrics as metrics
    from transformers import BertConfig, BertForSequenceClassification
    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    def model_with(attention):
        config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=64, num_labels=2,
                            attn_implementation=attention)
        torch.manual_seed(0)
        return BertForSequenceClassification(config).eval()
    ids = torch.randint(0, 100, (4, 12))
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[0, 8:] = 0
    expected = model_with(None)(input_ids=ids, attention_mask=mask).logits
    model = model_with("eager").to("lazy")
    additive = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    torch._lazy.mark_step()
    metrics.reset()
    logits = model(input_ids=ids.to("lazy"), attention_mask=additive.to("lazy")).logits
    torch._lazy.mark_step()
    ops = sorted(n for n in metrics.counter_names() if n.startswith("aten::") and metrics.counter_value(n))
    print(repr((ops, (logits.cpu() - expected).abs().max().item())))
""")


def test_the_advice_for_transformers_masks_computes_the_same_logits_without_a_sync() -> None:
    # LIBRARY_FIXES["transformers/masking_utils.py"]: eager attention and a 4D additive mask.
    result = subprocess.run([sys.executable, "-c", MASK_PROBE], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    ops, difference = eval(result.stdout.strip().splitlines()[-1])
    assert ops == [] and difference < 1e-5


CELL_PROBE = textwrap.dedent("""
    import sys
    import torch, torch._lazy, torch._lazy.ts_backend, torch._lazy.metrics as metrics
    torch._lazy.ts_backend.init()
    torch.manual_seed(0)
    kind = sys.argv[1]
    cell = (torch.nn.LSTMCell if kind == "LSTMCell" else torch.nn.GRUCell)(3, 5).double()
    x, h, c = torch.randn(4, 3).double(), torch.randn(4, 5).double(), torch.randn(4, 5).double()
    expected = cell(x, (h, c))[0] if kind == "LSTMCell" else cell(x, h)
    cell, x, h, c = cell.to("lazy"), x.to("lazy"), h.to("lazy"), c.to("lazy")
    try:
        cell(x, (h, c)) if kind == "LSTMCell" else cell(x, h)
        torch._lazy.mark_step()
        raised = ""
    except RuntimeError as error:
        raised = str(error)
    torch._lazy.mark_step()
    metrics.reset()
    n = cell.hidden_size
    if kind == "LSTMCell":  # as VIEW_WORKAROUNDS["LSTMCell.forward"] writes it
        gates = x @ cell.weight_ih.t() + cell.bias_ih + h @ cell.weight_hh.t() + cell.bias_hh
        i, f, g, o = (gates.narrow(1, k * n, n) for k in range(4))
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        out = torch.sigmoid(o) * torch.tanh(c)
    else:  # as VIEW_WORKAROUNDS["GRUCell.forward"] writes it
        gi = x @ cell.weight_ih.t() + cell.bias_ih
        gh = h @ cell.weight_hh.t() + cell.bias_hh
        r = torch.sigmoid(gi.narrow(1, 0, n) + gh.narrow(1, 0, n))
        z = torch.sigmoid(gi.narrow(1, n, n) + gh.narrow(1, n, n))
        new = torch.tanh(gi.narrow(1, 2 * n, n) + r * gh.narrow(1, 2 * n, n))
        out = (1 - z) * new + z * h
    torch._lazy.mark_step()
    ops = sorted(name for name in metrics.counter_names() if name.startswith("aten::") and metrics.counter_value(name))
    print(repr((raised, ops, (out.cpu() - expected).abs().max().item())))
""")


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_a_cell_that_cannot_run_here_is_written_from_ops_that_lower(kind: str) -> None:
    from lazyviz.analysis.failures import VIEW_WORKAROUNDS

    assert "gates.narrow" in VIEW_WORKAROUNDS["LSTMCell.forward"] and "(1 - z) * new + z * h" in \
        VIEW_WORKAROUNDS["GRUCell.forward"]
    result = subprocess.run([sys.executable, "-c", CELL_PROBE, kind], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    raised, ops, difference = eval(result.stdout.strip().splitlines()[-1])
    assert "appears to be a view operator" in raised  # the module itself cannot run here
    assert ops == [] and difference < 1e-9


ADAM_CHECK = """
import json, torch, torch._lazy, torch._lazy.ts_backend, torch._lazy.metrics as metrics
from torch.optim.optimizer import register_optimizer_step_post_hook
from lazyviz.fix.lowered_adam import LOWERED_ADAM
namespace = {"torch": torch}
exec(LOWERED_ADAM.format(torch="torch"), namespace)
lowered = namespace["with_lowered_step"]
torch._lazy.ts_backend.init()
hooked = []
register_optimizer_step_post_hook(lambda *args: hooked.append(1))

def train(cls, device, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to(device)
    optimizer = cls(model.parameters(), lr=0.01, **options)
    for _ in range(5):
        optimizer.zero_grad()
        model(torch.randn(16, 4).to(device)).pow(2).mean().backward()
        optimizer.step()
        if device == "lazy":
            torch._lazy.mark_step()
    state = optimizer.state_dict()["state"]
    return [p.detach().cpu() for p in model.parameters()], [t.cpu() for k in sorted(state) for t in state[k].values()]

found = []
for cls, options in [(torch.optim.Adam, {}), (torch.optim.AdamW, {"weight_decay": 0.1}),
                     (torch.optim.Adam, {"weight_decay": 0.1, "amsgrad": True, "betas": (0.8, 0.9)}),
                     (torch.optim.AdamW, {"amsgrad": True, "maximize": True})]:
    metrics.reset()
    train(cls, "lazy", **options)
    torch_falls_back = metrics.counter_value("aten::lerp.Scalar") or 0
    reference, reference_state = train(cls, "cpu", **options)
    metrics.reset()
    hooked.clear()
    params, state = train(lowered(cls), "lazy", **options)
    fallbacks = [n for n in metrics.counter_names() if n.startswith("aten::") and metrics.counter_value(n)]
    found.append({"torch_falls_back": torch_falls_back, "fallbacks": fallbacks, "hooks": len(hooked),
                  "params": max((a - b).abs().max().item() for a, b in zip(reference, params)),
                  "state": max((a - b).abs().max().item() for a, b in zip(reference_state, state))})
print(json.dumps(found))
"""


def test_adam_written_from_ops_that_lower_is_torchs_adam_without_a_fallback() -> None:
    """The lowered Adam/AdamW edit (fix/lowered_adam.py), for the options it reads: on the
    lazy device torch's own falls back (lerp.Scalar, per parameter per step), the lowered
    one does not, its parameters and state after 5 steps are torch's on the CPU, and
    torch's step hooks still run (lazyviz counts optimizer steps by them)."""
    done = subprocess.run([sys.executable, "-c", ADAM_CHECK], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    for case in json.loads(done.stdout):
        assert case["torch_falls_back"] >= 5 * 4, case  # 4 parameters, 5 steps
        assert case["fallbacks"] == [] and case["hooks"] == 5, case
        assert case["params"] < 1e-6 and case["state"] < 1e-6, case


# What both recurrent checks start with: the Lowered class of `kind` beside torch's.
LOWERED_BESIDE_TORCHS = """import json, sys, torch, torch._lazy, torch._lazy.ts_backend, torch._lazy.metrics as metrics
from lazyviz.fix.lowered_rnn import LOWERED
kind = sys.argv[1]
name, text = LOWERED[kind]
ns = {"torch": torch}
exec(text.format(torch="torch"), ns)
Lowered, Module = ns[name], getattr(torch.nn, kind)
torch._lazy.ts_backend.init()
found = []
"""
RECURRENT_CHECK = LOWERED_BESIDE_TORCHS + """\
for options, shape, given in [({"input_size": 5, "hidden_size": 6}, (7, 3, 5), False),
                              ({"input_size": 5, "hidden_size": 6, "batch_first": True, "num_layers": 2}, (3, 7, 5), True),
                              ({"input_size": 5, "hidden_size": 4, "bidirectional": True, "num_layers": 2,
                                "bias": False}, (7, 3, 5), False),
                              ({"input_size": 5, "hidden_size": 6}, (7, 5), False),
                              ({"input_size": 5, "hidden_size": 6, "nonlinearity": "relu"} if kind == "RNN" else
                               {"input_size": 5, "hidden_size": 6, "num_layers": 2}, (4, 2, 5), True)]:
    torch.manual_seed(0)
    reference = Module(**options)
    lowered = Lowered(**options)
    lowered.load_state_dict(reference.state_dict())
    x = torch.randn(*shape, requires_grad=True)
    d = 2 if options.get("bidirectional") else 1
    state = torch.randn(options.get("num_layers", 1) * d, shape[0] if options.get("batch_first") else shape[1],
                        options["hidden_size"])
    hx = ((state, state) if kind == "LSTM" else state) if given else None
    out, last = reference(x, hx)
    out.sum().backward()
    grad = x.grad.clone(); x.grad = None
    metrics.reset()
    lazy = lowered.to("lazy")
    xl = x.detach().to("lazy").requires_grad_()
    lazy_hx = None if hx is None else tuple(t.to("lazy") for t in hx) if kind == "LSTM" else hx.to("lazy")
    lo, lazy_last = lazy(xl, lazy_hx)
    lo.sum().backward()
    torch._lazy.mark_step()
    fallbacks = [n for n in metrics.counter_names() if n.startswith("aten::") and metrics.counter_value(n)]
    pairs = zip(last, lazy_last) if kind == "LSTM" else [(last, lazy_last)]
    found.append({"out": (out - lo.cpu()).abs().max().item(), "grad": (grad - xl.grad.cpu()).abs().max().item(),
                  "state": max((a - b.cpu()).abs().max().item() for a, b in pairs), "fallbacks": fallbacks})
print(json.dumps(found))
"""


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_a_recurrent_module_written_as_its_cell_over_the_time_steps_is_torchs_without_a_fallback(kind: str) -> None:
    """The lowered recurrent module edits (fix/lowered_rnn.py), for the options they read
    (layers, batch_first, bidirectional without bias, an unbatched input, a given initial
    state, RNN's relu): with torch's module's own weights loaded, the output, the last
    state and the input's gradient on the lazy device are torch's on the CPU, and nothing
    falls back (LTC's counters)."""
    done = subprocess.run([sys.executable, "-c", RECURRENT_CHECK, kind], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    cases = json.loads(done.stdout)
    assert len(cases) == 5
    for case in cases:
        assert case["fallbacks"] == [], case
        assert max(case["out"], case["state"], case["grad"]) < 1e-5, case


CELL_CHECK = LOWERED_BESIDE_TORCHS + """\
for options, shape, given, dtype in [({"input_size": 5, "hidden_size": 6}, (3, 5), True, torch.float32),
                                     ({"input_size": 1, "hidden_size": 4}, (2, 1), False, torch.float64),
                                     ({"input_size": 5, "hidden_size": 6, "bias": False}, (3, 5), True, torch.float32),
                                     ({"input_size": 5, "hidden_size": 6}, (5,), True, torch.float32)]:
    torch.manual_seed(0)
    reference = Module(**options).to(dtype)
    lowered = Lowered(**options).to(dtype)
    lowered.load_state_dict(reference.state_dict())
    x = torch.randn(*shape, dtype=dtype, requires_grad=True)
    state = torch.randn(*shape[:-1], options["hidden_size"], dtype=dtype)
    hx = ((state, state * 0.5) if kind == "LSTMCell" else state) if given else None
    out = reference(x, hx)
    outs = out if kind == "LSTMCell" else (out,)
    sum(o.sum() for o in outs).backward()
    grad = x.grad.clone()
    metrics.reset()
    lazy = lowered.to("lazy")
    xl = x.detach().to("lazy").requires_grad_()
    lazy_hx = None if hx is None else tuple(t.to("lazy") for t in hx) if kind == "LSTMCell" else hx.to("lazy")
    lazy_out = lazy(xl, lazy_hx)
    lazy_outs = lazy_out if kind == "LSTMCell" else (lazy_out,)
    sum(o.sum() for o in lazy_outs).backward()
    torch._lazy.mark_step()
    fallbacks = [n for n in metrics.counter_names() if n.startswith("aten::") and metrics.counter_value(n)]
    found.append({"out": max((a - b.cpu()).abs().max().item() for a, b in zip(outs, lazy_outs)),
                  "grad": (grad - xl.grad.cpu()).abs().max().item(), "fallbacks": fallbacks,
                  "dtype": str(lazy_outs[0].dtype)})
print(json.dumps(found))
"""


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_a_cell_written_from_ops_that_lower_is_torchs_without_a_fallback(kind: str) -> None:
    """The cell edits (fix/lowered_rnn.py; torch's LSTMCell and GRUCell kernels take a view
    that cannot run on TS): with the torch cell's weights loaded, the new state and the
    input's gradient on the lazy device are torch's on the CPU, for a given state or none,
    no bias, Double (time_sequence_prediction's) and an unbatched input; nothing falls back."""
    done = subprocess.run([sys.executable, "-c", CELL_CHECK, kind], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    cases = json.loads(done.stdout)
    assert len(cases) == 4 and cases[1]["dtype"] == "torch.float64"
    for case in cases:
        assert case["fallbacks"] == [], case
        assert max(case["out"], case["grad"]) < 1e-5, case
