"""Fingerprints of a capture's kernels (capture/fingerprinter.py), their statistics made a
block of samples at a time: the same values as one output at a time, never of data a later
write changed, and a failure raised with no fingerprint for the kernels it left without."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.capture import fingerprinter
from mnrt.capture.fingerprinter import Fingerprinter
from mnrt.format.fingerprints import SAMPLE, stats_of

DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint16", "bool"]
SIZES = [0, 1, 5, 1000, SAMPLE.runs * (SAMPLE.run + 1), SAMPLE.runs * (SAMPLE.run + 1) + 1, 70_001]


def _step(
    *bits: np.ndarray, direct: bool = True, repeats: np.ndarray | None = None
) -> SimpleNamespace:
    """What a Fingerprinter reads of a kernel: its outputs' storage, whether they hold the
    values as computed (`direct`), what it noted there, and the input whose bits the one
    output repeats (`repeats`: a reshape's or a copy's), if any."""
    d = SimpleNamespace(direct=direct)
    kdef = SimpleNamespace(same_bits=repeats is not None)
    values = [] if repeats is None else [repeats]
    bound = SimpleNamespace(outs=[(b, d) for b in bits], noted=None, kdef=kdef, values=values)
    return SimpleNamespace(bound=bound)


def _rows(f: Fingerprinter) -> list[list]:
    """The fingerprints a Fingerprinter handed out, a kernel a row."""
    ends = list(itertools.accumulate(f.counts))
    return [f.stats[end - n : end] for n, end in zip(f.counts, ends)]


@st.composite
def outputs(draw) -> tuple[np.ndarray, np.ndarray]:
    """(stored bits, values as computed): any dtype and size (empty and 0-d included), with
    NaN and infinities at drawn places, the values the bits themselves, a view of them, or
    an array of their own (as when the stored dtype differs)."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    size = draw(st.sampled_from(SIZES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1e-3, 1.0, 1e3]))
    values = rng.standard_normal(size) * (scale if dtype.kind == "f" else 50)
    bits = values.astype(dtype)
    if dtype.kind == "f" and size:
        for special in draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf]), max_size=4)):
            bits[draw(st.integers(0, size - 1))] = special
        if draw(st.booleans()):
            bits[:] = draw(st.sampled_from([np.nan, np.inf]))  # none finite
    if size == 1 and draw(st.booleans()):
        bits = bits.reshape(())
    elif size % 5 == 0 and size:
        bits = bits.reshape(5, -1)
    kind = draw(st.sampled_from(["same", "view", "own"]))
    if kind == "same":
        return bits, bits
    if kind == "view":
        return bits, bits.reshape(-1)
    return bits, bits.astype(np.float64 if dtype.kind == "f" else dtype)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(outputs(), min_size=1, max_size=6),
    st.integers(1, 3),
    st.integers(1, 3),
    st.booleans(),
    st.integers(1, 2),
)
def test_fingerprints_in_blocks_equal_those_of_one_output_at_a_time(
    produced, per_kernel, block_rows, direct, runs
):
    """Whatever the outputs, and however often the kernels run (the second time from what
    the first noted on them)."""
    expected = [stats_of(b, v).to_dict() for b, v in produced] * runs
    groups = [produced[i : i + per_kernel] for i in range(0, len(produced), per_kernel)]
    steps = [_step(*(b for b, _ in group), direct=direct) for group in groups]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fingerprinter, "BLOCK_ROWS", block_rows)
        f = Fingerprinter()
        for _ in range(runs):
            for step, group in zip(steps, groups):
                f.before(step)
                f.after(step, [v for _, v in group])
        f.done()
    assert [s.to_dict() for row in _rows(f) for s in row] == expected
    assert [len(row) for row in _rows(f)] == [len(g) for g in groups] * runs


