"""Per-kernel fingerprints: what a capture remembers of each kernel's outputs (since 1.2).

A fingerprint is xxh3-64 of an output's stored bits plus summary statistics of its values
(min, max and mean of the finite ones, and how many are not finite; of a large output, over
a fixed sample). The hash tells whether a replay computed exactly the same bits; the
statistics let a tolerant comparison tell "rounded differently" (same statistics within
tolerance) from "wrong". Recording one costs one pass over the output (the hash).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import xxhash

from .strict_json import json_value

_NAN = float("nan")


class Stats(NamedTuple):
    """One output's fingerprint without its place."""

    hash: int
    min: float
    max: float
    mean: float
    nonfinite: int

    def to_dict(self) -> dict:
        return {
            "hash": f"{self.hash:016x}",
            "min": json_value(self.min),
            "max": json_value(self.max),
            "mean": json_value(self.mean),
            "nonfinite": self.nonfinite,
        }


class Fingerprint(NamedTuple):
    """Where one fingerprint belongs: the command that ran the kernel (an EnqueueProgram or
    ReplayTrace index), the kernel's position among the kernels that command ran, and the
    output's position among the kernel's outputs."""

    command: int
    kernel: int
    output: int
    stats: Stats


class Sample(NamedTuple):
    """Which elements of a large output its statistics summarise: `runs` evenly spaced runs
    of `run` consecutive elements. The hash covers every bit and is the one full pass over
    an output; a summary that tells rounding from a wrong result needs no more than a
    sample (min, max and a sum over all of it were three more passes, which made
    fingerprinting cost more than its budget of capture time). A binary records the sample
    its capture took (format 1.3), and a replay summarises the same elements."""

    runs: int
    run: int

    @property
    def size(self) -> int:
        return self.runs * self.run

    @property
    def least(self) -> int:
        """The fewest elements of an output summarised over this sample (`self.size` of
        them) rather than whole."""
        return self.runs * (self.run + 1)

    def covers(self, size: int) -> bool:
        """Whether an output of `size` elements is summarised over this sample."""
        return size >= self.least

    def of(self, values: np.ndarray) -> np.ndarray:
        """The elements of an output that its statistics summarise, as one contiguous 1-D
        array (numpy reduces a strided 2-D view several times slower than a copy of it):
        all of them, or those of the sample when it `covers` them."""
        flat = values.reshape(-1)
        if not self.covers(flat.size):
            return flat
        return np.ascontiguousarray(self.runs_of(flat)).reshape(-1)

    def runs_of(self, flat: np.ndarray) -> np.ndarray:
        """The sample of a 1-D output it `covers`, a run a row: a strided view of the
        output, to copy before the output changes."""
        step = flat.size // self.runs
        return flat[: step * self.runs].reshape(self.runs, step)[:, : self.run]


# What captures take (a binary records its sample since format 1.3, so a replay reads each
# binary's own). Format 1.2 took 64 runs of 256 (the schema's defaults): on the light models
# of many small kernels, copying and summarising those 16384 elements of every output cost
# 1-5 points of capture time more than 2048 elements spread as widely did; runs of 16 (a
# cache line of float32) at the same 64 places cost 0.2-0.8 points less again than runs of
# 32 (benchmarks/bench_tools.py, "1.2smp"; the fingerprints' CPU time, ShuffleNet,
# DenseNet-121 and SqueezeNet at O1), the hash of every bit being the rest.
SAMPLE = Sample(64, 16)


def stats_of(bits: np.ndarray, values: np.ndarray, sample: Sample = SAMPLE) -> Stats:
    """The fingerprint of an output: `bits` as stored (hashed whole), `values` as computed
    (summarised: min, max and mean of the finite ones and the count of the others, over all
    of them or over `sample`)."""
    return summary(hash_of(bits), sample.of(values))


def hash_of(bits: np.ndarray) -> int:
    """xxh3-64 of an output's stored bits (xxhash lets other threads run meanwhile when
    they are more than 64 KiB)."""
    return hash_contiguous(bits if bits.flags.c_contiguous else bits.copy())


# `hash_of` of bits known to be C-contiguous, for a caller that checked once for many runs.
hash_contiguous = xxhash.xxh3_64_intdigest


def summary(digest: int, sample: np.ndarray) -> Stats:
    """The fingerprint of an output whose stored bits hash to `digest` and whose summarised
    elements (see `Sample.of`) are `sample`."""
    if sample.size == 0:
        return Stats(digest, _NAN, _NAN, _NAN, 0)
    if sample.dtype.kind == "b":
        sample = sample.view(np.uint8)
    # The ufuncs' own reductions: ndarray.min and friends add a Python call each, which
    # tells on a model of many small kernels. NaN propagates and infinities show.
    lo, hi = np.minimum.reduce(sample), np.maximum.reduce(sample)
    if sample.dtype.kind != "f" or (math.isfinite(lo) and math.isfinite(hi)):
        return Stats(digest, float(lo), float(hi), _mean(sample), 0)
    finite = sample[np.isfinite(sample)]
    bad = int(sample.size - finite.size)
    if finite.size == 0:
        return Stats(digest, _NAN, _NAN, _NAN, bad)
    return Stats(digest, float(finite.min()), float(finite.max()), _mean(finite), bad)


