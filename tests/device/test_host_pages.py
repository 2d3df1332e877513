"""Host malloc tuning: applied when the first device opens, not on import, and can be
turned off."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

PROBE = """
import mnrt
from mnrt.device import host_pages
before = host_pages._tuned
mnrt.open_device(0)
print(before, host_pages._tuned)
"""


def probe(**env: str) -> str:
    env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True
    ).stdout.split()


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_opening_a_device_tunes_malloc_once(tmp_path):
    # Importing mnrt leaves malloc alone; opening a device tunes it.
    assert probe(MNRT_HOME=str(tmp_path)) == ["None", "True"]


def test_the_tuning_can_be_turned_off(tmp_path):
    assert probe(MNRT_HOME=str(tmp_path), MNRT_KEEP_HOST_PAGES="0") == ["None", "False"]


def test_numpys_huge_page_advice_is_turned_off_with_mallocs_tuning(monkeypatch):
    from mnrt.device import host_pages

    calls = []
    monkeypatch.setattr(host_pages, "_tuned", None)
    monkeypatch.setattr(host_pages, "_mallopt", lambda: True)
    try:
        from numpy._core import multiarray
    except ImportError:
        from numpy.core import multiarray
    monkeypatch.setattr(multiarray, "_set_madvise_hugepage", calls.append, raising=False)
    assert host_pages.keep_freed_pages()
    assert calls == [False]