def test_a_sample_whose_sum_overflows_is_summarised_as_one_output_alone():
    """Finite values whose float32 sum is not: the block takes such a row again alone,
    which gives the same figures (an infinite mean, which `close` does not compare)."""
    big = np.full(100_000, 3e38, np.float32)
    big[::7] = -1.0
    small = np.linspace(-1, 1, 100_000, dtype=np.float32)
    f = Fingerprinter()
    for a in (big, small):
        step = _step(a)
        f.before(step)
        f.after(step, [a])
    with np.errstate(over="ignore"):  # as the queue runs it
        f.done()
        expected = [stats_of(big, big), stats_of(small, small)]
    assert [row[0] for row in _rows(f)] == expected
    assert _rows(f)[0][0].mean == np.inf


def test_a_sample_is_summarised_as_it_was_when_the_kernel_wrote_it(monkeypatch):
    monkeypatch.setattr(fingerprinter, "BLOCK_ROWS", 2)
    a = np.arange(100_000, dtype=np.float32)
    expected = [stats_of(a + 1, a + 1), stats_of(a * 3, a * 3)]
    f = Fingerprinter()
    step = _step(a)
    for value in (a + 1, a * 3):  # two kernels write `a`; then the buffer changes again
        f.before(step)
        a[:] = value
        f.after(step, [a])
    a[:] = -1
    f.done()
    assert [row[0] for row in _rows(f)] == expected


@pytest.mark.parametrize("block_rows", [1, 100])
def test_a_reshape_of_the_output_before_it_takes_that_fingerprint(monkeypatch, block_rows):
    """Its bits are the same, so its fingerprint is, without a hash of its own; even where
    the storage they lie in changes before the samples are summarised."""
    monkeypatch.setattr(fingerprinter, "BLOCK_ROWS", block_rows)
    hashed = []
    real = fingerprinter.hash_contiguous
    monkeypatch.setattr(fingerprinter, "hash_contiguous", lambda b: hashed.append(b) or real(b))
    a = np.linspace(-1, 1, 100_000, dtype=np.float32)
    r = np.empty((400, 250), np.float32)
    c = np.empty(100_000, np.float32)
    f = Fingerprinter()
    for step, source in ((_step(a), a), (_step(r, repeats=a), a), (_step(c, repeats=r), r)):
        f.before(step)
        out = step.bound.outs[0][0]
        out[...] = source.reshape(out.shape)
        f.after(step, [out])
    expected = stats_of(a, a)
    a[:] = r[:] = c[:] = 7  # later kernels write all three
    f.done()
    assert len(hashed) == 1
    assert _rows(f) == [[expected]] * 3


def test_a_reshape_of_what_the_kernel_before_computed_wider_has_its_own_fingerprint():
    """The kernel before stored rounded bits and is summarised from its values as computed:
    the reshape's statistics are of the stored bits, so not that kernel's."""
    a = np.linspace(-1, 1, 100_000, dtype=np.float32)
    computed = np.linspace(-1, 1, 100_000) + 1e-9  # wider: the stored bits round it
    r = np.empty(100_000, np.float32)
    f = Fingerprinter()
    # A kernel writes `a` as computed, another writes it rounded, then a reshape reads it.
    for step, value in ((_step(a), a), (_step(a), computed), (_step(r, repeats=a), a)):
        f.before(step)
        f.after(step, [value])
        r[:] = a
    f.done()
    assert [row[0] for row in _rows(f)] == [stats_of(a, a), stats_of(a, computed), stats_of(r, r)]
    assert _rows(f)[1][0].mean != _rows(f)[2][0].mean


def _ping_pong(q, dev, kernels: int = 6, n: int = 40_000) -> None:
    """Kernels alternating between two large buffers (each written again two kernels
    later, as compiled models' buffers are), then a read."""
    rng = np.random.default_rng(0)
    bufs = {name: dev.create_buffer((n,), "float", name=name) for name in ("x", "s", "a", "b")}
    for name in ("x", "s"):
        q.enqueue_write_buffer(bufs[name], rng.standard_normal(n).astype(np.float32))
    program = [mnrt.Kernel("mul", ["x", "s"], ["a"])]
    for i in range(kernels - 1):
        src, dst = ("a", "b") if i % 2 == 0 else ("b", "a")
        program.append(mnrt.Kernel("relu" if i % 2 == 0 else "mul", [src, "s"][: 1 + i % 2], [dst]))
    q.enqueue_program(dev.create_program(program, name="ping_pong"), bufs)
    q.enqueue_read_buffer(bufs["a"])


