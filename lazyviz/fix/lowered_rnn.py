"""nn.LSTM, nn.GRU and nn.RNN cannot run on TS as they are: their forward unbinds the
sequence into time steps, which falls back and hands them back on the host, and their
next op raises; nn.LSTMCell's and nn.GRUCell's kernel takes a view that cannot run there
at all. The edit makes each such module of the file its Lowered subclass (LSTMLowered,
GRULowered, RNNLowered, LSTMCellLowered, GRUCellLowered): the same parameters, so a state_dict loads into
torch's module and back, and a forward that is the module's cell over the time steps
from ops that lower (narrow, matmul, sigmoid, tanh, stack), for the options it reads:
layers, bias, batch_first, bidirectional, dropout between layers, an unbatched input, a
given initial state, RNN's nonlinearity. A projection or a packed sequence raises, said
in its message. tests/test_fallback_fixes.py checks each against torch's on the CPU."""
from __future__ import annotations

import ast

from lazyviz.analysis.findings import FailureDetails, Finding
from lazyviz.analysis.kinds import FindingKind
from lazyviz.fix.source import STAND_INS, Change, Context, Proposal, Source, define_beside

LOWERED_LSTM_NAME = "LSTMLowered"
LOWERED_LSTM = """\


class LSTMLowered({torch}.nn.LSTM):
    \"\"\"nn.LSTM from ops that lower on the lazy device: torch's forward unbinds the
    sequence into time steps, which falls back there and hands them back on the host.
    The same parameters, the same arithmetic: the cell over the time steps.\"\"\"

    def forward(self, input, hx=None):
        if self.proj_size or isinstance(input, {torch}.nn.utils.rnn.PackedSequence):
            raise NotImplementedError("LSTMLowered: no proj_size, no PackedSequence")
        batched = input.dim() == 3
        x = input if batched else input.unsqueeze(1)
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        steps, size, directions = x.size(0), self.hidden_size, 2 if self.bidirectional else 1
        if hx is None:
            zeros = x.new_zeros(self.num_layers * directions, x.size(1), size)
            hx = (zeros, zeros)
        elif not batched:
            hx = (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                suffix = f"_l{{layer}}" + ("_reverse" if direction else "")
                w_ih, w_hh = getattr(self, "weight_ih" + suffix), getattr(self, "weight_hh" + suffix)
                h, c = hx[0][layer * directions + direction], hx[1][layer * directions + direction]
                out = [None] * steps
                for t in (range(steps - 1, -1, -1) if direction else range(steps)):
                    gates = x.narrow(0, t, 1).squeeze(0) @ w_ih.t() + h @ w_hh.t()
                    if self.bias:
                        gates = gates + getattr(self, "bias_ih" + suffix) + getattr(self, "bias_hh" + suffix)
                    i, f, g, o = (gates.narrow(1, k * size, size) for k in range(4))
                    c = {torch}.sigmoid(f) * c + {torch}.sigmoid(i) * {torch}.tanh(g)
                    h = {torch}.sigmoid(o) * {torch}.tanh(c)
                    out[t] = h
                outputs.append({torch}.stack(out))
                last_h.append(h)
                last_c.append(c)
            x = {torch}.cat(outputs, dim=2) if directions == 2 else outputs[0]
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = {torch}.nn.functional.dropout(x, self.dropout, True)
        output = x.transpose(0, 1) if self.batch_first and batched else x
        h_n, c_n = {torch}.stack(last_h), {torch}.stack(last_c)
        if not batched:
            output, h_n, c_n = output.squeeze(1), h_n.squeeze(1), c_n.squeeze(1)
        return output, (h_n, c_n)
"""


GRU_LOWERED = """\


class GRULowered({torch}.nn.GRU):
    \"\"\"nn.GRU from ops that lower on the lazy device: torch's forward unbinds the
    sequence into time steps, which falls back there and hands them back on the host.
    The same parameters, the same arithmetic: the cell over the time steps.\"\"\"

    def forward(self, input, hx=None):
        if isinstance(input, {torch}.nn.utils.rnn.PackedSequence):
            raise NotImplementedError("GRULowered: no PackedSequence")
        batched = input.dim() == 3
        x = input if batched else input.unsqueeze(1)
        if self.batch_first and batched:
            x = x.transpose(0, 1)
        steps, size, directions = x.size(0), self.hidden_size, 2 if self.bidirectional else 1
        if hx is None:
            hx = x.new_zeros(self.num_layers * directions, x.size(1), size)
        elif not batched:
            hx = hx.unsqueeze(1)
        last_h = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                suffix = f"_l{{layer}}" + ("_reverse" if direction else "")
                w_ih, w_hh = getattr(self, "weight_ih" + suffix), getattr(self, "weight_hh" + suffix)
                h = hx[layer * directions + direction]
                out = [None] * steps
                for t in (range(steps - 1, -1, -1) if direction else range(steps)):
                    gi, gh = x.narrow(0, t, 1).squeeze(0) @ w_ih.t(), h @ w_hh.t()
                    if self.bias:
                        gi, gh = gi + getattr(self, "bias_ih" + suffix), gh + getattr(self, "bias_hh" + suffix)
                    r = {torch}.sigmoid(gi.narrow(1, 0, size) + gh.narrow(1, 0, size))
                    z = {torch}.sigmoid(gi.narrow(1, size, size) + gh.narrow(1, size, size))
                    n = {torch}.tanh(gi.narrow(1, 2 * size, size) + r * gh.narrow(1, 2 * size, size))
                    h = (1 - z) * n + z * h
                    out[t] = h
                outputs.append({torch}.stack(out))
                last_h.append(h)
            x = {torch}.cat(outputs, dim=2) if directions == 2 else outputs[0]
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = {torch}.nn.functional.dropout(x, self.dropout, True)
        output = x.transpose(0, 1) if self.batch_first and batched else x
        h_n = {torch}.stack(last_h)
        if not batched:
            output, h_n = output.squeeze(1), h_n.squeeze(1)
        return output, h_n
"""

