"""Every committed binary in samples/ keeps replaying and passing, forever. A format change
may add a minor version; it must never orphan these files."""

from __future__ import annotations

from pathlib import Path

import pytest

import mnrt

CORPUS = sorted((Path(__file__).resolve().parent.parent / "samples").glob("*.mnlb"))


def test_corpus_is_not_empty():
    assert len(CORPUS) >= 2


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_committed_binary_replays_and_passes(path):
    report = mnrt.replay(path)
    assert report.passed, report.summary()
    assert report.checks