def _capture(dev, kernels: int = 6) -> mnrt.LightBinary:
    q = dev.command_queue(0)
    mnrt.begin_capture(fingerprints=True)
    _ping_pong(q, dev, kernels)
    return mnrt.end_capture()


def test_a_capture_records_the_fingerprints_that_replay_computes(dev, monkeypatch):
    monkeypatch.setattr(fingerprinter, "BLOCK_ROWS", 100)  # summarised when done
    at_the_end = _capture(dev, kernels=9).fingerprints
    monkeypatch.setattr(fingerprinter, "BLOCK_ROWS", 2)
    binary = _capture(dev, kernels=9)
    assert len(binary.fingerprints) == 9 and binary.fingerprints == at_the_end
    located = mnrt.replay(binary, locate=True).locate
    assert (located.compared, located.divergent) == (9, 0)


def _broken(monkeypatch) -> None:
    def summaries(digests, samples):
        raise RuntimeError("summaries broke")

    monkeypatch.setattr(fingerprinter, "summaries", summaries)


@pytest.mark.parametrize("block_rows", [1, 2, 100])  # by a kernel's watch, or once done
def test_a_failed_summary_is_raised_and_its_kernels_have_no_fingerprint(monkeypatch, block_rows):
    monkeypatch.setattr(fingerprinter, "BLOCK_ROWS", block_rows)
    _broken(monkeypatch)
    small, large = np.ones(4, np.float32), np.ones(100_000, np.float32)
    f = Fingerprinter()
    with pytest.raises(RuntimeError, match="summaries broke"):
        try:  # as RunProgram.run watches a command
            for out in (small, large, small, large):
                step = _step(out)
                f.before(step)
                f.after(step, [out])
        except RuntimeError:
            f.done()
            raise
        f.done()
    assert len(_rows(f)) == 1  # the kernel before the first whose fingerprint failed


@pytest.mark.parametrize("block_rows", [1, 100])
def test_a_capture_command_fails_with_the_summarys_error(dev, monkeypatch, block_rows):
    monkeypatch.setattr(fingerprinter, "BLOCK_ROWS", block_rows)
    _broken(monkeypatch)
    q = dev.command_queue(0)
    mnrt.begin_capture(fingerprints=True)
    with pytest.raises(mnrt.DeviceExecutionError, match="summaries broke"):
        _ping_pong(q, dev)  # its read waits for the program
    with pytest.raises(mnrt.CaptureError, match="skipped"):  # the read behind it
        mnrt.end_capture()


@pytest.mark.parametrize("broken", [False, True])
def test_a_failing_kernel_raises_its_own_error(dev, monkeypatch, broken):
    """A kernel fails while the samples of the kernels before it wait to be summarised:
    they are, and the kernel's error is the one raised (with the summary's own failure
    noted on it)."""
    monkeypatch.setattr(fingerprinter, "BLOCK_ROWS", 100)
    if broken:
        _broken(monkeypatch)
    q = dev.command_queue(0)
    n = 40_000
    bufs = {name: dev.create_buffer((n,), "float", name=name) for name in ("x", "a", "g")}
    bufs["idx"] = dev.create_buffer((n,), "int32", name="idx")
    mnrt.begin_capture(fingerprints=True)
    q.enqueue_write_buffer(bufs["x"], np.ones(n, np.float32))
    q.enqueue_write_buffer(bufs["idx"], np.full(n, n + 5, np.int32))  # out of range
    program = [mnrt.Kernel("relu", ["x"], ["a"]), mnrt.Kernel("gather", ["a", "idx"], ["g"])]
    q.enqueue_program(dev.create_program(program, name="bad_gather"), bufs)
    with pytest.raises(mnrt.DeviceExecutionError) as raised:
        q.finish()
    message = str(raised.value)
    assert "index 40005 is out of range" in message
    assert ("the kernel watch failed: RuntimeError: summaries broke" in message) == broken
    mnrt.end_capture()


