"""Recurrent layers: LSTM, GRU and RNN, unrolled over their sequence into device kernels.

The device runs a static graph and the sequence length is known at compile time, so the
recurrence becomes one block of kernels per step: a small GEMM of the hidden state against R
and the vector kernels of the gates, each with its own modelled time. The input projection
X W^T + biases does not depend on the state: it is one GEMM of every step's X, before the
steps.

The directions of a bidirectional op advance together: every value of the recurrence is
[1, directions, batch, size], and step k is time k of a forward direction and time
seq - 1 - k of a reverse one, so each step is one batched GEMM and one set of vector kernels
whatever the direction.

sequence_lens becomes a mask (step time < length) computed on the device, so it may be a
graph input: past its length a batch entry keeps its state and its Y is zero. A reverse
direction meets the masked steps first, so its state stays initial_h until the entry's last
valid step, which is the spec's reversal of each entry's valid steps.

Where the spec is silent or ambiguous this follows onnxruntime, the implementation exported
models are run with: clip bounds the inputs of the gates' activations but not the cell state
before LSTM's h; activation_alpha and activation_beta are consumed in activation order by the
activations that take them; RNN with one direction ignores a second activation (opset 1's
default listed two); a batch entry of length 0 gets zero final states, not its initial ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...builder import Symbol
from ..state import Attrs, Ctx, Invalid, Unsupported

_Fn = Callable[..., Symbol]  # (the op's _Unrolled, x, *parameters) -> f(x)


def _scale(rn: _Unrolled, x: Symbol, k: float) -> Symbol:
    return rn.cx.op("mul", x, rn.scalar(k, x))


def _affine(rn: _Unrolled, x: Symbol, alpha: float, beta: float) -> Symbol:
    return rn.cx.op("add", _scale(rn, x, alpha), rn.scalar(beta, x))


def _scaled_tanh(rn: _Unrolled, x: Symbol, alpha: float, beta: float) -> Symbol:
    return _scale(rn, rn.cx.op("tanh", _scale(rn, x, beta)), alpha)


# Per activation (lower case): the defaults of the alpha and beta it takes, and its kernels.
# None: no default, refused when missing; the spec's "as the ONNX operator" and onnxruntime's
# 0 disagree for these.
_ACTIVATIONS: dict[str, tuple[tuple[float | None, ...], _Fn]] = {
    "relu": ((), lambda rn, x: rn.cx.op("relu", x)),
    "tanh": ((), lambda rn, x: rn.cx.op("tanh", x)),
    "sigmoid": ((), lambda rn, x: rn.cx.op("sigmoid", x)),
    "softsign": ((), lambda rn, x: rn.cx.op("softsign", x)),
    "softplus": ((), lambda rn, x: rn.cx.op("softplus", x)),
    "leakyrelu": ((0.01,), lambda rn, x, a: rn.cx.op("leaky_relu", x, alpha=a)),
    "thresholdedrelu": ((None,), lambda rn, x, a: rn.cx.op("thresholded_relu", x, alpha=a)),
    "elu": ((1.0,), lambda rn, x, a: rn.cx.op("elu", x, alpha=a)),
    "hardsigmoid": ((0.2, 0.5), lambda rn, x, a, b: rn.cx.op("hard_sigmoid", x, alpha=a, beta=b)),
    "affine": ((None, None), _affine),
    "scaledtanh": ((None, None), _scaled_tanh),
}

_Activation = tuple[str, tuple[float, ...]]  # a name of _ACTIVATIONS and its parameters


def _activations(at: Attrs, default: tuple[str, ...], dirs: int) -> list[list[_Activation]]:
    """Each direction's activations (f, g, h in the spec's order) with their parameters."""
    names = at.get("activations") or list(default) * dirs
    alphas, betas = list(at.get("activation_alpha") or []), list(at.get("activation_beta") or [])
    if len(default) == 1 and dirs == 1 and len(names) == 2:
        names = names[:1]
    if len(names) != len(default) * dirs:
        raise Invalid(f"activations {names} has {len(names)} names; {dirs} direction(s) "
                      f"take {len(default)} each ({', '.join(default)})")  # fmt: skip
    acts = []
    for name in names:
        key = str(name).lower()
        if key not in _ACTIVATIONS:
            known = ", ".join(sorted(_ACTIVATIONS))
            raise Unsupported(f"activation {name} (the supported ones are {known})")
        params = []
        for default_value, given, what in zip(_ACTIVATIONS[key][0], (alphas, betas),
                                              ("activation_alpha", "activation_beta")):  # fmt: skip
            if not given and default_value is None:
                raise Unsupported(f"activation {name} without its {what}: the spec's default "
                                  f"and onnxruntime's differ; give {what} explicitly")  # fmt: skip
            params.append(float(given.pop(0)) if given else default_value)
        acts.append((key, tuple(params)))
    if alphas or betas:
        raise Unsupported(
            f"{len(alphas)} activation_alpha and {len(betas)} activation_beta value(s) left "
            "over after each activation took its own in order (as onnxruntime reads them); "
            "a list with a value for every activation, used or not, is not supported"
        )
    n = len(default)
    return [acts[d * n : (d + 1) * n] for d in range(dirs)]


class _Unrolled:
    """What LSTM, GRU and RNN share: the inputs checked and brought to time-major form, the
    input projection, the step mask, the activations, and the outputs in the model's layout."""

    def __init__(self, cx: Ctx, node: Any, at: Attrs, gates: int,
                 default_acts: tuple[str, ...]) -> None:  # fmt: skip
        self.cx, self.node = cx, node
        self._scalars: dict[tuple[float, str], Symbol] = {}
        self.layout = int(at.get("layout", 0))
        if self.layout not in (0, 1):
            raise Invalid(f"layout={self.layout}: 0 (time-major) or 1 (batch-major)")
        direction = at.get("direction", "forward")
        self.reverse = {"forward": [False], "reverse": [True],
                        "bidirectional": [False, True]}.get(direction)  # fmt: skip
        if self.reverse is None:
            raise Invalid(f"direction={direction!r}: forward, reverse or bidirectional")
        dirs = self.dirs = len(self.reverse)
        x = cx.sym(node.input[0])
        if not cx.dtype(x).is_float:
            raise Unsupported(f"X of {cx.dtype(x).name}: only floating types")
        if len(cx.shape(x)) != 3:
            raise Invalid(f"X of shape {cx.shape(x)} must be 3-D")
        if self.layout:
            x = cx.op("transpose", x, perm=[1, 0, 2])
        self.seq, self.batch, size = cx.shape(x)
        if self.seq == 0:
            raise Unsupported("an empty sequence (X has no time steps)")
        self.w, self.r = cx.sym(node.input[1]), cx.sym(node.input[2])
        hidden = self.hidden = cx.shape(self.r)[-1]
        declared = at.get("hidden_size")
        if declared is not None and int(declared) != hidden:
            raise Invalid(f"hidden_size={declared} but R of shape {cx.shape(self.r)} "
                          f"gives {hidden}")  # fmt: skip
        self._expect(self.w, "W", (dirs, gates * hidden, size))
        self._expect(self.r, "R", (dirs, gates * hidden, hidden))
        self.x2d = cx.reshape(x, (self.seq * self.batch, size))
        self.clip = at.get("clip")
        self.acts = _activations(at, default_acts, dirs)
        self.b = self._optional(3, "B", (dirs, 2 * gates * hidden))
        self.mask, self.started = self._mask()

    # --- inputs ---------------------------------------------------------------------------

    def _expect(self, s: Symbol, what: str, shape: tuple[int, ...]) -> None:
        if self.cx.shape(s) != shape:
            raise Invalid(f"{what} of shape {self.cx.shape(s)}, expected {shape}")

    def _optional(self, index: int, what: str, shape: tuple[int, ...]) -> Symbol | None:
        """An optional input (an empty or missing name: absent) checked against `shape`."""
        if len(self.node.input) <= index or not self.node.input[index]:
            return None
        s = self.cx.sym(self.node.input[index])
        self._expect(s, what, shape)
        return s

    def initial(self, index: int, what: str) -> Symbol:
        """initial_h or initial_c as [1, directions, batch, hidden]: zeros when absent."""
        cx, dirs, batch, hidden = self.cx, self.dirs, self.batch, self.hidden
        full = (1, dirs, batch, hidden)
        want = (batch, dirs, hidden) if self.layout else (dirs, batch, hidden)
        s = self._optional(index, what, want)
        if s is None:
            return cx.op("fill", shape=list(full), value=0.0, dtype=cx.dtype(self.x2d).name)
        if self.layout:
            s = cx.op("transpose", s, perm=[1, 0, 2])
        return cx.reshape(s, full)

    def biases(self) -> tuple[Symbol | None, Symbol | None]:
        """B's input and recurrence halves, Wb and Rb, each [directions, gates * hidden]."""
        if self.b is None:
            return None, None
        n = self.cx.shape(self.b)[1] // 2
        return self.cols(self.b, 0, n), self.cols(self.b, n, 2 * n)

    def peepholes(self, index: int, count: int) -> list[Symbol] | None:
        """LSTM's P as its `count` vectors, each [1, directions, 1, hidden]."""
        p = self._optional(index, "P", (self.dirs, count * self.hidden))
        if p is None:
            return None
        p = self.cx.reshape(p, (1, self.dirs, 1, count * self.hidden))
        return [self.cols(p, j * self.hidden, (j + 1) * self.hidden) for j in range(count)]

    def _mask(self) -> tuple[Symbol | None, Symbol | None]:
        """From sequence_lens: bool [seq, directions, batch, 1] in step order, whether step k
        of each direction is within each batch entry's length; and bool [1, 1, batch, 1],
        whether the entry's length is above 0 (onnxruntime gives a length of 0 zero final
        states, not the initial ones). None for what no length needs."""
        cx, seq = self.cx, self.seq
        name = self.node.input[4] if len(self.node.input) > 4 else ""
        if not name:
            return None, None
        known = np.asarray(cx.consts[name]) if cx.is_const(name) else None
        if known is not None:
            if ((known < 0) | (known > seq)).any():
                raise Invalid(f"sequence_lens {known.tolist()} must lie in 0..{seq}")
            if (known == seq).all():
                return None, None
        lens = cx.sym(name)
        if not cx.dtype(lens).is_integer or cx.shape(lens) != (self.batch,):
            raise Invalid(f"sequence_lens of {cx.dtype(lens).name} {cx.shape(lens)} must be an "
                          f"integer vector of the batch size {self.batch}")  # fmt: skip
        steps = np.arange(seq)
        times = np.stack([steps[::-1] if rev else steps for rev in self.reverse], axis=1)
        it = cx.dtype(lens).storage
        lens = cx.reshape(lens, (1, 1, self.batch, 1))
        mask = cx.op("less", cx.param(times.reshape(seq, self.dirs, 1, 1).astype(it)), lens)
        if known is not None and known.all():
            return mask, None
        return mask, cx.op("greater", lens, cx.param(np.array(0, it)))

    # --- building blocks ------------------------------------------------------------------

    def cols(self, s: Symbol, start: int, stop: int) -> Symbol:
        """s[..., start:stop]."""
        axis = len(self.cx.shape(s)) - 1
        return self.cx.op("slice", s, starts=[start], ends=[stop], axes=[axis])

    def rows(self, s: Symbol, start: int, stop: int) -> Symbol:
        """A [directions, rows, n] weight's rows start:stop, for every direction."""
        return self.cx.op("slice", s, starts=[start], ends=[stop], axes=[1])

    def _step_order(self, s: Symbol, time_axis: int, dir_axis: int) -> Symbol:
        """s with the time axis of each reverse direction flipped: between time order and
        step order, both ways."""
        cx, seq = self.cx, self.seq
        parts = []
        for d, rev in enumerate(self.reverse):
            starts, ends, axes, steps = [], [], [], []
            if self.dirs > 1:
                starts, ends, axes, steps = [d], [d + 1], [dir_axis], [1]
            if rev:
                starts, ends = [*starts, seq - 1], [*ends, -seq - 1]
                axes, steps = [*axes, time_axis], [*steps, -1]
            parts.append(cx.op("slice", s, starts=starts, ends=ends, axes=axes, steps=steps)
                         if axes else s)  # fmt: skip
        return parts[0] if len(parts) == 1 else cx.op("concat", *parts, axis=dir_axis)

    def project(self, w: Symbol, bias: Symbol | None) -> Symbol:
        """X W^T + bias for every step and direction in one GEMM, as [seq, directions,
        batch, n] in step order, for a [directions, n, input] w and a [directions, n] bias."""
        cx, dirs, seq, batch = self.cx, self.dirs, self.seq, self.batch
        n = cx.shape(w)[1]
        c = () if bias is None else (cx.reshape(bias, (dirs, 1, n)),)
        y = cx.op("gemm", self.x2d, w, *c, trans_b=True)
        y = self._step_order(cx.reshape(y, (dirs, seq, batch, n)), time_axis=1, dir_axis=0)
        if dirs == 1:
            return cx.reshape(y, (seq, 1, batch, n))
        return cx.op("transpose", y, perm=[1, 0, 2, 3])

    def at_step(self, xw: Symbol, k: int, start: int, stop: int) -> Symbol:
        """Step k's columns start:stop of a projection, [1, directions, batch, n]."""
        return self.cx.op("slice", xw, starts=[k, start], ends=[k + 1, stop], axes=[0, 3])

    def gemm(self, h: Symbol, r: Symbol, c: Symbol | None) -> Symbol:
        """h R^T + c for each direction: h is [1, directions, batch, hidden]."""
        return self.cx.op("gemm", h, r, *(() if c is None else (c,)), trans_b=True)

    def act(self, x: Symbol, slot: int, clip: bool = True) -> Symbol:
        """Activation `slot` (f, g, h) of each direction on x, after clip: once for all
        directions when they agree, else on each direction's slice."""
        cx = self.cx
        if clip and self.clip is not None:
            x = cx.op("clip", x, min=-float(self.clip), max=float(self.clip))
        acts = [a[slot] for a in self.acts]
        if all(a == acts[0] for a in acts):
            return _apply(self, x, acts[0])
        parts = [_apply(self, cx.op("slice", x, starts=[d], ends=[d + 1], axes=[1]), a)
                 for d, a in enumerate(acts)]  # fmt: skip
        return cx.op("concat", *parts, axis=1)

    def scalar(self, value: float, like: Symbol) -> Symbol:
        """A scalar parameter in `like`'s dtype, one for the whole op however many steps use
        it (a parameter per step is a buffer and a write per step in the binary)."""
        key = (float(value), self.cx.dtype(like).name)
        if key not in self._scalars:
            self._scalars[key] = self.cx.param(np.array(value), like=like)
        return self._scalars[key]

    def keep(self, k: int, *states: tuple[Symbol, Symbol]) -> list[Symbol]:
        """Of each (new, old) state, the new where step k is within the sequence, else the
        old."""
        if self.mask is None:
            return [new for new, _ in states]
        m = self.cx.op("slice", self.mask, starts=[k], ends=[k + 1], axes=[0])
        return [self.cx.op("where", m, new, old) for new, old in states]

    # --- outputs --------------------------------------------------------------------------

    def outputs(self, ys: list[Symbol], finals: list[Symbol]) -> list:
        """Y (the steps' hidden states) and the final states in the model's layout, each
        only when the model asks for it (None for the others)."""
        cx, node = self.cx, self.node
        wanted = [i < len(node.output) and bool(node.output[i]) for i in range(1 + len(finals))]
        y = None
        if wanted[0]:
            y = cx.op("concat", *ys, axis=0) if len(ys) > 1 else ys[0]
            if self.mask is not None:
                y = cx.op("where", self.mask, y, self.scalar(0, y))
            y = self._step_order(y, time_axis=0, dir_axis=1)
            if self.layout:
                y = cx.op("transpose", y, perm=[2, 0, 1, 3])
        outs = [y]
        for s, asked in zip(finals, wanted[1:]):
            if asked and self.started is not None:
                s = cx.op("where", self.started, s, self.scalar(0, s))
            s = cx.reshape(s, (self.dirs, self.batch, self.hidden)) if asked else None
            outs.append(cx.op("transpose", s, perm=[1, 0, 2]) if asked and self.layout else s)
        return outs