def summaries(digests: Sequence[int], samples: np.ndarray) -> list[Stats]:
    """`summary` of several outputs at once, their samples the rows of `samples` (2-D, of
    one dtype): three reductions of the whole (numpy sums each row pairwise, as it does one
    row alone, so every figure is the same to the bit), one output at a time only where
    the row holds values that are not finite."""
    if samples.dtype.kind == "b":
        samples = samples.view(np.uint8)
    lo = np.minimum.reduce(samples, axis=1)
    hi = np.maximum.reduce(samples, axis=1)
    with np.errstate(invalid="ignore"):  # inf - inf in a row summarised again below
        total = np.add.reduce(samples, axis=1, dtype=_sum_dtype(samples.dtype))
    means = (total.astype(np.float64) / samples.shape[1]).tolist()
    floats = samples.dtype.kind == "f"
    if not floats:
        lo, hi = lo.astype(np.float64), hi.astype(np.float64)
    out = list(map(Stats, digests, lo.tolist(), hi.tolist(), means, itertools.repeat(0)))
    if floats:
        for i in np.flatnonzero(~(np.isfinite(lo) & np.isfinite(hi))).tolist():
            out[i] = summary(digests[i], samples[i])
    return out


def _mean(values: np.ndarray) -> float:
    return float(np.add.reduce(values, dtype=_sum_dtype(values.dtype))) / values.size


def _sum_dtype(dtype: np.dtype) -> type | None:
    """What a sample is summed in: float32 and float64 pairwise in their own precision (a
    few ulps over the sample: plenty for a summary, and faster than widening); narrower
    floats in float32 (a float16 sample of values past 4 overflows float16: binaries
    captured before this was so hold an infinite mean, which `close` cannot compare, the
    mean being of finite values only); integers in float64, which cannot wrap."""
    if dtype.kind != "f":
        return np.float64
    return np.float32 if dtype.itemsize < 4 else None


_place = operator.itemgetter(0, 1, 2)  # a Fingerprint's (command, kernel, output)


def to_columns(fingerprints: Sequence[Fingerprint]) -> dict[str, Sequence]:
    """The KernelFingerprint tables' fields, a column each (object-API attribute names),
    in (command, kernel, output) order, for `LightBinary.build` (a compiled model has a
    fingerprint per kernel output: many hundreds)."""
    ordered = sorted(fingerprints, key=_place)
    if not ordered:
        return {}
    command, kernel, output, stats = zip(*ordered)
    return _columns(command, kernel, output, stats)


def columns_of_commands(commands: Sequence[tuple[int, Sequence[int], Sequence[Stats]]]) -> dict:
    """`to_columns` of the fingerprints of whole commands, each (its index, how many outputs
    each of its kernels has, and their outputs' stats in order), the commands in order:
    what a capture records, made into columns without sorting. Lists a kernel at a time:
    at the end of a capture each distinct numpy call costs tens of microseconds (the
    kernels and the build before it leave the caches cold), which made columns of numpy
    repeats and cumsums cost twice these loops (SqueezeNet, ShuffleNet, DenseNet-121 at
    O1)."""
    command: list[int] = []
    kernel: list[int] = []
    output: list[int] = []
    stats: list[Stats] = []
    for index, counts, printed in commands:
        for k, n in enumerate(counts):
            command += [index] * n
            kernel += [k] * n
            output += range(n)
        stats += printed
    if not stats:
        return {}
    return _columns(command, kernel, output, stats)


def _columns(command: Sequence, kernel: Sequence, output: Sequence, stats: Sequence) -> dict:
    digest, lo, hi, mean, nonfinite = zip(*stats)
    return {
        "command": command,
        "kernel": kernel,
        "output": output,
        "hash": digest,
        "min": lo,
        "max": hi,
        "mean": mean,
        "nonfinite": nonfinite,
    }


def close(a: Stats, b: Stats, rtol: float, atol: float) -> bool:
    """Whether two fingerprints' statistics agree within tolerance: the same number of
    non-finite elements, and min, max and mean each within `atol + rtol * scale` where
    the scale is the captured output's largest magnitude (so a mean near zero of values
    near one is not held to a relative error it cannot meet). An infinite mean is an
    overflowed sum (see `_sum_dtype`): it is not compared."""
    if a.nonfinite != b.nonfinite:
        return False
    scale = max(abs(b.min), abs(b.max)) if math.isfinite(b.min) else 0.0
    pairs = [(a.min, b.min), (a.max, b.max)]
    if not (math.isinf(a.mean) or math.isinf(b.mean)):  # see _sum_dtype
        pairs.append((a.mean, b.mean))
    for x, y in pairs:
        if math.isnan(x) or math.isnan(y):
            if math.isnan(x) != math.isnan(y):
                return False
            continue
        if abs(x - y) > atol + rtol * scale:
            return False
    return True
