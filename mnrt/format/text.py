"""What strings a light binary may hold: printable text, and names of bounded length.

Strings from a binary reach terminals, logs and reports (buffer, program and check names,
the producer, the description). An escape sequence or a newline in one could forge output
lines (`FAKE LINE: PASS`) or drive the terminal, so the verifier refuses any string with a
character that is not printable, and the host API refuses such names when they are given,
so that a capture never writes a binary that replay would refuse.
"""

from __future__ import annotations

# Longer names are refused: nothing needs them, and every report line quotes them.
MAX_NAME_CHARS = 1024


def unprintable(text: str) -> str | None:
    """Why `text` may not be in a binary (its first non-printable character: a control
    character, a line or paragraph separator, a format character such as a bidi override),
    or None when it may."""
    if text.isprintable():
        return None
    i, ch = next((i, ch) for i, ch in enumerate(text) if not ch.isprintable())
    return f"character {i} is U+{ord(ch):04X}, which is not printable"


def bad_name(name: str) -> str | None:
    """Why `name` may not name an object in a binary, or None when it may."""
    if len(name) > MAX_NAME_CHARS:
        return f"it is {len(name)} characters long, more than {MAX_NAME_CHARS}"
    return unprintable(name)


def decoded(value: bytes | str | None) -> str:
    """A string field as a reader gets it (bytes from the generated accessors, str from
    the object API, None when absent), as text: undecodable bytes replaced, absent empty."""
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
