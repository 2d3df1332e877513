"""LightBinary: the in-memory and on-disk form of a light binary (.mnlb).

File layout: a size-prefixed FlatBuffer (identifier "MNLB", root `LightBinary`), zero
padding to the next 64-byte boundary, then the data section: blobs, each 64-byte aligned,
addressed by u64 offsets from the section's start (so files may exceed 2 GiB). Loading maps
the file and verifies the FlatBuffer's structure, then its integrity hash (see `integrity`),
version and schema; blobs are read lazily and zero-copy, each checked against its hash on
first read.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import flatbuffers
import numpy as np
import xxhash

from ..errors import InvalidArgumentError, InvalidBinaryError, UnsupportedVersionError
from .blobs import BlobInfo, BlobStore, BlobTable, align
from .fb import LightBinary as fb_root
from .fb.Command import CommandT
from .fb.DeviceDescription import DeviceDescriptionT
from .fb.LightBinary import LightBinary as FbLightBinary
from .fb.LightBinary import LightBinaryT
from .fb.Metadata import MetadataT
from .fb.Version import CreateVersion
from .fields import STRUCT_CODES, scalar_type
from .files import as_path, open_regular, write_atomically
from .fingerprints import SAMPLE, Fingerprint, Sample, Stats, to_columns
from .io import IoBuffer, derive, describe
from .pack import pack_commands, pack_tables
from .schema_info import FORMAT_VERSION, KNOWN_SCHEMAS, LAYOUT, SCHEMA_HASH
from .text import decoded
from .unpack import read_commands
from .verify import verify_flatbuffer

IDENTIFIER = b"MNLB"


class LightBinary:
    """A light binary: header, commands in issue order, and content-addressed blobs."""

    def __init__(
        self,
        content: bytes | bytearray | memoryview | mmap.mmap,
        path: Path | None = None,
        *,
        _written: list[BlobInfo] | None = None,
    ):
        """Wrap a whole file's bytes; verifies structure, version and schema first (except for
        what `build` just wrote, which is correct by construction and tested to be)."""
        if not isinstance(content, (bytes, bytearray, memoryview, mmap.mmap)):
            raise InvalidArgumentError(
                f"LightBinary takes a light binary's bytes, not {type(content).__name__}; "
                "LightBinary.load(path) reads one from a file"
            )
        self.path = path
        self._content = content
        view = memoryview(content)
        if _written is not None:
            fb_size = 4 + struct.unpack_from("<I", view)[0]
        else:
            fb_size = verify_flatbuffer(view)
        self._fb = view[:fb_size]
        self._root = FbLightBinary.GetRootAs(self._fb, 4)
        # Another version's integrity may be defined otherwise: the version is checked first
        # (it only refuses), then the integrity hash, before any other field is used.
        self._check_version()
        if _written is None:
            _check_integrity(self._fb, self._root)
        # The sample the fingerprints' statistics of large outputs were taken over (format
        # 1.2's when the file does not say: it recorded none).
        self.fingerprint_sample = Sample(self._root.FingerprintRuns(), self._root.FingerprintRun())
        if _written is None and min(self.fingerprint_sample) == 0:
            raise InvalidBinaryError(
                f"fingerprint sample of {self.fingerprint_sample.runs} runs of "
                f"{self.fingerprint_sample.run} elements: both must be at least 1 (the file "
                "is corrupt; recapture it)"
            )
        data_offset = align(fb_size)
        if len(view) < data_offset and self._root.BlobsLength():
            raise InvalidBinaryError(
                "file ends before its data section begins (truncated?)", offset=len(view)
            )
        infos = _written if _written is not None else _blob_infos(self._root, self._fb)
        self.blobs = BlobTable(infos, view[data_offset:], data_offset)
        self.blobs.check_bounds()
        self._commands: list[CommandT] | None = None
        self._io: tuple[list[IoBuffer], list[IoBuffer]] | None = None

    # --- construction ---------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike) -> LightBinary:
        """Map a file read-only; cost is independent of how much payload it holds."""
        path = as_path(path, "LightBinary.load")
        with open_regular(path, "a light binary") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise InvalidBinaryError(f"{path} is empty, not a light binary", offset=0)
            content = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return cls(content, path)

    @classmethod
    def build(
        cls,
        commands: Sequence[CommandT],
        blobs: BlobStore,
        *,
        producer: str,
        metadata: MetadataT,
        device: DeviceDescriptionT,
        inputs: Sequence[int] | None = None,
        outputs: Sequence[int] | None = None,
        fingerprints: Sequence[Fingerprint] | Mapping[str, Sequence] = (),
        fingerprint_sample: Sample = SAMPLE,
    ) -> LightBinary:
        """Serialise commands and blobs into a new binary (the writer's one entry point).
        `inputs` and `outputs` are buffer ids (see io.py); without them the binary lists
        none, and readers derive them from the commands. `fingerprints` (see
        fingerprints.py: Fingerprint rows, or their columns as `to_columns` makes them) are
        written when there are any, with the sample their statistics were taken over."""
        b = flatbuffers.Builder(1024 + 32 * len(commands))
        commands_vec = pack_commands(b, commands)
        infos = blobs.infos
        columns = {
            "offset": [i.offset for i in infos],
            "storedSize": [i.stored_size for i in infos],
            "size": [i.size for i in infos],
            "compression": [i.compression for i in infos],
            "hash": [i.hash for i in infos],
        }
        blobs_vec = pack_tables(b, "Blob", columns)
        io_vecs = [None if v is None else _io_vector(b, v) for v in (inputs, outputs)]
        prints_vec = _fingerprints_vector(b, fingerprints) if fingerprints else None
        fb_root = _pack_root(
            b,
            producer,
            metadata,
            device,
            commands_vec,
            blobs_vec,
            *io_vecs,
            prints_vec,
            fingerprint_sample,
        )
        b.FinishSizePrefixed(fb_root, file_identifier=IDENTIFIER)
        content = bytearray(b.Output())
        stamp_integrity(content)
        content.extend(bytes(align(len(content)) - len(content)))
        for payload in blobs.payloads:
            content.extend(bytes(align(len(content)) - len(content)))
            content.extend(payload)
        return cls(content, _written=blobs.infos)

    # --- header ---------------------------------------------------------------------
    def _check_version(self) -> None:
        v = self._root.Version()
        major, minor = v.Major(), v.Minor()
        check_readable(major, minor)
        expected = KNOWN_SCHEMAS.get((major, minor))
        if self._root.SchemaHash() != expected:
            raise UnsupportedVersionError(
                f"schema hash {self._root.SchemaHash():#018x} does not match format "
                f"{major}.{minor} (expected {expected:#018x}): the file was written by an "
                "unreleased or modified mnrt"
            )

    @property
    def version(self) -> tuple[int, int]:
        v = self._root.Version()
        return (v.Major(), v.Minor())

    @property
    def schema_hash(self) -> int:
        return self._root.SchemaHash()

    @property
    def producer(self) -> str:
        return decoded(self._root.Producer())

    @property
    def metadata(self) -> dict:
        m = self._root.Metadata()
        if m is None:
            return {}
        return {
            "created_unix_s": m.CreatedUnixS(),
            "hostname": decoded(m.Hostname()),
            "python": decoded(m.Python()),
            "mnrt_version": decoded(m.MnrtVersion()),
            "description": decoded(m.Description()),
        }

    @property
    def device(self) -> dict:
        d = self._root.Device()
        if d is None:
            return {}
        return {
            "arch": decoded(d.Arch()),
            "device_count": d.DeviceCount(),
            "dram_bytes": d.DramBytes(),
        }

    # --- content --------------------------------------------------------------------
    @property
    def commands(self) -> list[CommandT]:
        """Every command, decoded once (the one command list all consumers share). A table
        listed many times (the writer shares identical commands) is decoded once and its
        object listed each time: the verifier bounds what decoding costs on that basis."""
        if self._commands is None:
            self._commands = read_commands(self._fb, self._root._tab.Pos)
        return self._commands

    def unpacked(self) -> LightBinaryT:
        """The whole root in FlatBuffers' object API, decoded afresh: the form JSON and
        `mnrt dump` show (replay reads `commands`, decoded once)."""
        return LightBinaryT.InitFromObj(self._root)

    @property
    def io_recorded(self) -> bool:
        """Whether the binary lists its inputs and outputs (format 1.1 on); otherwise
        `inputs` and `outputs` are derived from its commands."""
        return not (self._root.InputsIsNone() or self._root.OutputsIsNone())

    def _io_lists(self) -> tuple[list[IoBuffer], list[IoBuffer]]:
        if self._io is None:
            self._io = describe(self.commands, *self.io_ids)
        return self._io

    @property
    def io_ids(self) -> tuple[list[int], list[int]]:
        """The input and output buffer ids as the binary lists them (derived when it has
        no lists), before any check: the validator compares them with the commands."""
        root = self._root
        if not self.io_recorded:
            return derive(self.commands)
        return (
            [int(i) for i in root.InputsAsNumpy()] if root.InputsLength() else [],
            [int(i) for i in root.OutputsAsNumpy()] if root.OutputsLength() else [],
        )

    @property
    def inputs(self) -> list[IoBuffer]:
        """The buffers the host wrote, by unique name (see format/io.py)."""
        return self._io_lists()[0]

    @property
    def outputs(self) -> list[IoBuffer]:
        """The buffers the host read back or checked against a golden, by unique name."""
        return self._io_lists()[1]

    @property
    def fingerprints(self) -> list[Fingerprint]:
        """The per-kernel fingerprints the capture recorded (none before format 1.2, or
        when it recorded none), in (command, kernel, output) order as written."""
        return [
            Fingerprint(c, k, o, Stats(*rest))
            for c, k, o, *rest in _rows(self._root, self._fb, _PRINTS_SLOT, _PRINT_FIELDS)
        ]

    def __len__(self) -> int:
        return self._root.CommandsLength()

    def __iter__(self) -> Iterator[CommandT]:
        return iter(self.commands)

    @property
    def flatbuffer_size(self) -> int:
        return len(self._fb)

    @property
    def file_size(self) -> int:
        return len(memoryview(self._content))

    # --- output ---------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        return bytes(memoryview(self._content))

    def save(self, path: str | os.PathLike) -> None:
        """Write the binary atomically: a temporary file in the same folder, then rename."""
        write_atomically(as_path(path, "LightBinary.save"), memoryview(self._content))

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        return (
            f"<LightBinary v{self.version[0]}.{self.version[1]}{where}: {len(self)} commands, "
            f"{len(self.blobs)} blobs, {self.file_size} bytes>"
        )


def check_readable(major: int, minor: int) -> None:
    """Refuse a format version this mnrt cannot read: another major, or a newer minor (a
    binary's and a JSON document's alike)."""
    if major != FORMAT_VERSION[0] or minor > FORMAT_VERSION[1]:
        raise UnsupportedVersionError(
            f"format version {major}.{minor} is not readable by this mnrt, which reads "
            f"{FORMAT_VERSION[0]}.0 to {FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}; "
            "upgrade mnrt to read newer binaries"
        )


def _slot(table: str, field: str) -> int:
    return next(f["slot"] for f in LAYOUT["tables"][table]["fields"] if f["name"] == field)


def _scalar_fields(table: str) -> list[tuple[int, str]]:
    """(slot, struct format) of each field of a table of scalars, in schema order."""
    return [
        (f["slot"], "<" + STRUCT_CODES[scalar_type(f)]) for f in LAYOUT["tables"][table]["fields"]
    ]


_BLOBS_SLOT, _BLOB_FIELDS = _slot("LightBinary", "blobs"), _scalar_fields("Blob")
_PRINTS_SLOT = _slot("LightBinary", "fingerprints")
_PRINT_FIELDS = _scalar_fields("KernelFingerprint")


def _blob_infos(root: FbLightBinary, fb: memoryview) -> list[BlobInfo]:
    return [BlobInfo(*row) for row in _rows(root, fb, _BLOBS_SLOT, _BLOB_FIELDS)]


def _rows(root: FbLightBinary, fb: memoryview, slot: int, fields: list[tuple[int, str]]) -> list:
    """The field values of every table in a root vector of scalar-only tables (the blob
    list, the fingerprints). Tables written by mnrt share one vtable, so all of them are
    read with a few numpy gathers; others are read one by one. The verifier has already
    checked every offset used here (and that each field is aligned to its size)."""
    tab = root._tab
    at = tab.Offset(4 + 2 * slot)
    if at == 0:
        return []
    vec, n = tab.Vector(at), tab.VectorLen(at)
    elems = vec + 4 * np.arange(n, dtype=np.int64)
    pos = elems + np.frombuffer(fb, "<u4", n, vec).astype(np.int64)
    words = np.frombuffer(fb, "<i4", len(fb) // 4)
    vtables = pos - words[pos // 4]
    if n == 0 or not np.all(vtables == vtables[0]):
        return [_row(fb, int(p), fields) for p in pos]
    vt = int(vtables[0])
    vsize = struct.unpack_from("<H", fb, vt)[0]
    columns = []
    for field_slot, fmt in fields:
        entry = 4 + 2 * field_slot
        off = struct.unpack_from("<H", fb, vt + entry)[0] if entry < vsize else 0
        if off == 0:
            columns.append([0] * n)
            continue
        size = struct.calcsize(fmt)
        view = np.frombuffer(fb, fmt.replace("<", "<" if size > 1 else "="), len(fb) // size)
        columns.append(view[(pos + off) // size].tolist())
    return list(zip(*columns))


def _row(fb: memoryview, pos: int, fields: list[tuple[int, str]]) -> tuple:
    vt = pos - struct.unpack_from("<i", fb, pos)[0]
    vsize = struct.unpack_from("<H", fb, vt)[0]
    values = []
    for field_slot, fmt in fields:
        entry = 4 + 2 * field_slot
        off = struct.unpack_from("<H", fb, vt + entry)[0] if entry < vsize else 0
        values.append(struct.unpack_from(fmt, fb, pos + off)[0] if off else 0)
    return tuple(values)


def _pack_root(
    b: flatbuffers.Builder,
    producer: str,
    metadata: MetadataT,
    device: DeviceDescriptionT,
    commands_vec: int,
    blobs_vec: int,
    inputs_vec: int | None = None,
    outputs_vec: int | None = None,
    fingerprints_vec: int | None = None,
    fingerprint_sample: Sample = SAMPLE,
) -> int:
    producer_off = b.CreateString(producer)
    metadata_off = metadata.Pack(b)
    device_off = device.Pack(b)
    fb_root.LightBinaryStart(b)
    fb_root.LightBinaryAddVersion(b, CreateVersion(b, *FORMAT_VERSION))
    fb_root.LightBinaryAddSchemaHash(b, SCHEMA_HASH)
    fb_root.LightBinaryAddProducer(b, producer_off)
    fb_root.LightBinaryAddMetadata(b, metadata_off)
    fb_root.LightBinaryAddDevice(b, device_off)
    fb_root.LightBinaryAddCommands(b, commands_vec)
    fb_root.LightBinaryAddBlobs(b, blobs_vec)
    if inputs_vec is not None:
        fb_root.LightBinaryAddInputs(b, inputs_vec)
    if outputs_vec is not None:
        fb_root.LightBinaryAddOutputs(b, outputs_vec)
    b.forceDefaults = True  # the integrity field is always written: 0 until stamped
    fb_root.LightBinaryAddIntegrity(b, 0)
    b.forceDefaults = False
    if fingerprints_vec is not None:
        fb_root.LightBinaryAddFingerprints(b, fingerprints_vec)
        b.forceDefaults = True  # a file says which sample it took, even format 1.2's
        fb_root.LightBinaryAddFingerprintRuns(b, fingerprint_sample.runs)
        fb_root.LightBinaryAddFingerprintRun(b, fingerprint_sample.run)
        b.forceDefaults = False
    return fb_root.LightBinaryEnd(b)


_INTEGRITY_SLOT = next(
    f["slot"] for f in LAYOUT["tables"]["LightBinary"]["fields"] if f["name"] == "integrity"
)


def _integrity_at(fb: memoryview | bytearray, root: FbLightBinary) -> int | None:
    """Where the root's integrity field lies in `fb` (the size-prefixed FlatBuffer), or None
    when the binary has none (format 1.0)."""
    off = root._tab.Offset(4 + 2 * _INTEGRITY_SLOT)
    return root._tab.Pos + off if off else None


def integrity(fb: memoryview | bytes | bytearray, at: int) -> int:
    """The integrity hash of a light binary: xxh3-64 of its size-prefixed FlatBuffer (the
    file's first 4 + size bytes: size prefix, header, commands and blob table) with the 8
    bytes at `at` (the integrity field itself) read as zero. Blob payloads are not included:
    each blob carries the hash of its own bytes, checked when it is read."""
    h = xxhash.xxh3_64()
    h.update(fb[:at])
    h.update(bytes(8))
    h.update(fb[at + 8 :])
    return h.intdigest()


def stamp_integrity(content: bytearray) -> None:
    """Write the integrity hash of the light binary `content` begins with into its integrity
    field (the writer's last step; tests that edit a binary's bytes restamp it with this)."""
    try:
        fb_size = 4 + struct.unpack_from("<I", content)[0]
        fb = memoryview(content)[:fb_size]
        at = _integrity_at(fb, FbLightBinary.GetRootAs(fb, 4))
    except (struct.error, TypeError, IndexError) as e:  # too short, or a root offset past it
        raise InvalidBinaryError(
            f"no light binary to stamp: its root cannot be read ({e})", offset=0
        ) from None
    if at is None:
        raise InvalidBinaryError("the binary has no integrity field to stamp", offset=0)
    if not 0 <= at <= len(fb) - 8:
        raise InvalidBinaryError(
            f"the integrity field at {at} lies outside the {len(fb)}-byte FlatBuffer",
            offset=at,
        )
    struct.pack_into("<Q", content, at, integrity(fb, at))


def _check_integrity(fb: memoryview, root: FbLightBinary) -> None:
    """Refuse a FlatBuffer whose integrity hash does not match its bytes (corrupted or
    edited); one without the field is accepted only as format 1.0, which predates it. Runs
    right after the structural and version checks, before any other field is used."""
    at = _integrity_at(fb, root)
    if at is None:
        v = root.Version()
        if (v.Major(), v.Minor()) == (1, 0):
            return
        raise InvalidBinaryError(
            f"format {v.Major()}.{v.Minor()} binary has no integrity hash (the file is "
            "corrupted or was not written by mnrt); write it again",
            offset=0,
        )
    stored = struct.unpack_from("<Q", fb, at)[0]
    actual = integrity(fb, at)
    if stored != actual:
        raise InvalidBinaryError(
            f"integrity hash mismatch: the header, commands or blob table were changed after "
            f"the file was written (stored {stored:#018x}, computed {actual:#018x}); the file "
            "is corrupted: write or copy it again",
            offset=at,
        )


def _fingerprints_vector(
    b: flatbuffers.Builder, fingerprints: Sequence[Fingerprint] | Mapping[str, Sequence]
) -> int:
    columns = fingerprints if isinstance(fingerprints, Mapping) else to_columns(fingerprints)
    return pack_tables(b, "KernelFingerprint", columns)


def _io_vector(b: flatbuffers.Builder, ids: Sequence[int]) -> int:
    return b.CreateNumpyVector(np.asarray(ids, np.uint32))
