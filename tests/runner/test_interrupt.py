"""Ctrl-C is never lost (runner/interrupt.py): one that Python drops, raised inside a
finalizer, is raised again between a replay's loops."""

from __future__ import annotations

import signal

import pytest

from mnrt.runner import interrupt
from mnrt.runner.run import loop_progress


class _Finalized:
    def __del__(self) -> None:
        # Handled right here, inside __del__: Python reports the KeyboardInterrupt as
        # ignored and goes on.
        signal.raise_signal(signal.SIGINT)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_drops_in_a_finalizer_is_raised_between_loops():
    before = signal.getsignal(signal.SIGINT)
    with interrupt.kept():
        step = loop_progress(3)
        step(1, 3)  # nothing pressed yet
        _Finalized()  # dropped at once: its finalizer runs, the interrupt is lost there
        with pytest.raises(KeyboardInterrupt):
            step(2, 3)
    assert signal.getsignal(signal.SIGINT) is before
    interrupt.check()  # forgotten once the command is over


def test_a_ctrl_c_outside_a_finalizer_raises_at_once():
    with interrupt.kept(), pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
