"""Locating the first kernel whose output diverges from the capture (`mnrt run --locate`).

A binary captured with fingerprints (format 1.2) holds a summary of every kernel output as
the capture computed it. A locating replay fingerprints every kernel again as it runs and
compares: the first kernel whose output bits differ is the first divergent one. Its
statistics then tell "different rounding" (min, max, mean and non-finite count within
tolerance of the capture's: a different BLAS, another summation order) from "wrong"; the
first wrong kernel is the one a user wants, and its inputs and output are saved as .npy in
a directory of its own, next to a float64 re-evaluation of the kernel on the same inputs.
Kernels before it matched bit for bit, so its inputs are what the capture's were unless the
binary's own data (a weight it writes) differs.

"First" is in the binary's command order (then kernel order within a command), not in the
order kernels happen to finish: the queues of several devices run at once, and a kernel
that reads what another device computed was enqueued after the kernel that computed it
(through the copy and the event it waits on), so command order is the order of cause.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device.dtypes import DOUBLE, FLOATS
from ..device.kernels import Out, TensorSpec, chain
from ..device.tolerance import stats_tolerance
from ..errors import MnrtError
from ..format import strict_json
from ..format.files import write_atomically
from ..format.fingerprints import Stats, close, hash_of, summary
from ..host.commands import KernelWatch
from .plan import Plan, program_kernel

if TYPE_CHECKING:
    from ..host.program import Step
    from .transport.base import Transport

ROUNDING, WRONG = "different rounding", "wrong"
# The statistics of an output are held to this many times what the tolerance model lets
# them move on another host (device/tolerance.py, stats_tolerance) before it counts as
# wrong: the model's bound is probabilistic, and a verdict of "wrong" should be sure.
ROUNDING_SLACK = 4.0


@dataclass
class KernelSite:
    """One kernel execution, as `--locate` names it."""

    command: int  # index of the EnqueueProgram or ReplayTrace that ran it
    kernel: int  # its position among the kernels that command ran
    program: str
    program_kernel: int  # its position in its program
    op: str
    inputs: list[dict]  # {slot, buffer, shape, dtype} per operand
    outputs: list[dict]
    verdict: str = ""  # ROUNDING or WRONG
    captured: list[Stats] = field(default_factory=list)
    replayed: list[Stats] = field(default_factory=list)

    def describe(self) -> str:
        def ops(xs: list[dict]) -> str:
            return ", ".join(
                (o["slot"] if o["slot"] == o["buffer"] else f"{o['slot']}='{o['buffer']}'")
                + f":{o['dtype']}{o['shape']}"
                for o in xs
            )

        return (
            f"command {self.command} program '{self.program}' kernel {self.program_kernel} "
            f"'{self.op}' ({ops(self.inputs)} -> {ops(self.outputs)})"
        )

    def to_dict(self) -> dict:
        return {
            "command": self.command,
            "kernel": self.kernel,
            "program": self.program,
            "program_kernel": self.program_kernel,
            "op": self.op,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "verdict": self.verdict,
            "captured": [s.to_dict() for s in self.captured],
            "replayed": [s.to_dict() for s in self.replayed],
        }


@dataclass
class LocateResult:
    """What a locating replay found: the first divergent kernel (bits differ), the first
    wrong one (statistics out of tolerance), how many kernels were compared and differed,
    and where the wrong (else the divergent) kernel's arrays were saved."""

    fingerprints: int  # fingerprints the binary holds
    compared: int = 0
    divergent: int = 0
    first_divergent: KernelSite | None = None
    first_wrong: KernelSite | None = None
    failed: KernelSite | None = None  # the kernel a device error stopped, if one did
    saved_to: str | None = None  # the first divergent kernel's arrays
    wrong_saved_to: str | None = None  # the first wrong kernel's

    @property
    def located(self) -> KernelSite | None:
        """The first kernel whose output diverges from the capture's."""
        return self.first_divergent

    def summary(self) -> str:
        if self.failed is not None:
            return f"locate: the device failed in {self.failed.describe()}"
        if not self.fingerprints:
            return (
                "locate: the binary records no kernel fingerprints (capture with fingerprints=True)"
            )
        if self.first_divergent is None:
            return (
                f"locate: all {self.compared} kernel outputs match their fingerprints bit for bit"
            )
        first = self.first_divergent
        lines = [
            f"locate: {self.divergent} of {self.compared} kernel outputs differ from the capture",
            f"  first divergent kernel ({first.verdict}): {first.describe()}",
        ]
        if self.saved_to:
            lines.append(f"    its inputs and outputs are saved in {self.saved_to}")
        if self.first_wrong is not None and self.first_wrong is not first:
            lines.append(f"  first wrong kernel: {self.first_wrong.describe()}")
            if self.wrong_saved_to:
                lines.append(f"    its inputs and outputs are saved in {self.wrong_saved_to}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "fingerprints": self.fingerprints,
            "compared": self.compared,
            "divergent": self.divergent,
            "first_divergent": self.first_divergent and self.first_divergent.to_dict(),
            "first_wrong": self.first_wrong and self.first_wrong.to_dict(),
            "failed": self.failed and self.failed.to_dict(),
            "saved_to": self.saved_to,
            "wrong_saved_to": self.wrong_saved_to,
        }