def _apply(rn: _Unrolled, x: Symbol, act: _Activation) -> Symbol:
    name, params = act
    return _ACTIVATIONS[name][1](rn, x, *params)


def lstm(cx: Ctx, node: Any, at: Attrs) -> list:
    """i, o, f, c gates; peepholes P (p_i, p_o, p_f) and input_forget (f = 1 - i)."""
    rn = _Unrolled(cx, node, at, 4, ("Sigmoid", "Tanh", "Tanh"))
    coupled = bool(at.get("input_forget", 0))
    hs = rn.hidden
    wb, rb = rn.biases()
    xw = rn.project(rn.w, None if wb is None else cx.op("add", wb, rb))
    h, c = rn.initial(5, "initial_h"), rn.initial(6, "initial_c")
    peep = rn.peepholes(7, 3)
    ys = []
    for k in range(rn.seq):
        gates = rn.gemm(h, rn.r, rn.at_step(xw, k, 0, 4 * hs))
        i, o, f, g = (rn.cols(gates, j * hs, (j + 1) * hs) for j in range(4))
        if peep is not None:
            i = cx.op("add", i, cx.op("mul", peep[0], c))
            f = cx.op("add", f, cx.op("mul", peep[2], c))
        i = rn.act(i, 0)
        f = cx.op("sub", rn.scalar(1, i), i) if coupled else rn.act(f, 0)
        c_new = cx.op("add", cx.op("mul", f, c), cx.op("mul", i, rn.act(g, 1)))
        if peep is not None:
            o = cx.op("add", o, cx.op("mul", peep[1], c_new))
        h_new = cx.op("mul", rn.act(o, 0), rn.act(c_new, 2, clip=False))
        ys.append(h_new)
        h, c = rn.keep(k, (h_new, h), (c_new, c))
    return rn.outputs(ys, [h, c])


