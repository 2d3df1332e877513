"""Warnings that point at the user's code. mnrt warns from deep inside (an import, a pass,
the goldens of save_binary), reached from several public calls (compile, save_binary,
write_codegen_dir, load_codegen_dir, the CLI): a fixed `stacklevel` is right for one path
and names a line of mnrt, or none at all ("sys:1"), for the others. `warn` counts the frames
inside the package instead, so the warning names the first line outside it.
"""

from __future__ import annotations

import os
import sys
import warnings

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """`warnings.warn(message, category)`, attributed to the first caller outside mnrt."""
    frame, level = sys._getframe(1), 2  # stacklevel 2: the caller of this function
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
