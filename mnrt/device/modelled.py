"""`Modelled`: what the timing and energy model says one command costs.

Its own module so that both the cost model (device/cost.py) and the spec's link prices
(device/spec.py, which cost.py imports) can return it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Modelled:
    """Modelled device time and energy of one command, with the terms that made it."""

    time_s: float
    energy_j: float
    flops: float = 0.0
    dram_bytes: float = 0.0
    bound: str = "launch"  # which term dominated: compute | dram | sram | lm | link | launch

    def to_dict(self) -> dict:
        return asdict(self)
