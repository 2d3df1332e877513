"""The bundled sample host programs run and check themselves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ("mlp.py", "max |error| vs float64 reference"),
        ("traced_loop.py", "100 trace replays"),
        ("two_devices.py", "copy + event"),
        ("pipeline.py", "4 stages on 4 devices"),
    ],
)
def test_sample_runs(tmp_path, script, expect):
    env = {**os.environ, "MNRT_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, str(SAMPLES / script)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout and "modelled device time" in out.stdout
