"""ReplayReport: the verdict of a replay, for people (summary) and machines (JSON)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import MnrtError
from ..format import LightBinary
from ..format.strict_json import json_value
from ..host.golden import Check
from .modelled import timelines

if TYPE_CHECKING:
    from ..host.timeline import Span, Timeline
    from .locate import LocateResult
    from .profile import Profile


@dataclass
class ReplayReport:
    """Checks and outputs are those of the first loop that failed, or of the last loop when
    none did (a racy binary may fail only now and then); timings cover every loop."""

    binary: LightBinary
    load_s: float
    checks: list[Check] = field(default_factory=list)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    loop_wall_s: list[float] = field(default_factory=list)
    device_time_s: float = 0.0
    energy_j: float = 0.0
    failed_loops: int = 0
    # Host seconds and count per command type, of the fastest loop.
    host_s: dict[str, tuple[float, int]] = field(default_factory=dict)
    profile: Profile | None = None  # with replay(..., profile=True)
    # False with replay(..., verify=False), or with new inputs and nothing expected of them:
    # no golden was compared.
    verified: bool = True
    new_inputs: list[str] = field(default_factory=list)  # inputs the caller replaced
    # Verification was asked for but the binary records no golden (and nothing was
    # expected): nothing was compared, so the verdict is NO GOLDENS, never PASS.
    no_goldens: bool = False
    error: MnrtError | None = None  # what stopped the replay (then `passed` is False)
    locate: LocateResult | None = None  # with replay(..., locate=True)
    # of a replay that failed: why its queues may run in another order each time (the
    # first race between them, see replay/hazards.py), or None when they cannot
    race: str | None = None
    # The last loop's queue commands as timeline spans (every rank's, on rank 0) and where
    # each captured device ran: what `modelled` and `modelled_as_run` are scheduled from,
    # when first asked for (a large binary's timeline costs as much as its replay).
    placed: dict[int, int] = field(default_factory=dict)
    # The spans, or what makes them on first use (a replay on one rank keeps its commands).
    _spans: list[Span] | Callable[[], list[Span]] | None = None
    _timelines: tuple[Timeline, Timeline] | None = None
    rank: int = 0  # of a distributed replay: rank 0's report holds every rank's results
    ranks: int = 1

    def add_loop(
        self,
        wall_s: float,
        device_time_s: float,
        energy_j: float,
        checks: list[Check],
        outputs: dict[str, np.ndarray],
        host_s: dict[str, tuple[float, int]] | None = None,
    ) -> None:
        if host_s is not None and wall_s <= min(self.loop_wall_s, default=math.inf):
            self.host_s = host_s
        self.loop_wall_s.append(wall_s)
        self.device_time_s, self.energy_j = device_time_s, energy_j
        if not self.failed_loops:
            self.checks, self.outputs = checks, outputs
        if not all(c.passed for c in checks):
            self.failed_loops += 1

    def keep_spans(
        self, spans: list[Span] | Callable[[], list[Span]], placed: dict[int, int]
    ) -> None:
        """Keep the last loop's spans (or what makes them) and where each captured device
        ran, for the modelled timelines."""
        self._spans, self.placed = spans, dict(placed)
        self._timelines = None

    @property
    def spans(self) -> list[Span] | None:
        """The last loop's queue commands as timeline spans, every rank's (None on ranks
        other than 0, or when no loop finished)."""
        if callable(self._spans):
            self._spans = self._spans()
        return self._spans

    def _scheduled(self) -> tuple[Timeline, Timeline] | None:
        spans = self.spans
        if self._timelines is None and spans is not None:
            self._timelines = timelines(spans, self.placed)
        return self._timelines

    @property
    def timeline(self) -> Timeline | None:
        """The modelled timeline of the captured topology (host/timeline.py)."""
        scheduled = self._scheduled()
        return None if scheduled is None else scheduled[0]

    @property
    def timeline_as_run(self) -> Timeline | None:
        """The same work's modelled timeline on the placement that ran."""
        scheduled = self._scheduled()
        return None if scheduled is None else scheduled[1]

    @property
    def modelled(self) -> dict | None:
        """DESIGN.md section 11: makespan_s, energy_j, bubble_fraction and devices [{index,
        busy_s, energy_j}] of the captured topology (None on ranks other than 0)."""
        timeline = self.timeline
        return None if timeline is None else timeline.to_dict()

    @property
    def modelled_as_run(self) -> dict | None:
        """`modelled`, for the placement that ran (devices are runner device indices)."""
        timeline = self.timeline_as_run
        return None if timeline is None else timeline.to_dict()

    @property
    def passed(self) -> bool:
        return self.failed_loops == 0 and self.error is None

    @property
    def verdict(self) -> str:
        """One line: PASS, FAIL, ERROR, or why nothing was verified."""
        if self.error is not None:
            return f"ERROR ({type(self.error).__name__})"
        if not self.passed:
            return "FAIL"
        if self.verified:
            return "PASS"
        if self.no_goldens:
            return "NO GOLDENS (the binary records none, so nothing was verified)"
        if self.new_inputs:
            return (
                "RAN WITH NEW INPUTS, NOT VERIFIED (the recorded goldens are for the recorded "
                "inputs; give expected outputs to compare)"
            )
        return "RAN, NOT VERIFIED (goldens not compared)"

    @property
    def timings(self) -> dict:
        walls = self.loop_wall_s
        return {
            "load_s": self.load_s,
            "loops": len(walls),
            "wall_s": sum(walls),
            "wall_min_s": min(walls, default=0.0),
            "wall_median_s": statistics.median(walls) if walls else 0.0,
            "wall_max_s": max(walls, default=0.0),
            "device_time_s": self.device_time_s,
            "energy_j": self.energy_j,
            "host_s_by_command": {k: {"s": t, "count": n} for k, (t, n) in self.host_s.items()},
        }

    def host_breakdown(self) -> str:
        """Where the fastest loop's host time went, largest first, on one line."""
        parts = sorted(self.host_s.items(), key=lambda kv: -kv[1][0])
        return ", ".join(
            f"{name} {t * 1e3:.3f} ms" + (f" x{n}" if n > 1 else "") for name, (t, n) in parts
        )

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "verified": self.verified,
            "no_goldens": self.no_goldens,
            "verdict": self.verdict,
            "error": None if self.error is None else self.error.to_dict(),
            "binary": str(self.binary.path) if self.binary.path else None,
            "producer": self.binary.producer,
            "version": list(self.binary.version),
            "commands": len(self.binary),
            "new_inputs": self.new_inputs,
            "failed_loops": self.failed_loops,
            "checks": [check_dict(c) for c in self.checks],
            "outputs": {
                k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in self.outputs.items()
            },
            "timings": self.timings,
            "modelled": self.modelled,
            "modelled_as_run": self.modelled_as_run,
            "rank": self.rank,
            "ranks": self.ranks,
            **({"locate": self.locate.to_dict()} if self.locate is not None else {}),
            **({"race": self.race} if self.race is not None else {}),
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def summary(self) -> str:
        """A few lines for a terminal: verdict, each check, modelled device time."""
        lines = [
            f"{self.verdict}: {len(self.binary)} commands, "
            f"{sum(c.passed for c in self.checks)}/{len(self.checks)} goldens matched"
            + (
                f", {self.failed_loops} of {len(self.loop_wall_s)} loops failed"
                if self.failed_loops
                else ""
            )
        ]
        for c in self.checks:
            mark = "ok  " if c.passed else "FAIL"
            detail = (
                f"max_abs_err={c.max_abs_err:.3g} max_rel_err={c.max_rel_err:.3g} pcc={c.pcc:.6f}"
            )
            lines.append(f"  {mark} {c.name} {c.dtype}{list(c.shape)}: {detail}")
            if not c.passed:
                lines.append(f"       {c.message}")
                lines.extend(
                    f"       at {tuple(w['index'])}: expected {w['expected']:.7g}, actual "
                    f"{w['actual']:.7g}, abs err {w['abs_err']:.3g}, rel err {w['rel_err']:.3g}"
                    for w in c.worst
                )
        if self.locate is not None:
            lines.append(self.locate.summary())
        elif self.no_goldens and not self.new_inputs and (prints := len(self.binary.fingerprints)):
            # a reduced binary's failure is a wrong kernel: its fingerprints are its checks
            lines.append(
                f"note: the binary records {prints} kernel output fingerprint(s); --locate "
                "(replay(locate=True)) compares each kernel's outputs with them"
            )
        if self.race is not None:
            lines.append(f"note: {self.race}")
        several = self.spans is not None and len({s.device for s in self.spans}) > 1
        for label, m in (("captured", self.modelled), ("as run", self.modelled_as_run)):
            if several:
                lines.append(
                    f"modelled timeline ({label}): makespan {m['makespan_s'] * 1e6:.2f} us on "
                    f"{len(m['devices'])} device(s), bubble {m['bubble_fraction']:.3f}, energy "
                    f"{m['energy_j'] * 1e3:.3f} mJ"
                )
        t = self.timings
        lines.append(
            f"modelled device time {t['device_time_s'] * 1e6:.2f} us, energy "
            f"{t['energy_j'] * 1e3:.3f} mJ; wall {t['wall_median_s'] * 1e3:.2f} ms per loop "
            f"({t['loops']} loop{'s' if t['loops'] != 1 else ''}), load {t['load_s'] * 1e3:.2f} ms"
        )
        return "\n".join(lines)


def check_dict(c: Check) -> dict:
    """A check as strict JSON (its worst elements too)."""
    return json_value({**c.to_dict(), "worst": c.worst})


def error_document(e: MnrtError, binary: str | None) -> dict:
    """The report of a run that stopped before a replay began (an invalid binary, a wrong
    input): the fields a full report has that can be known, with the error."""
    return {
        "passed": False,
        "verified": False,
        "verdict": f"ERROR ({type(e).__name__})",
        "error": e.to_dict(),
        "binary": binary,
        "checks": [],
        "outputs": {},
    }