def _mixed(dev) -> mnrt.LightBinary:
    """A capture of one program run twice, whose kernels write outputs in place and not,
    stored as computed and rounded (half, float16), large and small, and reshape and copy
    what the kernel before them wrote (and what it did not)."""
    rng = np.random.default_rng(1)
    n = 200
    specs = {
        "x": ((n, n), "float"),
        "a": ((n, n), "float"),
        "t": ((n, n), "float"),
        "h": ((n, n), "half"),
        "f": ((n, n), "float16"),
        "i": ((n, n), "int32"),
        "s": ((3,), "float"),
        "r": ((3,), "float"),
        "ar": ((n * n,), "float"),
        "ac": ((n * n,), "float"),
        "hr": ((n * n,), "half"),
        "xr": ((n * n,), "float"),
        "rr": ((1, 3), "float"),
    }
    bufs = {k: dev.create_buffer(shape, dt, name=k) for k, (shape, dt) in specs.items()}
    program = dev.create_program(
        [
            mnrt.Kernel("relu", ["x"], ["a"]),
            mnrt.Kernel("reshape", ["a"], ["ar"], {"shape": [-1]}),
            mnrt.Kernel("copy", ["ar"], ["ac"]),
            mnrt.Kernel("transpose", ["a"], ["t"]),
            mnrt.Kernel("cast", ["t"], ["h"], {"to": "half"}),
            mnrt.Kernel("reshape", ["h"], ["hr"], {"shape": [-1]}),
            mnrt.Kernel("cast", ["x"], ["f"], {"to": "float16"}),
            mnrt.Kernel("reshape", ["x"], ["xr"], {"shape": [-1]}),
            mnrt.Kernel("cast", ["h"], ["i"], {"to": "int32"}),
            mnrt.Kernel("relu", ["s"], ["r"]),
            mnrt.Kernel("reshape", ["r"], ["rr"], {"shape": [1, 3]}),
        ],
        name="mixed",
    )
    q = dev.command_queue(0)
    mnrt.begin_capture(fingerprints=True)
    q.enqueue_write_buffer(bufs["x"], (rng.standard_normal((n, n)) * 100).astype(np.float32))
    q.enqueue_write_buffer(bufs["s"], np.array([-1, 2, np.inf], np.float32))
    for _ in range(2):
        q.enqueue_program(program, bufs)
    q.enqueue_read_buffer(bufs["i"])
    return mnrt.end_capture()


def test_what_a_kernel_notes_for_later_runs_fingerprints_as_the_general_way(dev, monkeypatch):
    """The general way hashes every output; what is noted spares the reshape and the copy
    of the relu's output (twice: the program runs twice) and nothing else."""
    hashed = []
    for name in ("hash_contiguous", "hash_of"):
        real = getattr(fingerprinter, name)
        monkeypatch.setattr(fingerprinter, name, lambda b, real=real: hashed.append(1) or real(b))
    kept = _mixed(dev)
    kept_hashes = len(hashed)
    monkeypatch.setattr(Fingerprinter, "_view", lambda self, bits, dtype: (bits, None))
    general = _mixed(dev)
    assert len(kept.fingerprints) == 22
    assert (kept_hashes, len(hashed) - kept_hashes) == (18, 22)
    assert [(f[:3], f.stats.to_dict()) for f in kept.fingerprints] == [
        (f[:3], f.stats.to_dict()) for f in general.fingerprints
    ]
    located = mnrt.replay(kept, locate=True).locate
    assert (located.compared, located.divergent) == (22, 0)
