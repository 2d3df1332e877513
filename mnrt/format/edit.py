"""Binary surgery: a new binary made of another's commands, rearranged (trim, optimize,
reduce, tests that perturb a binary). Commands keep the source's blob ids; the editor
copies each payload a kept command refers to into the new binary (stored once, compressed
afresh), and new payloads (state snapshots, edited weights) get ids past the source's.
Command bodies are copied before their blob ids change, so the source is never altered.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from .binary import LightBinary
from .blobs import DEFAULT_LEVEL, BlobStore
from .fb.Command import CommandT
from .fb.DeviceDescription import DeviceDescriptionT
from .fb.Metadata import MetadataT
from .fields import BLOB_FIELDS, attr_name
from .fingerprints import Fingerprint
from .io import derive

# zstd's strongest ordinary level (what optimize packs at, where it pays).
STRONG_LEVEL = 19
_BLOB_ATTRS = {kind: tuple(attr_name(n) for n in names) for kind, names in BLOB_FIELDS.items()}


def blob_attrs(kind: int) -> tuple[str, ...]:
    """The object-API attributes of a command type that hold blob ids."""
    return _BLOB_ATTRS.get(kind, ())


class Editor:
    """Builds binaries from `source`'s commands and blobs plus new payloads."""

    def __init__(self, source: LightBinary) -> None:
        self.source = source
        self.extra: list[bytes] = []

    def add_blob(self, data: bytes | np.ndarray) -> int:
        """A new payload, as a blob id the commands given to `build` may use."""
        self.extra.append(data.tobytes() if isinstance(data, np.ndarray) else bytes(data))
        return len(self.source.blobs) + len(self.extra)

    def payload(self, blob_id: int) -> bytes | memoryview:
        n = len(self.source.blobs)
        return self.source.blobs.read(blob_id) if blob_id <= n else self.extra[blob_id - n - 1]

    def _packed(self, blob_id: int) -> memoryview | None:
        """A source blob's zstd frame, for the new store to keep where it is the smaller."""
        return self.source.blobs.stored(blob_id) if blob_id <= len(self.source.blobs) else None

    def build(
        self,
        commands: Sequence[CommandT],
        *,
        fingerprints: Sequence[Fingerprint] = (),
        inputs: Sequence[int] | None = None,
        outputs: Sequence[int] | None = None,
        level: int = DEFAULT_LEVEL,
        producer: str | None = None,
    ) -> LightBinary:
        """A binary of `commands` (blob ids as above), with the source's header. Without
        `inputs`/`outputs`, the source's lists are kept, less the buffers the commands no
        longer write or read (a source without lists gives none: readers derive them)."""
        if inputs is None and outputs is None and self.source.io_recorded:
            written, read = derive(commands)
            src_in, src_out = self.source.io_ids
            inputs = [i for i in src_in if i in set(written)]
            outputs = [o for o in src_out if o in set(read)]
        store = BlobStore(level)
        moved: dict[int, int] = {}
        out = []
        for c in commands:
            attrs = blob_attrs(c.cmdType)
            body = c.cmd
            if any(getattr(body, a, 0) for a in attrs):
                body = copy.copy(body)
                for a in attrs:
                    old = getattr(body, a)
                    if old:
                        if old not in moved:
                            moved[old] = store.add(self.payload(old), self._packed(old))
                        setattr(body, a, moved[old])
            out.append(CommandT(c.cmdType, body))
        src = self.source
        return LightBinary.build(
            out,
            store,
            producer=producer or src.producer,
            metadata=_metadata(src),
            device=_device(src),
            inputs=inputs,
            outputs=outputs,
            fingerprints=fingerprints,
            fingerprint_sample=src.fingerprint_sample,
        )


def _metadata(src: LightBinary) -> MetadataT:
    m = src.metadata
    return MetadataT(
        createdUnixS=m.get("created_unix_s", 0.0),
        hostname=m.get("hostname", ""),
        python=m.get("python", ""),
        mnrtVersion=m.get("mnrt_version", ""),
        description=m.get("description", ""),
    )


def _device(src: LightBinary) -> DeviceDescriptionT:
    d = src.device
    return DeviceDescriptionT(
        arch=d.get("arch", ""),
        deviceCount=d.get("device_count", 0),
        dramBytes=d.get("dram_bytes", 0),
    )
