"""Device DRAM: an address-space allocator and the host memory that backs live allocations.

The allocator hands out aligned addresses in the device's logical DRAM (16 GiB for MN-Core 2)
by best fit over an address-ordered free list that coalesces neighbours on free. Host memory
is used only for allocations that are touched: reserving DRAM costs no host memory, and an
allocation gets its own contiguous numpy byte array the first time a command reads or writes
it (kernels run on whole contiguous arrays, so the allocation is the unit). A binary may
therefore create buffers of every device's 16 GiB and still replay in a few GiB of host memory
when it touches little of them; a host allocation that fails is an OutOfMemoryError naming the
request, never numpy's bare MemoryError.

Fresh allocations hold whatever the device's fill policy says DRAM holds (zeros by default;
a repeated byte pattern or seeded noise after `clear`), so programs that read memory they
never wrote behave the same from run to run.
"""

from __future__ import annotations

import bisect
import mmap
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError, OutOfMemoryError, UseAfterFreeError
from . import host_pages


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def host_empty(shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    """np.empty for an array a request sized (a read's result): the host failing to hold it
    is an OutOfMemoryError naming the request, not numpy's bare MemoryError."""
    try:
        return np.empty(shape, dtype)
    except MemoryError:
        nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
        raise OutOfMemoryError(
            f"out of host memory for {what} of {_fmt_bytes(nbytes)} ({nbytes} bytes); "
            "read less at once or run where more host memory is available"
        ) from None


PATTERN_WIDTHS = (1, 2, 4, 8)  # bytes a pattern repeats every


def pattern_width(value: int) -> int:
    """The fewest bytes of PATTERN_WIDTHS that hold `value` (below 2**64)."""
    need = max(1, (value.bit_length() + 7) // 8)
    return next(w for w in PATTERN_WIDTHS if w >= need)


@dataclass(frozen=True)
class Fill:
    """What unwritten DRAM holds: zeros, a repeated little-endian pattern `width` bytes
    long, or seeded noise."""

    kind: str = "zero"  # zero | pattern | seed
    value: int = 0
    width: int = 0  # a pattern's length in bytes; 0 for the others

    @staticmethod
    def of(
        zero: bool = False,
        pattern: int | None = None,
        seed: int | None = None,
        width: int | None = None,
    ) -> Fill:
        """`width` (a pattern's only) defaults to the fewest bytes that hold the pattern, so
        0xff repeats every byte; width=4 makes it the 32-bit word 0x000000ff."""
        given = {"zero": 0 if zero else None, "pattern": pattern, "seed": seed}
        chosen = [k for k, v in given.items() if v is not None]
        if len(chosen) != 1:
            raise InvalidArgumentError(
                "clear takes exactly one of zero=True, pattern=<int>, seed=<int>"
            )
        kind = chosen[0]
        value = given[kind]
        if kind == "pattern" and not 0 <= value < 1 << 64:
            raise InvalidArgumentError(f"pattern {value:#x} does not fit in 64 bits")
        if kind == "seed" and value < 0:
            raise InvalidArgumentError(f"seed must be non-negative, got {value}")
        if width is not None and kind != "pattern":
            raise InvalidArgumentError("clear: width applies to a pattern only")
        if kind != "pattern":
            return Fill(kind, int(value))
        least = pattern_width(int(value))
        if width is None:
            width = least
        if width not in PATTERN_WIDTHS or width < least:
            raise InvalidArgumentError(
                f"clear: pattern {value:#x} needs a width of {least} bytes or more, one of "
                f"{', '.join(map(str, PATTERN_WIDTHS))}; got {width!r}"
            )
        return Fill(kind, int(value), int(width))

    def describe(self) -> str:
        return {
            "zero": "zero",
            "pattern": f"pattern {self.value:#0{2 + 2 * self.width}x}",
            "seed": f"seed {self.value}",
        }[self.kind]

    def apply(self, dest: np.ndarray, address: int) -> None:
        """Fill a byte array as the DRAM at `address` would read after this fill."""
        if self.kind == "zero":
            dest.fill(0)
        elif self.kind == "pattern":
            width = self.width
            unit = np.frombuffer(self.value.to_bytes(width, "little"), np.uint8)
            # Patterns are aligned to the DRAM address, not to the buffer start.
            phase = address % width
            reps = (dest.size + phase) // width + 1
            dest[:] = np.tile(unit, reps)[phase : phase + dest.size]
        else:
            rng = np.random.default_rng([self.value, address])
            dest[:] = rng.integers(0, 256, dest.size, dtype=np.uint8)


class Allocator:
    """Best-fit allocator over [base, base + size) with coalescing free list."""

    def __init__(self, size: int, alignment: int, base: int | None = None) -> None:
        self.size = size
        self.alignment = alignment
        # Address 0 is never handed out, so 0 can mean "no buffer".
        self.base = alignment if base is None else base
        self._free_addrs: list[int] = [self.base]  # sorted start addresses of free blocks
        self._free_sizes: dict[int, int] = {self.base: size - self.base}
        self._used: dict[int, int] = {}  # address -> size of live blocks
        self._used_total = 0  # their sum, kept as they change (profiles read it per call)

    def _round(self, nbytes: int) -> int:
        a = self.alignment
        return max(a, (nbytes + a - 1) // a * a)

    @property
    def free_bytes(self) -> int:
        return self.size - self.base - self._used_total

    @property
    def largest_free(self) -> int:
        return max(self._free_sizes.values(), default=0)

    @property
    def used_bytes(self) -> int:
        return self._used_total

    @property
    def live_blocks(self) -> int:
        return len(self._used)

    def allocate(self, nbytes: int, what: str = "buffer") -> int:
        need = self._round(nbytes)
        best = None
        for addr in self._free_addrs:
            size = self._free_sizes[addr]
            if size >= need and (best is None or size < self._free_sizes[best]):
                best = addr
                if size == need:
                    break
        if best is None:
            raise OutOfMemoryError(
                f"out of device memory allocating {what} of {_fmt_bytes(nbytes)} "
                f"({nbytes} bytes): largest free block is {_fmt_bytes(self.largest_free)}, "
                f"total free {_fmt_bytes(self.free_bytes)} of {_fmt_bytes(self.size)}; "
                "deallocate buffers you no longer need or use smaller ones"
            )
        size = self._free_sizes.pop(best)
        i = bisect.bisect_left(self._free_addrs, best)
        if size > need:
            self._free_addrs[i] = best + need
            self._free_sizes[best + need] = size - need
        else:
            del self._free_addrs[i]
        self._used[best] = need
        self._used_total += need
        return best

    def free(self, address: int) -> None:
        size = self._used.pop(address, None)
        if size is None:
            raise UseAfterFreeError(f"address {address:#x} is not a live allocation")
        self._used_total -= size
        i = bisect.bisect_left(self._free_addrs, address)
        # Coalesce with the following block, then with the preceding one.
        if i < len(self._free_addrs) and self._free_addrs[i] == address + size:
            size += self._free_sizes.pop(self._free_addrs.pop(i))
        if i > 0:
            prev = self._free_addrs[i - 1]
            if prev + self._free_sizes[prev] == address:
                self._free_sizes[prev] += size
                return
        self._free_addrs.insert(i, address)
        self._free_sizes[address] = size

    def reset(self) -> None:
        self.__init__(self.size, self.alignment, self.base)


class DeviceMemory:
    """DRAM of one device: the allocator, plus a host byte array for each live allocation
    that has been touched (see `backing`)."""

    def __init__(self, size: int, alignment: int) -> None:
        self.allocator = Allocator(size, alignment)
        self.fill = Fill()
        self._reserved: dict[int, tuple[int, str]] = {}  # address -> (bytes, what) of live ones
        self._backing: dict[int, np.ndarray] = {}  # address -> host bytes, touched ones only
        self._lock = threading.Lock()

    def reserve(self, nbytes: int, what: str = "buffer") -> int:
        """Reserve `nbytes` of DRAM and return its address; no host memory is used yet."""
        with self._lock:
            address = self.allocator.allocate(nbytes, what)
            self._reserved[address] = (nbytes, what)
        return address

    def backing(self, address: int) -> np.ndarray:
        """The host bytes of a live allocation, made on first use and left as np.empty gives
        them: the owner puts the fill in before anything reads them (memory written whole
        never pays for the fill). Raises OutOfMemoryError when the host cannot hold them."""
        data = self._backing.get(address)
        if data is not None:
            return data
        with self._lock:
            data = self._backing.get(address)
            if data is None:
                nbytes, what = self._reserved[address]
                try:
                    data = _host_bytes(nbytes)
                except (MemoryError, OSError):
                    touched = sum(d.nbytes for d in self._backing.values())
                    raise OutOfMemoryError(
                        f"out of host memory backing {what} of {_fmt_bytes(nbytes)} "
                        f"({nbytes} bytes) of emulated DRAM at {address:#x}: the host could not "
                        f"allocate it ({_fmt_bytes(touched)} of this device's DRAM is already "
                        "backed); touch less device memory or run where more host memory is "
                        "available"
                    ) from None
                self._backing[address] = data
        return data

    def allocate(
        self, nbytes: int, what: str = "buffer", filled: bool = True
    ) -> tuple[int, np.ndarray]:
        """Reserve `nbytes` and back them at once: (address, bytes holding the fill, or left
        as they come with `filled=False`)."""
        address = self.reserve(nbytes, what)
        data = self.backing(address)
        if filled:
            self.fill.apply(data, address)
        return address, data

    def free(self, address: int) -> None:
        with self._lock:
            self.allocator.free(address)
            del self._reserved[address]
            self._backing.pop(address, None)

    @property
    def backed_bytes(self) -> int:
        """Host bytes backing this device's DRAM now."""
        return sum(d.nbytes for d in list(self._backing.values()))

    def clear(self, fill: Fill) -> None:
        """Set what DRAM holds: every backed allocation now reads as `fill`, as do new ones
        (their owners put it in when they are first touched). The backed ones are listed
        first: another thread may allocate meanwhile."""
        self.fill = fill
        for address, data in list(self._backing.items()):
            fill.apply(data, address)

    def reset(self) -> None:
        with self._lock:
            self.allocator.reset()
            self._reserved.clear()
            self._backing.clear()


# Below this, backing memory comes from malloc's arenas, which keep freed blocks for reuse
# (host_pages.MMAP_THRESHOLD): a replay that opens its devices again every loop reuses
# pages already touched (mapping each buffer from 4 MiB made a 512x512 transformer's replay
# 40% slower). From it, glibc would map the block anyway, and numpy would advise huge
# pages for it, whose first touch compacts memory where THP is "madvise" (a 548 MB upload
# took 1.46 s instead of 0.34 s): an anonymous map of our own is not advised.
_MMAP_FROM = host_pages.MMAP_THRESHOLD
# A backed allocation is written or filled whole at once (a write, or its fill before a
# first read): the kernel faults its pages in in one go when it is mapped, rather than
# one trap per page as the write touches them (VGG-19's 548 MB upload: 0.5-1.0 s -> 0.35).
# (Linux; elsewhere the map's defaults.)
_MAP_FLAGS = (
    {"flags": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE}
    if hasattr(mmap, "MAP_POPULATE")
    else {}
)


def _host_bytes(nbytes: int) -> np.ndarray:
    """Uninitialised host bytes for `nbytes` of DRAM: mapped anonymously when large."""
    if nbytes < _MMAP_FROM:
        return np.empty(nbytes, np.uint8)
    return np.frombuffer(mmap.mmap(-1, nbytes, **_MAP_FLAGS), np.uint8)
