"""Fingerprinting kernel outputs while a capture records (see format/fingerprints.py).

A fingerprint costs a pass over the output (the hash) and a few over a sample of it (the
statistics): on models of many cheap kernels, close to a tenth of the capture when each
output's statistics take their own numpy calls. The hash must be taken before a later
kernel writes the buffer again (compiled programs do, two kernels later), so the thread
running the queue takes it at once, while the output is still in cache. The sample, its
own copy, can wait: it is copied into a row of a block of samples, and a block, once
full, is summarised by a thread of the command's own (started with the first full block,
joined when the command ends) in three reductions of the whole block, which numpy runs
without the GIL, while the queue's thread goes on with the next kernels. Outputs too small
to be sampled are fingerprinted at once, as are all of them in a command of too few to
fill a block.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence

import numpy as np

from ..format.fingerprints import (
    SAMPLE_SIZE,
    Stats,
    copy_sample,
    hash_of,
    is_sampled,
    stats_of,
    summaries,
)
from ..host.commands import Command, KernelWatch
from ..host.program import Step

# Samples per block (a block of float32 samples is 1 MiB).
BLOCK_ROWS = 16


class Fingerprinter(KernelWatch):
    """The KernelWatch of one command while a capture records fingerprints: the stats of
    every output of every kernel the command runs, kernel by kernel (`kernels`, complete
    once the command is done)."""

    __slots__ = ("blocks", "kernels", "spare", "worker")

    def __init__(self) -> None:
        self.kernels: list[list[Stats | None]] = []
        self.blocks: dict[np.dtype, _Block] = {}  # being filled, by dtype
        self.spare: queue.SimpleQueue[_Block] = queue.SimpleQueue()  # summarised, to reuse
        self.worker: Summariser | None = None

    @staticmethod
    def factory(groups: list[list[list[Stats]]]):
        def watch(cmd: Command, logged: bool) -> Fingerprinter | None:
            if not logged:  # a host call of the capture's own (unobserved): not in the log
                return None
            w = Fingerprinter()
            groups.append(w.kernels)  # under the queue's lock, in the order of the log
            return w

        return watch

    def after(self, step: Step, results: Sequence[np.ndarray]) -> None:
        row: list[Stats | None] = [None] * len(results)
        for j, (b, values) in enumerate(zip(step.outs, results)):
            bits = b.peek()
            if not is_sampled(values.size):
                row[j] = stats_of(bits, values)
                continue
            block = self.blocks.get(values.dtype)
            if block is None:
                block = self.blocks[values.dtype] = self._block(values.dtype)
            copy_sample(values, block.samples[len(block.places)])
            block.places.append((hash_of(bits), row, j))
            if len(block.places) == BLOCK_ROWS:
                del self.blocks[values.dtype]
                if self.worker is None:
                    self.worker = Summariser(self.spare)
                self.worker.put(block)
        self.kernels.append(row)  # not before: a kernel whose fingerprint failed has none

    def done(self) -> None:
        """Summarise the blocks not yet full here, wait for the thread to summarise the
        others and end it; raise what went wrong there (the kernels from the first whose
        fingerprint is missing are dropped, as when a fingerprint fails on the queue's
        thread)."""
        blocks, self.blocks = list(self.blocks.values()), {}
        worker, self.worker = self.worker, None
        error = None
        try:
            for block in blocks:
                block.summarise()
        except BaseException as e:
            error = e
        if worker is not None:
            thread_error = worker.close()
            error = error or thread_error
        if error is not None:
            missing = next((i for i, row in enumerate(self.kernels) if None in row), 0)
            del self.kernels[missing:]
            raise error

    def _block(self, dtype: np.dtype) -> _Block:
        while True:
            try:
                block = self.spare.get_nowait()
            except queue.Empty:
                return _Block(dtype)
            if block.samples.dtype == dtype:
                return block


class _Block:
    """Samples of outputs of one dtype, one a row, with each output's hash and where its
    fingerprint goes (`row[j]`)."""

    __slots__ = ("places", "samples")

    def __init__(self, dtype: np.dtype) -> None:
        self.samples = np.empty((BLOCK_ROWS, SAMPLE_SIZE), dtype)
        self.places: list[tuple[int, list, int]] = []

    def summarise(self) -> None:
        n = len(self.places)
        for (_, row, j), stats in zip(
            self.places, summaries([d for d, _, _ in self.places], self.samples[:n])
        ):
            row[j] = stats
        self.places.clear()


class Summariser:
    """A thread summarising full blocks in the order they were put, handing each back to
    `spare` once done (so that a command fills a few blocks over and over, whose memory is
    mapped already); it stops at the first failure, which `close` returns."""

    __slots__ = ("_blocks", "_error", "_spare", "_thread")

    def __init__(self, spare: queue.SimpleQueue) -> None:
        self._blocks: queue.SimpleQueue[_Block | None] = queue.SimpleQueue()
        self._spare = spare
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self.work, name="mnrt-fingerprints", daemon=True)
        self._thread.start()

    def put(self, block: _Block) -> None:
        self._blocks.put(block)

    def close(self) -> BaseException | None:
        """Wait for every block put so far, end the thread, and return what went wrong."""
        self._blocks.put(None)
        self._thread.join()
        return self._error

    def work(self) -> None:
        """The thread's body."""
        while (block := self._blocks.get()) is not None:
            if self._error is None:
                try:
                    block.summarise()
                except BaseException as e:  # returned to the queue's thread by close
                    self._error = e
                else:
                    self._spare.put(block)
