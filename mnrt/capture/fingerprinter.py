"""Fingerprinting kernel outputs while a capture records (see format/fingerprints.py).

A fingerprint costs a pass over the output (the hash) and a few over a sample of it (the
statistics). The hash must be taken before a later kernel writes the buffer again
(compiled programs do, two kernels later), so it is taken at once, while the output is
still in cache, and so is a copy of the sample, into a row of a block of samples. The
statistics wait until the block is full: three reductions of a whole block cost about
what one output's three would, which matters on models of many cheap kernels. For the
same reason the views a kernel's fingerprints read (its outputs' storage, and the sample
there) are made at its first run under a capture and kept on the bound kernel
(`BoundKernel.noted`) for every later one: making them at every run was a fifth to a
third of what each output cost beyond its hash (DenseNet-121, ShuffleNet; O1). A reshape or
copy of the output the kernel before it wrote (`KernelDef.same_bits`) holds the same bits,
so it takes that output's fingerprint rather than a hash and a sample of its own.

Everything runs on the thread running the queue. A thread of its own for the statistics
or the hash measured slower, not faster: the emulated kernels keep both cores of a 2-core
host busy (numpy's BLAS threads spin between products), and every handoff of the GIL
between two threads costs more than the work handed off.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..device.dtypes import DType
from ..device.emulator import BoundKernel
from ..format.fingerprints import (
    SAMPLE,
    Sample,
    Stats,
    hash_contiguous,
    hash_of,
    summaries,
    summary,
)
from ..host.commands import Command, KernelWatch
from ..host.program import Step

# Samples per block: a block of float32 samples (512 KiB) stays in a core's cache (blocks of
# 256 samples of format 1.2's size, 16 MiB, made captures slower, not faster; blocks of 16
# spent more on calls than on reductions).
BLOCK_ROWS = 64


class Fingerprinter(KernelWatch):
    """The KernelWatch of one command while a capture records fingerprints: the stats of
    every output of every kernel the command runs (`stats`, in order) and how many outputs
    each kernel has (`counts`), both complete once the command is done."""

    __slots__ = ("_blocks", "_counts", "_hashes", "_last", "_same", "_sample", "_stats", "counts",
                 "stats")  # fmt: skip

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.stats: list[Stats] = []
        self._counts: list[int] = []  # outputs of each kernel fingerprinted so far
        self._hashes: list[int] = []  # of every output, in order
        self._stats: list[Stats | None] = []  # of every output; None until summarised
        self._blocks: dict[np.dtype, _Block] = {}  # samples not yet summarised, by dtype
        self._sample = SAMPLE
        # Where the output last fingerprinted lies (see `_where`), or None where its
        # statistics are not of its stored bits; and the outputs whose fingerprint is an
        # earlier one's (output, the earlier), for `done` to fill in.
        self._last: tuple | None = None
        self._same: list[tuple[int, int]] = []

    @staticmethod
    def factory(groups: list[Fingerprinter]):
        def watch(cmd: Command, logged: bool) -> Fingerprinter | None:
            if not logged:  # a host call of the capture's own (unobserved): not in the log
                return None
            w = Fingerprinter()
            groups.append(w)  # under the queue's lock, in the order of the log
            return w

        return watch

    def after(self, step: Step, results: Sequence[np.ndarray]) -> None:
        # Runs once per kernel output: a model of many small kernels feels every call here.
        # What stays the same from run to run (each output's storage and the view of its
        # sample) is worked out at a kernel's first run under a capture, and kept on it.
        bound = step.bound
        noted = bound.noted
        if noted is None or noted[0] is not self._sample:
            noted = bound.noted = self._note(bound)
        _, outs, source = noted
        hashes = self._hashes
        if source is not None and source == self._last:
            # A reshape (or copy) of what the kernel before it wrote: the same bits, so the
            # same fingerprint. A fifth of a channel-shuffling model's outputs (ShuffleNet).
            self._same.append((len(hashes), len(hashes) - 1))
            hashes.append(hashes[-1])
            self._stats.append(None)
            self._last = outs[0][2]
            self._counts.append(1)
            return
        for (bits, runs, where), values in zip(outs, results):
            # The sample is of the stored bits where they hold the values as computed.
            if runs is None or not (values is bits or values.dtype == bits.dtype):
                self._one(bits, values)
                continue
            hashes.append(hash_contiguous(bits))
            self._take(runs, bits.dtype)
            self._last = where
        self._counts.append(len(results))  # not before: a kernel whose fingerprint failed

    def _note(self, bound: BoundKernel) -> tuple:
        """What `after` keeps on a kernel: the sample it was worked out for, each output's
        storage, the view of its sample there (see `_view`) and where it lies, and where
        the input lies whose bits the output repeats (`KernelDef.same_bits`), if any."""
        outs = [(*self._view(bits, dtype), _where(bits)) for bits, dtype in bound.outs]
        source = None
        if bound.kdef.same_bits and len(outs) == 1 and outs[0][1] is not None:
            (x,) = bound.values
            if x is not None and x.flags.c_contiguous and x.dtype == outs[0][0].dtype:
                source = _where(x)
        return self._sample, outs, source

    def _view(self, bits: np.ndarray, dtype: DType) -> tuple[np.ndarray, np.ndarray | None]:
        """An output's storage and the view of its sample there, or None where the sample
        is taken at each run: from a small output (summarised whole), from storage the
        hash cannot read in place, or from values that storage rounds (`dtype` not
        direct)."""
        sample = self._sample
        if not (dtype.direct and bits.flags.c_contiguous and bits.size >= sample.least):
            return bits, None
        return bits, sample.runs_of(bits.reshape(-1))

    def _one(self, bits: np.ndarray, values: np.ndarray) -> None:
        """Fingerprint one output the general way (see `after`)."""
        digest = hash_of(bits)
        self._hashes.append(digest)
        self._last = None  # summarised from values that may not be its stored bits
        if values.size < self._sample.least:
            self._stats.append(summary(digest, values.reshape(-1)))
        else:
            self._take(self._sample.runs_of(values.reshape(-1)), values.dtype)

    def _take(self, runs: np.ndarray, dtype: np.dtype) -> None:
        """Copy the sample of the output last hashed into its dtype's block, and summarise
        the block once it is full."""
        block = self._blocks.get(dtype)
        if block is None:
            block = self._blocks[dtype] = _Block(dtype, self._sample)
        block.take(runs, len(self._stats))
        self._stats.append(None)
        if len(block.outputs) == BLOCK_ROWS:
            block.summarise(self._hashes, self._stats)

    def done(self) -> None:
        """Summarise the blocks not yet full and hand out the kernels' fingerprints: those
        of every kernel up to the first whose fingerprint is missing (a kernel that failed,
        or whose fingerprint did)."""
        try:
            for block in self._blocks.values():
                block.summarise(self._hashes, self._stats)
            for output, earlier in self._same:
                self._stats[output] = self._stats[earlier]
        finally:
            self._blocks.clear()
            stats, counts = self._stats, self._counts
            kept, at = len(counts), sum(counts)
            missing = stats.index(None) if None in stats else at
            if missing < at:  # a kernel without its fingerprint: those of the kernels before
                kept, at = 0, 0
                while at + counts[kept] <= missing:
                    at += counts[kept]
                    kept += 1
            self.counts, self.stats = counts[:kept], stats[:at]


def _where(storage: np.ndarray) -> tuple:
    """Where an array's bits lie, and as what: two views of the same bytes as the same
    dtype are alike (a kernel's output storage and the next kernel's input view of it)."""
    return storage.__array_interface__["data"][0], storage.nbytes, storage.dtype.str


class _Block:
    """Samples of outputs of one dtype, one a row (`rows`: each shaped as the sample's
    runs), with the index of each output among the command's (`outputs`)."""

    __slots__ = ("outputs", "rows", "samples")

    def __init__(self, dtype: np.dtype, sample: Sample) -> None:
        self.samples = np.empty((BLOCK_ROWS, sample.size), dtype)
        self.rows = list(self.samples.reshape(BLOCK_ROWS, sample.runs, sample.run))
        self.outputs: list[int] = []

    def take(self, runs: np.ndarray, output: int) -> None:
        """Copy the sample of output `output` (see Sample.runs_of) into the next row (by
        assignment: np.copyto's dispatch costs a third of the copy)."""
        self.rows[len(self.outputs)][...] = runs
        self.outputs.append(output)

    def summarise(self, hashes: list[int], stats: list[Stats | None]) -> None:
        n, outputs = len(self.outputs), self.outputs
        self.outputs = []
        for i, s in zip(outputs, summaries([hashes[i] for i in outputs], self.samples[:n])):
            stats[i] = s