class Locator:
    """Compares every kernel a replay runs with the binary's fingerprints, from the threads
    of every queue at once. One per loop; `watch(command index)` is the queues' KernelWatch
    factory (see Executor); `finish` saves the arrays of the kernels it found."""

    def __init__(
        self,
        plan: Plan,
        save_dir: str | Path | None = None,
        rtol: float | None = None,
        atol: float | None = None,
    ) -> None:
        self.plan = plan
        self.expected = plan.fingerprints
        self.sample = plan.binary.fingerprint_sample  # the elements the capture summarised
        self.result = LocateResult(len(plan.binary.fingerprints))
        self.save_dir = Path(save_dir) if save_dir is not None else None
        self.rtol, self.atol = rtol, atol
        self._lock = threading.Lock()
        # The arrays to save, of the first divergent and the first wrong kernel found so
        # far: (site, step, inputs as it read them, outputs).
        self._kept: dict[str, tuple[KernelSite, Step, list[np.ndarray], list[np.ndarray]]] = {}

    def watch(self, command: int) -> _Watch:
        return _Watch(self, command)

    def could_be_first(self, command: int, kernel: int) -> bool:
        """Whether a kernel could still be the first wrong one (else nothing it read
        needs keeping)."""
        return _earlier((command, kernel), self.result.first_wrong)

    def failed(self, command: int, kernel: int, step: Step) -> None:
        """The kernel that raised a device error (the first in command order, when kernels
        of several queues failed)."""
        site = self._site(command, kernel, step)
        with self._lock:
            if _earlier((command, kernel), self.result.failed):
                self.result.failed = site

    def _site(self, command: int, kernel: int, step: Step) -> KernelSite:
        program, position = program_kernel(self.plan, command, kernel)
        k = program.kernels[position] if program is not None else None
        in_slots = list(k.inputs) if k is not None else [f"in{i}" for i in range(len(step.ins))]
        out_slots = list(k.outputs) if k is not None else [f"out{i}" for i in range(len(step.outs))]
        return KernelSite(
            command,
            kernel,
            program.name if program is not None else "",
            position,
            step.kdef.name,
            [_operand(s, b) for s, b in zip(in_slots, step.ins)],
            [_operand(s, b) for s, b in zip(out_slots, step.outs)],
        )

    def _tolerance(
        self, key: tuple[int, int], step: Step, j: int, term_scale: float | None
    ) -> tuple[float, float]:
        """How far output `j`'s statistics may move before the kernel counts as wrong: the
        caller's rtol / atol, else what the tolerance model lets rounding move it (so a
        kernel that sums nothing, a cast or a copy, is wrong wherever it diverges, a half
        output does not get a quarter of its scale, and an output of tiny terms is not
        held to what terms near one would allow)."""
        errors = self.plan.output_errors.get(key)
        error = errors[j] if errors is not None and j < len(errors) else 0.0
        rtol, atol = stats_tolerance(step.outs[j].dtype, error, term_scale)
        return (
            self.rtol if self.rtol is not None else rtol * ROUNDING_SLACK,
            self.atol if self.atol is not None else atol * ROUNDING_SLACK,
        )

    def _within(
        self,
        key: tuple[int, int],
        step: Step,
        got: Sequence[Stats],
        want: Sequence[Stats],
        before: list[np.ndarray] | None,
    ) -> bool:
        """Whether every output's statistics are within tolerance: first held to the
        output's own scale alone (no absolute floor), which rounding nearly always meets,
        and only where one is not, with the floor the size of the kernel's terms gives:
        that takes a pass over its inputs (`before`: an in-place kernel's, as it read
        them, when kept)."""
        terms: list[float | None] = []  # the kernel's term scale, once worked out
        for j, (g, e) in enumerate(zip(got, want)):
            if close(g, e, *self._tolerance(key, step, j, 0.0)):
                continue
            if not terms:
                terms.append(_term_scale(step, before))
            if not close(g, e, *self._tolerance(key, step, j, terms[0])):
                return False
        return True

    def check(self, w: _Watch, step: Step, results: Sequence[np.ndarray]) -> None:
        key = (w.command, w.kernel)
        want = self.expected.get(key)
        if want is None:
            return
        r = self.result
        # The hashes first: the statistics only where a kernel diverges (on a replay that
        # matches, they were most of what locating cost).
        digests = [hash_of(b.peek()) for b in step.outs]
        same = len(digests) == len(want) and all(d == e.hash for d, e in zip(digests, want))
        with self._lock:
            r.compared += 1
            if same:
                return
            r.divergent += 1
            if not (_earlier(key, r.first_divergent) or _earlier(key, r.first_wrong)):
                return
        got = [summary(d, self.sample.of(v)) for d, v in zip(digests, results)]
        before = w.inputs_before  # an in-place kernel's, as it read them (when kept)
        wrong = len(got) != len(want) or not self._within(key, step, got, want, before)
        site = self._site(*key, step)
        site.verdict, site.captured, site.replayed = WRONG if wrong else ROUNDING, want, got
        arrays = None
        if self.save_dir is not None:  # copies: later kernels write these buffers again
            inputs = before if before is not None else [_values(b) for b in step.ins]
            arrays = (site, step, inputs, [_values(b) for b in step.outs])
        with self._lock:
            if _earlier(key, r.first_divergent):
                r.first_divergent = site
                if arrays is not None:
                    self._kept["divergent"] = arrays
            if wrong and _earlier(key, r.first_wrong):
                r.first_wrong = site
                if arrays is not None:
                    self._kept["wrong"] = arrays

    def finish(self, transport: Transport | None = None) -> None:
        """Save the arrays of the first divergent and the first wrong kernel (once the
        replay has run, or stopped: which kernel is first is known only then). Over a
        transport of several ranks, each found the first among its own devices' kernels:
        rank 0 learns which are first of all, and the rank that ran each saves it."""
        r = self.result
        kept, self._kept = self._kept, {}
        if transport is not None and transport.size > 1:
            parts = transport.gather((r.compared, r.divergent, r.first_divergent, r.first_wrong))
            if parts is not None:
                r.compared, r.divergent = sum(p[0] for p in parts), sum(p[1] for p in parts)
                r.first_divergent = _first(p[2] for p in parts)
                r.first_wrong = _first(p[3] for p in parts)
            firsts = transport.broadcast({"divergent": _key(r.first_divergent),
                                          "wrong": _key(r.first_wrong)})  # fmt: skip
            kept = {k: v for k, v in kept.items() if _key(v[0]) == firsts[k]}
        saved: set[int] = set()
        for site, step, inputs, outputs in kept.values():
            if id(site) not in saved:
                saved.add(id(site))
                self._save(site, step, inputs, outputs)
        if self.save_dir is not None:
            if r.first_divergent is not None:
                r.saved_to = str(self._folder(r.first_divergent))
            if r.first_wrong is not None:
                r.wrong_saved_to = str(self._folder(r.first_wrong))

    def _folder(self, site: KernelSite) -> Path:
        return self.save_dir / f"command{site.command}_kernel{site.kernel}_{site.op}"

    def _save(
        self, site: KernelSite, step: Step, inputs: list[np.ndarray], outputs: list[np.ndarray]
    ) -> None:
        """The kernel's inputs (as it read them), its outputs as this replay computed them
        and as a float64 re-evaluation of the kernel on those inputs computes them, and the
        site with both fingerprints as JSON."""
        folder = self._folder(site)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise MnrtError(f"cannot save the located kernel in {folder}: {e.strerror}") from None
        for o, a in zip(site.inputs, inputs):
            _save_npy(folder / f"input.{_file_part(o['slot'])}.npy", a)
        for o, a in zip(site.outputs, outputs):
            _save_npy(folder / f"output.{_file_part(o['slot'])}.replayed.npy", a)
        reference, why = _reference(step, inputs)
        doc = site.to_dict()
        doc["reference"] = why
        for o, a in zip(site.outputs, reference or ()):
            _save_npy(folder / f"output.{_file_part(o['slot'])}.reference.npy", a)
        write_atomically(folder / "site.json", strict_json.dumps(doc, indent=1).encode())


