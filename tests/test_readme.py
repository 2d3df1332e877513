"""The README's python blocks run as written (the compiler snippet once used names it never
defined). A block that is an outline, not a program, is marked `<!-- readme-sketch ... -->`
on the line above it, and only those are not run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SKETCH = "<!-- readme-sketch"


def python_blocks() -> list[tuple[int, str, bool]]:
    """(line number, code, is a sketch) of every ```python block, in order."""
    text = README.read_text()
    lines = text.splitlines()
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        sketch = line >= 2 and lines[line - 2].startswith(SKETCH)
        blocks.append((line, match.group(1), sketch))
    return blocks


RUNNABLE = [(line, code) for line, code, sketch in python_blocks() if not sketch]


def test_the_host_api_and_compiler_snippets_are_run():
    assert any("open_device" in code for _, code in RUNNABLE)
    assert any("ctx.compile(" in code for _, code in RUNNABLE)


@pytest.mark.parametrize(("line", "code"), RUNNABLE, ids=[f"line{n}" for n, _ in RUNNABLE])
def test_readme_python_block_runs(line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the snippets write model.mnlb, out/cg...
    namespace: dict = {"__name__": "readme"}
    try:
        exec(compile(code, f"README.md:{line}", "exec"), namespace)
    finally:
        ctx = namespace.get("ctx")
        if ctx is not None:
            ctx.close()