# nn.RNN: GRU's forward with RNN's cell, one gate and its nonlinearity.
_GRU_CELL = """\
                    gi, gh = x.narrow(0, t, 1).squeeze(0) @ w_ih.t(), h @ w_hh.t()
                    if self.bias:
                        gi, gh = gi + getattr(self, "bias_ih" + suffix), gh + getattr(self, "bias_hh" + suffix)
                    r = {torch}.sigmoid(gi.narrow(1, 0, size) + gh.narrow(1, 0, size))
                    z = {torch}.sigmoid(gi.narrow(1, size, size) + gh.narrow(1, size, size))
                    n = {torch}.tanh(gi.narrow(1, 2 * size, size) + r * gh.narrow(1, 2 * size, size))
                    h = (1 - z) * n + z * h
"""
_RNN_CELL = """\
                    gates = x.narrow(0, t, 1).squeeze(0) @ w_ih.t() + h @ w_hh.t()
                    if self.bias:
                        gates = gates + getattr(self, "bias_ih" + suffix) + getattr(self, "bias_hh" + suffix)
                    h = {torch}.tanh(gates) if self.nonlinearity == "tanh" else {torch}.relu(gates)
"""
RNN_LOWERED = GRU_LOWERED.replace("GRU", "RNN").replace(_GRU_CELL, _RNN_CELL)

# The cells: torch's LSTMCell and GRUCell kernels take a view (as_strided) that has no
# lowering on TS and cannot fall back, so the cell cannot run there at all (RNNCell runs).
LSTM_CELL_LOWERED = """\


class LSTMCellLowered({torch}.nn.LSTMCell):
    \"\"\"nn.LSTMCell from ops that lower on the lazy device: torch's cell kernel takes a
    view (as_strided) that cannot run there. The same parameters, the same arithmetic.\"\"\"

    def forward(self, input, hx=None):
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            zeros = x.new_zeros(x.size(0), self.hidden_size)
            hx = (zeros, zeros)
        elif not batched:
            hx = (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
        h, c = hx
        gates = x @ self.weight_ih.t() + h @ self.weight_hh.t()
        if self.bias:
            gates = gates + self.bias_ih + self.bias_hh
        size = self.hidden_size
        i, f, g, o = (gates.narrow(1, k * size, size) for k in range(4))
        c = {torch}.sigmoid(f) * c + {torch}.sigmoid(i) * {torch}.tanh(g)
        h = {torch}.sigmoid(o) * {torch}.tanh(c)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))
"""
GRU_CELL_LOWERED = """\


class GRUCellLowered({torch}.nn.GRUCell):
    \"\"\"nn.GRUCell from ops that lower on the lazy device: torch's cell kernel takes a
    view (as_strided) that cannot run there. The same parameters, the same arithmetic.\"\"\"

    def forward(self, input, hx=None):
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if hx is None:
            hx = x.new_zeros(x.size(0), self.hidden_size)
        elif not batched:
            hx = hx.unsqueeze(0)
        gi, gh = x @ self.weight_ih.t(), hx @ self.weight_hh.t()
        if self.bias:
            gi, gh = gi + self.bias_ih, gh + self.bias_hh
        size = self.hidden_size
        r = {torch}.sigmoid(gi.narrow(1, 0, size) + gh.narrow(1, 0, size))
        z = {torch}.sigmoid(gi.narrow(1, size, size) + gh.narrow(1, size, size))
        n = {torch}.tanh(gi.narrow(1, 2 * size, size) + r * gh.narrow(1, 2 * size, size))
        h = (1 - z) * n + z * hx
        return h if batched else h.squeeze(0)
"""

# torch's recurrent modules -> (the Lowered class's name, its text to fill with {torch}).
LOWERED = {"LSTM": (LOWERED_LSTM_NAME, LOWERED_LSTM), "GRU": ("GRULowered", GRU_LOWERED),
           "RNN": ("RNNLowered", RNN_LOWERED), "LSTMCell": ("LSTMCellLowered", LSTM_CELL_LOWERED),
           "GRUCell": ("GRUCellLowered", GRU_CELL_LOWERED)}
