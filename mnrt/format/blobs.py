"""Blobs: the payloads of a light binary (written data, goldens), content-addressed.

Writing, a `BlobStore` keeps each distinct payload once (keyed by its xxh3-64 and size) and
compresses it with zstd when that saves at least an eighth. Reading, a `BlobTable` hands out
payloads from the mapped data section: stored uncompressed they are zero-copy views; every
payload is checked against its xxh3-64 the first time it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import xxhash
import zstandard

from ..errors import InvalidBinaryError

ALIGN = 64
NONE, ZSTD = 0, 1  # Compression enum values (schema/base.fbs)
_MIN_COMPRESS = 256  # smaller payloads are stored as they are
_SMALL = 1 << 16  # payloads up to this size are copied to bytes rather than viewed
DEFAULT_LEVEL = 3  # zstd's usual default, what captures use
# No zstd frame expands by more than this: a 128 KiB RLE block costs at least 3 bytes. A blob
# claiming more is hostile; checking it first keeps allocations within what the file justifies.
_MAX_ZSTD_RATIO = 1 << 16
_COMPARE_PIECE = 1 << 24  # bytes compared at a time by BlobTable.same_payload
# A level stronger than the usual one is first tried on a sample of a large payload: three
# pieces of this many bytes (its start, middle and end). On a model's weights it is a
# hundred times slower for nothing (float bits hold no matches for it to find: Swin-T's 44
# MB of half weights, 38.47 MB at level 3 and 38.53 MB at level 19, in 0.06 s and 8.6 s).
_PROBE = 1 << 16
# ... and used only where it packs the sample at least this share smaller than the usual
# level does (relative to the packed size: a constant weight's 411 MB pack to 37645 bytes
# at level 3 and 34510 at 19, and their sample to 36 and 35).
_PROBE_GAIN = 1 / 64


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class BlobInfo(NamedTuple):
    """Where a blob lies in the data section and how to read it back."""

    offset: int
    stored_size: int
    size: int
    compression: int
    hash: int


class BlobStore:
    """Payloads of a binary being written, each distinct one once; ids start at 1."""

    def __init__(self, level: int = DEFAULT_LEVEL) -> None:
        """`level`: the zstd level payloads are compressed at (higher: smaller, slower)."""
        self._level = level
        self._ids: dict[tuple[int, int], int] = {}
        self._payloads: list[bytes | memoryview] = []
        self._infos: list[BlobInfo] = []
        self._end = 0

    def add(
        self,
        data: bytes | bytearray | memoryview | np.ndarray,
        packed: memoryview | None = None,
    ) -> int:
        """The id of `data`'s blob, added if new. `packed`: `data` as a zstd frame another
        writer made (BlobTable.stored), kept where this store's level does no better: a
        stronger level is not always smaller."""
        view = _as_bytes(data)
        size = view.nbytes
        digest = xxhash.xxh3_64_intdigest(view)
        key = (digest, size)
        found = self._ids.get(key)
        if found is not None:
            return found
        payload, compression, stored = view, NONE, size
        if size >= _MIN_COMPRESS:
            ours = zstandard.ZstdCompressor(level=self._level_for(view)).compress(view)
            if len(ours) <= size - size // 8:
                payload, compression, stored = ours, ZSTD, len(ours)
        if packed is not None and len(packed) < stored:
            payload, compression, stored = packed, ZSTD, len(packed)
        end = self._end
        self._infos.append(BlobInfo(end, stored, size, compression, digest))
        self._payloads.append(payload)
        self._end = (end + stored + ALIGN - 1) // ALIGN * ALIGN
        blob_id = self._ids[key] = len(self._infos)
        return blob_id

    def _level_for(self, view: memoryview) -> int:
        """The zstd level to compress a payload at: this store's, unless it is stronger
        than the usual one and does not pay on a sample of a large payload."""
        size = view.nbytes
        if self._level <= DEFAULT_LEVEL or size < 8 * _PROBE:
            return self._level
        sample = b"".join(view[at : at + _PROBE] for at in (0, (size - _PROBE) // 2, size - _PROBE))
        strong = len(zstandard.ZstdCompressor(level=self._level).compress(sample))
        usual = len(zstandard.ZstdCompressor(level=DEFAULT_LEVEL).compress(sample))
        return self._level if usual - strong >= usual * _PROBE_GAIN else DEFAULT_LEVEL

    @property
    def infos(self) -> list[BlobInfo]:
        return list(self._infos)

    @property
    def payloads(self) -> list[bytes | memoryview]:
        return list(self._payloads)


def _as_bytes(data: bytes | bytearray | memoryview | np.ndarray) -> memoryview:
    if isinstance(data, np.ndarray):
        if data.nbytes <= _SMALL:
            return memoryview(data.tobytes())  # a copy is cheaper than a buffer export here
        data = np.ascontiguousarray(data)
        if data.dtype == np.bool_:
            data = data.view(np.uint8)  # memoryview cannot cast numpy's bool format
    return memoryview(data).cast("B")


class BlobTable:
    """Read access to the blobs of a loaded binary, over its data section."""

    def __init__(self, infos: Sequence[BlobInfo], data: memoryview, data_offset: int) -> None:
        self.infos = list(infos)
        self._data = data
        self._data_offset = data_offset  # of the data section in the file, for messages
        self._checked: set[int] = set()
        # Decompressed payloads, kept: replay reads each blob at least twice (checksums
        # first, then the write), and every loop again.
        self._inflated: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self.infos)

    def info(self, blob_id: int, command: int | None = None) -> BlobInfo:
        if not 1 <= blob_id <= len(self.infos):
            raise InvalidBinaryError(
                f"blob id {blob_id} does not exist (the binary has {len(self.infos)} blobs)",
                command=command,
            )
        return self.infos[blob_id - 1]

    def check_bounds(self) -> None:
        """Every blob lies inside the data section and says something decodable."""
        size = len(self._data)
        for i, b in enumerate(self.infos, start=1):
            where = self._data_offset + b.offset
            if b.offset % ALIGN or b.offset + b.stored_size > size or b.offset > size:
                raise InvalidBinaryError(
                    f"blob {i} ({b.stored_size} bytes at data offset {b.offset}) lies outside "
                    f"the {size}-byte data section (file truncated?)",
                    offset=where,
                )
            if b.compression not in (NONE, ZSTD):
                raise InvalidBinaryError(f"blob {i} has unknown compression {b.compression}")
            if b.compression == ZSTD and b.size > _MAX_ZSTD_RATIO * max(b.stored_size, 1):
                raise InvalidBinaryError(
                    f"blob {i} claims {b.size} bytes from {b.stored_size} compressed bytes, "
                    "more than zstd can expand to",
                    offset=where,
                )
            if b.compression == NONE and b.stored_size != b.size:
                raise InvalidBinaryError(
                    f"blob {i} is stored uncompressed but its sizes differ "
                    f"({b.stored_size} stored, {b.size} claimed)",
                    offset=where,
                )

    def read(self, blob_id: int, command: int | None = None) -> memoryview:
        """The decompressed payload, checked against its hash on first read."""
        b = self.info(blob_id, command)
        stored = self._data[b.offset : b.offset + b.stored_size]
        if len(stored) != b.stored_size:
            raise InvalidBinaryError(
                f"blob {blob_id} runs past the end of the file", command=command
            )
        if b.compression == ZSTD:
            raw = self._inflated.get(blob_id)
            if raw is None:
                raw = self._inflated[blob_id] = _decompress(stored, b.size, blob_id, command)
            data = memoryview(raw)
        else:
            data = stored
        if blob_id not in self._checked:
            if xxhash.xxh3_64_intdigest(data) != b.hash:
                raise InvalidBinaryError(
                    f"blob {blob_id} is corrupt: its xxh3-64 does not match the recorded one",
                    offset=self._data_offset + b.offset,
                    command=command,
                )
            self._checked.add(blob_id)
        return data

    def verify_all(self) -> None:
        for blob_id in range(1, len(self.infos) + 1):
            self.read(blob_id)

    def stored(self, blob_id: int) -> memoryview | None:
        """Blob `blob_id` as its zstd frame, once read (so known to decompress to the payload
        its hash names); None where it is stored uncompressed or not yet read."""
        b = self.info(blob_id)
        if b.compression != ZSTD or blob_id not in self._checked:
            return None
        return self._data[b.offset : b.offset + b.stored_size]

    def same_payload(self, blob_id: int, other: BlobTable, other_id: int) -> bool:
        """Whether blob `blob_id` here holds what blob `other_id` of `other` does. Blobs of
        another hash or size do not. Blobs of one hash stored as the same bytes do, without
        decompressing or hashing them (diffing two large binaries stays cheap); where their
        stored bytes differ (another zstd level, or a corrupt payload) both are read, so a
        payload that does not match its recorded hash is refused (InvalidBinaryError)
        rather than taken for the one it claims to be."""
        a, b = self.info(blob_id), other.info(other_id)
        if (a.hash, a.size) != (b.hash, b.size):
            return False
        if a.compression == b.compression and _same_bytes(
            self._data[a.offset : a.offset + a.stored_size],
            other._data[b.offset : b.offset + b.stored_size],
        ):
            return True
        return _same_bytes(self.read(blob_id), other.read(other_id))


def _same_bytes(a: memoryview, b: memoryview) -> bool:
    """Byte-wise equality, in pieces so that comparing two large payloads allocates little
    (memoryview's own == compares element by element, an order of magnitude slower)."""
    if len(a) != len(b):
        return False
    step = _COMPARE_PIECE
    return all(
        np.array_equal(
            np.frombuffer(a[i : i + step], np.uint8), np.frombuffer(b[i : i + step], np.uint8)
        )
        for i in range(0, len(a), step)
    )


def _decompress(stored: memoryview, size: int, blob_id: int, command: int | None) -> bytes:
    # What a hostile frame can make us allocate is bounded by the size the blob claims, which
    # the caller has checked against the buffer it will fill: max_output_size bounds frames
    # without a content size, but zstandard allocates a frame's declared content size up
    # front whatever max_output_size says, so that is checked first.
    try:
        declared = zstandard.get_frame_parameters(stored).content_size
        if declared not in (size, zstandard.CONTENTSIZE_UNKNOWN):
            raise InvalidBinaryError(
                f"blob {blob_id}'s zstd frame declares {declared} bytes, not the {size} the "
                "blob claims (corrupt or hostile)",
                command=command,
            )
        out = zstandard.ZstdDecompressor().decompress(stored, max_output_size=size)
    except zstandard.ZstdError as e:
        raise InvalidBinaryError(
            f"blob {blob_id} does not decompress: {e}", command=command
        ) from None
    if len(out) != size:
        raise InvalidBinaryError(
            f"blob {blob_id} decompresses to {len(out)} bytes, not the {size} it claims",
            command=command,
        )
    return out