def _key(site: KernelSite | None) -> tuple[int, int] | None:
    return None if site is None else (site.command, site.kernel)


def _first(sites: Iterable[KernelSite | None]) -> KernelSite | None:
    """The first of `sites` in command order (None when there are none)."""
    return min((s for s in sites if s is not None), key=_key, default=None)


def _earlier(key: tuple[int, int], site: KernelSite | None) -> bool:
    """Whether the kernel at `key` (command, kernel) comes before `site` in command order
    (before none at all)."""
    return site is None or key < (site.command, site.kernel)


class _Watch(KernelWatch):
    """The KernelWatch of one command of a locating replay (which keeps looking until it
    has found a wrong kernel), on the thread of the queue running it."""

    __slots__ = ("command", "current", "inputs_before", "kernel", "locator")

    def __init__(self, locator: Locator, command: int) -> None:
        self.locator, self.command, self.kernel = locator, command, 0
        self.inputs_before: list[np.ndarray] | None = None
        self.current: Step | None = None  # the kernel running, until it has run

    def before(self, step: Step) -> None:
        """An in-place kernel overwrites an input: keep the inputs while it may be one to
        save (until a wrong kernel before it has been found)."""
        self.current = step
        self.inputs_before = None
        locator = self.locator
        if locator.save_dir is not None and locator.could_be_first(self.command, self.kernel):
            outs = {id(b) for b in step.outs}
            if any(id(b) in outs for b in step.ins):
                self.inputs_before = [_values(b) for b in step.ins]

    def after(self, step: Step, results: Sequence[np.ndarray]) -> None:
        self.current = None
        try:
            self.locator.check(self, step, results)
        finally:
            self.kernel += 1

    def done(self) -> None:
        """A kernel that began and did not run to its end raised the command's error."""
        if self.current is not None:
            self.locator.failed(self.command, self.kernel, self.current)
            self.current = None