CELLS = frozenset({"LSTMCell", "GRUCell"})
# The cell a crash names (the view op's call, analysis.failures' VIEW_WORKAROUNDS).
_CELL_CALLS = frozenset(f"{cell}.forward" for cell in CELLS)
# A module made from its class by name (word_language_model's `getattr(nn, rnn_type)(...)`):
# the class looked up, then its Lowered one, whichever it is.
BY_NAME = "lowered_rnn"
BY_NAME_FUNCTION = """\


def lowered_rnn(module_class):
    \"\"\"torch's nn.LSTM, nn.GRU or nn.RNN class -> its Lowered subclass above; another as it is.\"\"\"
    return {{{torch}.nn.LSTM: LSTMLowered, {torch}.nn.GRU: GRULowered, {torch}.nn.RNN: RNNLowered}}.get(
        module_class, module_class)
"""


def _constructions(source: Source) -> list[tuple[ast.Call, str]]:
    """`nn.LSTM(...)`, `torch.nn.GRU(...)`, `RNN(...)`, and `getattr(nn, name)(...)`: the
    class named on one line, with its name ("getattr" for the last)."""
    found = []
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call) or node.func.lineno != node.func.end_lineno:
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if name in LOWERED:
            found.append((node, name))
        elif _by_name(node.func):
            found.append((node, BY_NAME))
    return sorted(found, key=lambda pair: (pair[0].func.lineno, pair[0].func.col_offset))


def _by_name(func: ast.expr) -> bool:
    """`getattr(nn, ...)` or `getattr(torch.nn, ...)`: a module class looked up by its name."""
    return (isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr"
            and len(func.args) == 2 and ast.unparse(func.args[0]) in ("nn", "torch.nn"))


def _cell_crash(finding: Finding) -> bool:
    return isinstance(finding.details, FailureDetails) and finding.details.call in _CELL_CALLS


def propose(finding: Finding, context: Context) -> Proposal:
    """Each recurrent module made in the files of the stack where it raised (the model's
    file): the cells where a cell's view raised, else the modules."""
    files = dict.fromkeys(frame.file for frame in [*context.stack(finding), *([finding.frame] if finding.frame else [])])
    cells = _cell_crash(finding)
    for file in files:
        source = context.source(file)
        calls = [(call, name) for call, name in (_constructions(source) if source is not None else [])
                 if (name in CELLS) == cells]
        if source is None or not calls:
            continue
        changes: list[Change] = []
        for line in sorted({call.func.lineno for call, _ in calls}):
            text = source.line(line)
            for call, name in sorted(((c, n) for c, n in calls if c.func.lineno == line),
                                     key=lambda pair: -pair[0].func.col_offset):
                start, end = call.func.col_offset, call.func.end_col_offset or 0
                made_as = f"{BY_NAME}({text[start:end]})" if name == BY_NAME else LOWERED[name][0]
                text = text[:start] + made_as + text[end:]
            changes.append(Change(source.path, line, line + 1, (text,)))
        where = ", ".join(f"{source.at(change.start)}" for change in changes)
        names = {name for _, name in calls}
        kinds = sorted(set(LOWERED) - CELLS) if BY_NAME in names else sorted(names)
        defined = [change for name in kinds
                   for change in define_beside(source, LOWERED[name][0], LOWERED[name][1].format(torch="torch"))]
        if BY_NAME in names:
            defined += define_beside(source, BY_NAME, BY_NAME_FUNCTION.format(torch="torch"))
        changes += dict.fromkeys(defined)  # the file's header once
        modules = " and ".join(f"nn.{name}" for name in sorted(names - {BY_NAME}))
        modules = " and ".join(filter(None, [modules, "the module made by name" if BY_NAME in names else ""]))
        made = ", ".join(LOWERED[name][0] for name in kinds)
        why = ("its forward the cell's arithmetic from ops that lower (torch's cell kernel takes a view that "
               "cannot run here)" if cells else "its forward the cell over the time steps from ops that lower "
               "(torch's unbinds the sequence, which falls back here)")
        return Proposal(finding, f"the {modules} at {where} made as {made}, defined in {STAND_INS} beside it and "
                                 "imported in one line: the same "
                                 f"parameters, {why}", tuple(changes))
    which = "nn.LSTMCell and nn.GRUCell" if cells else "nn.LSTM, nn.GRU and nn.RNN"
    if any(any(LOWERED[name][0] in (context.source(f).text if context.source(f) else "")
               for name in LOWERED if (name in CELLS) == cells) for f in files):
        return Proposal(finding, f"every {which} there is made Lowered already, and the module still raises: a "
                                 "module made elsewhere", outlived=True)
    return Proposal(finding, f"{finding.fix} (no {which} made in the files of the stack: change it by hand)")


def answers(finding: Finding, context: Context) -> bool:
    return finding.kind == FindingKind.CRASH and isinstance(finding.details, FailureDetails) and (
        finding.details.module == "recurrent" or _cell_crash(finding))
