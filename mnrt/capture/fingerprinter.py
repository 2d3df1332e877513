"""Fingerprinting kernel outputs while a capture records (see format/fingerprints.py).

A fingerprint costs a pass over the output (the hash) and a few over a sample of it (the
statistics): on a model of cheap kernels, as much as a tenth of the capture when the thread
running the queue does it all. So that thread does only what cannot wait, copying out the
sample; a thread of the command's own (started at its first large output, joined when the
command ends) hashes and summarises while the next kernels run. xxhash and numpy's
reductions let other threads run while they work, so the two overlap.

What the background thread reads must not change under it: an output's stored bits stay
as the kernel left them until a later kernel of the command writes that buffer (`before`
waits for the output's fingerprint first) or the command ends (`done` waits for all of
them, before the queue runs anything else). The sample is the thread's own copy, since
the values as computed may be a view of any buffer. Small outputs are fingerprinted at
once: xxhash keeps other threads waiting while it hashes less than 64 KiB, and handing
one over costs more than its fingerprint.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

import numpy as np

from ..format.fingerprints import Stats, hash_of, sample_of, stats_of, summary
from ..host.commands import Command
from ..host.program import Step

# Outputs of more stored bytes than this are fingerprinted on the background thread.
BACKGROUND_BYTES = 1 << 16


class Fingerprinter:
    """The KernelWatch of one command while a capture records fingerprints: the stats of
    every output of every kernel the command runs, kernel by kernel (`kernels`, complete
    once the command is done)."""

    __slots__ = ("kernels", "pending", "worker")

    def __init__(self) -> None:
        self.kernels: list[list[Stats | None]] = []
        self.worker: _Worker | None = None
        self.pending: dict[int, int] = {}  # id(buffer) -> its latest job's number

    @staticmethod
    def factory(groups: list[list[list[Stats]]]):
        def watch(cmd: Command, logged: bool) -> Fingerprinter | None:
            if not logged:  # a host call of the capture's own (unobserved): not in the log
                return None
            w = Fingerprinter()
            groups.append(w.kernels)  # under the queue's lock, in the order of the log
            return w

        return watch

    def before(self, step: Step) -> None:
        """Wait for the fingerprints of what this kernel is about to overwrite."""
        pending = self.pending
        if pending:
            for b in step.outs:
                job = pending.get(id(b))
                if job is not None:
                    self.worker.wait(job)

    def after(self, step: Step, results: Sequence[np.ndarray]) -> None:
        row: list[Stats | None] = [None] * len(results)
        for j, (b, values) in enumerate(zip(step.outs, results)):
            bits = b.peek()
            if bits.nbytes <= BACKGROUND_BYTES:
                row[j] = stats_of(bits, values)
                continue
            if self.worker is None:
                self.worker = _Worker()
            # The values as computed are read with the stored bits when they share their
            # memory (then no later write lands there before the read); else sampled now.
            shared = values is bits or np.may_share_memory(values, bits)
            sample = values if shared else sample_of(values, copy=True)
            self.pending[id(b)] = self.worker.submit(bits, sample, not shared, row, j)
        self.kernels.append(row)  # not before: a kernel whose fingerprint failed has none

    def done(self) -> None:
        """Wait for every fingerprint of the command and end its thread; raise what went
        wrong there (the kernels from the first whose fingerprint failed are dropped, as
        when the fingerprint fails on the queue's thread)."""
        worker, self.worker = self.worker, None
        self.pending.clear()
        if worker is None:
            return
        error = worker.close()
        if worker.failed:
            failed = next((i for i, row in enumerate(self.kernels) if None in row), 0)
            del self.kernels[failed:]
        if error is not None:
            raise error


class _Worker:
    """A thread fingerprinting outputs in the order they were submitted, in two stages: what
    reads the output (hash, sample copy) before any summary, which reads only its own copy,
    so that the queue's thread, which waits for the first stage only, waits least."""

    __slots__ = (
        "_closing",
        "_error",
        "_read",
        "_reads",
        "_reported",
        "_submitted",
        "_summaries",
        "_thread",
        "_waiting",
        "_wake",
    )  # fmt: skip

    def __init__(self) -> None:
        self._reads: deque = deque()  # (job, bits, values or sample, whether sampled, row, j)
        self._summaries: deque = deque()  # (digest, sample, row, j)
        self._submitted = 0
        self._read = 0  # jobs whose output has been read (or skipped after a failure)
        self._error: BaseException | None = None
        self._reported = False  # the error was raised (by `wait`)
        self._closing = False
        self._wake = threading.Condition()
        self._waiting = False  # the queue's thread waits for a read
        self._thread = threading.Thread(target=self._run, name="mnrt-fingerprints", daemon=True)
        self._thread.start()

    def submit(self, bits: np.ndarray, values: np.ndarray, sampled: bool, row: list, j: int) -> int:
        """Queue the fingerprint of one output for `row[j]`: `values` as computed, or with
        `sampled` their sample already copied out; its job number."""
        self._submitted += 1
        with self._wake:
            self._reads.append((self._submitted, bits, values, sampled, row, j))
            self._wake.notify_all()
        return self._submitted

    def wait(self, job: int) -> None:
        """Until job number `job` has read its output; raise what went wrong in any job so
        far."""
        if self._read < job:
            with self._wake:
                self._waiting = True
                while self._read < job:
                    self._wake.wait()
                self._waiting = False
        if self._error is not None and not self._reported:
            self._reported = True
            raise self._error

    @property
    def failed(self) -> bool:
        return self._error is not None

    def close(self) -> BaseException | None:
        """Finish every job, end the thread, and return what went wrong that `wait` has
        not raised already."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        self._thread.join()
        return None if self._reported else self._error

    def _run(self) -> None:
        reads, summaries, wake = self._reads, self._summaries, self._wake
        while True:
            with wake:
                while not reads and not summaries and not self._closing:
                    wake.wait()
                if reads:
                    job, bits, values, sampled, row, j = reads.popleft()
                elif summaries:
                    job = 0
                    digest, sample, row, j = summaries.popleft()
                else:
                    return
            if self._error is None:
                try:
                    if job:
                        sample = values if sampled else sample_of(values, copy=True)
                        summaries.append((hash_of(bits), sample, row, j))
                    else:
                        row[j] = summary(digest, sample)
                except BaseException as e:  # raised on the queue's thread (wait, close)
                    self._error = e
            if job:
                with wake:
                    self._read = job
                    if self._waiting:
                        wake.notify_all()