def _operand(slot: str, buf: Any) -> dict:
    return {"slot": slot, "buffer": buf.name, "shape": list(buf.shape), "dtype": buf.dtype.name}


def _term_scale(step: Step, before: list[np.ndarray] | None) -> float | None:
    """How large the terms are that the kernel's outputs sum (KernelDef.term_scale), from
    the largest finite magnitude of each input it read (`before`, or what its buffers hold
    now: an in-place kernel's output stands in for the input it overwrote)."""
    inputs = before if before is not None else [_values(b) for b in step.ins]
    scales = []
    for v in inputs:
        magnitudes = np.abs(v.astype(np.float64, copy=False))
        scales.append(float(np.max(magnitudes, where=np.isfinite(magnitudes), initial=0.0)))
    return step.kdef.term_scale(scales, step.bound.attrs)


def _values(buf: Any) -> np.ndarray:
    """A buffer's contents as a host read returns them (half as float32)."""
    return buf.dtype.from_storage(np.array(buf.peek()))


def _file_part(name: str) -> str:
    """A slot name (the binary chose it) as part of a file name: no separators or dots
    runs, short enough for any file system."""
    return re.sub(r"[^\w#+=-]", "_", name)[:100] or "_"


def _save_npy(path: Path, array: np.ndarray) -> None:
    data = io.BytesIO()
    np.save(data, array, allow_pickle=False)
    write_atomically(path, data.getbuffer())


def _reference(step: Step, inputs: list[np.ndarray]) -> tuple[list[np.ndarray] | None, str]:
    """The kernel evaluated in float64 on its inputs (floating inputs widened), or None
    and why not (a kernel without a double form). A chain is evaluated as made for the
    widened inputs, every step in float64: its casts between float types, the roundings
    to half a mixed compile puts in, keep float64 too."""
    kdef, attrs = step.kdef, step.bound.attrs
    wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in inputs]
    specs = [TensorSpec(b.shape, DOUBLE if b.dtype.is_float else b.dtype) for b in step.ins]
    if kdef.name == chain.NAME:
        attrs = chain.retargeted(attrs, specs, DOUBLE, FLOATS)
    try:
        outs = kdef.infer(specs, attrs)
        targets = [Out(o.shape, DOUBLE if DOUBLE in o.dtypes else o.dtypes[0], None) for o in outs]
        with np.errstate(all="ignore"):  # overflow gives inf, as on the device's queues
            results = kdef.compute(wide, attrs, targets)
    except MnrtError as e:
        return None, f"no float64 reference: {e}"
    return [np.asarray(r) for r in results], "the kernel evaluated in float64 on the saved inputs"