def gru(cx: Ctx, node: Any, at: Attrs) -> list:
    """z, r, h gates. With linear_before_reset the reset gate scales H R_h^T + Rb_h, so Rb_h
    stays out of the projection and is added by the step's GEMM."""
    rn = _Unrolled(cx, node, at, 3, ("Sigmoid", "Tanh"))
    linear = bool(at.get("linear_before_reset", 0))
    hs = rn.hidden
    wb, rb = rn.biases()
    rb_h = bias = None
    if wb is not None and linear:
        zr = cx.op("add", rn.cols(wb, 0, 2 * hs), rn.cols(rb, 0, 2 * hs))
        bias = cx.op("concat", zr, rn.cols(wb, 2 * hs, 3 * hs), axis=1)
        rb_h = cx.reshape(rn.cols(rb, 2 * hs, 3 * hs), (1, rn.dirs, 1, hs))
    elif wb is not None:
        bias = cx.op("add", wb, rb)
    xw = rn.project(rn.w, bias)
    r_zr, r_h = rn.rows(rn.r, 0, 2 * hs), rn.rows(rn.r, 2 * hs, 3 * hs)
    h = rn.initial(5, "initial_h")
    ys = []
    for k in range(rn.seq):
        zr = rn.act(rn.gemm(h, r_zr, rn.at_step(xw, k, 0, 2 * hs)), 0)
        z, r = rn.cols(zr, 0, hs), rn.cols(zr, hs, 2 * hs)
        x_h = rn.at_step(xw, k, 2 * hs, 3 * hs)
        if linear:
            pre = cx.op("add", x_h, cx.op("mul", r, rn.gemm(h, r_h, rb_h)))
        else:
            pre = rn.gemm(cx.op("mul", r, h), r_h, x_h)
        cand = rn.act(pre, 1)
        h_new = cx.op("add", cand, cx.op("mul", z, cx.op("sub", h, cand)))
        ys.append(h_new)
        (h,) = rn.keep(k, (h_new, h))
    return rn.outputs(ys, [h])


def rnn(cx: Ctx, node: Any, at: Attrs) -> list:
    """H = f(X W^T + H R^T + Wb + Rb)."""
    rn = _Unrolled(cx, node, at, 1, ("Tanh",))
    wb, rb = rn.biases()
    xw = rn.project(rn.w, None if wb is None else cx.op("add", wb, rb))
    h = rn.initial(5, "initial_h")
    ys = []
    for k in range(rn.seq):
        h_new = rn.act(rn.gemm(h, rn.r, rn.at_step(xw, k, 0, rn.hidden)), 0)
        ys.append(h_new)
        (h,) = rn.keep(k, (h_new, h))
    return rn.outputs(ys, [h])
