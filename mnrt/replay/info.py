"""Statistics of a binary for `mnrt info`: what it holds and what its payload costs."""

from __future__ import annotations

from collections import Counter

from ..device.dtypes import BY_CODE
from ..format import LightBinary
from ..format.fb.CommandUnion import CommandUnion as U
from ..format.fields import BLOB_FIELDS
from ..format.io import IoBuffer
from .plan import Plan, validate

_NAMES = {v: k for k, v in vars(U).items() if not k.startswith("_") and isinstance(v, int)}


def info(binary: LightBinary) -> dict:
    """What `mnrt info` shows (validating the binary, blobs aside), as JSON-ready data."""
    plan = validate(binary, blobs=False)
    counts = Counter(_NAMES.get(c.cmdType, str(c.cmdType)) for c in binary.commands)
    referenced = 0
    for c in binary.commands:
        for name in BLOB_FIELDS.get(c.cmdType, ()):
            blob = getattr(c.cmd, name)
            if blob:
                referenced += binary.blobs.info(blob).size
    blobs = binary.blobs.infos
    unique = sum(b.size for b in blobs)
    stored = sum(b.stored_size for b in blobs)
    kernels = Counter(k.op for p in plan.programs.values() for k in p.kernels)
    return {
        "path": str(binary.path) if binary.path else None,
        "file_bytes": binary.file_size,
        "version": ".".join(map(str, binary.version)),
        "schema_hash": f"{binary.schema_hash:#018x}",
        "producer": binary.producer,
        "metadata": binary.metadata,
        "device": binary.device,
        "commands": len(binary),
        "commands_by_type": dict(sorted(counts.items())),
        "buffers": len(plan.buffers),
        "buffer_bytes": sum(b.nbytes for b in plan.buffers.values()),
        "peak_device_bytes": max(plan.peak_bytes.values(), default=0),
        "programs": len(plan.programs),
        "kernels_by_op": dict(sorted(kernels.items())),
        "slot_views": sum(len(p.views) for p in plan.programs.values()),
        "kernel_fingerprints": sum(len(v) for v in plan.fingerprints.values()),
        "fingerprint_sample": list(binary.fingerprint_sample),
        "blobs": len(blobs),
        "payload_bytes_referenced": referenced,
        "payload_bytes_unique": unique,
        "payload_bytes_stored": stored,
        "dedup_ratio": referenced / unique if unique else 1.0,
        "compression_ratio": unique / stored if stored else 1.0,
        "devices": sorted(set(plan.device_index.values())),
        "copies": _copies(binary, plan),
        "events": len(plan.event_queue),
        "io_recorded": binary.io_recorded,
        "inputs": [io_dict(e) for e in binary.inputs],
        "outputs": [io_dict(e) for e in binary.outputs],
    }


def _copies(binary: LightBinary, plan: Plan) -> dict:
    """How many copies stay on one device and how many cross between devices, and their
    bytes: what a placement that folds devices turns from link traffic into local copies."""
    local = cross = cross_bytes = 0
    for c in binary.commands:
        if c.cmdType == U.CopyBuffer:
            src, dst = plan.buffers[c.cmd.srcId], plan.buffers[c.cmd.dstId]
            if plan.device_index[src.device] == plan.device_index[dst.device]:
                local += 1
            else:
                cross += 1
                cross_bytes += src.nbytes
    return {"local": local, "cross_device": cross, "cross_device_bytes": cross_bytes}


def io_dict(e: IoBuffer) -> dict:
    """An input or output as `mnrt info --json` and `mnrt compile --json` list it."""
    dtype = BY_CODE.get(e.dtype)
    return {
        "name": e.name,
        "shape": list(e.shape),
        "dtype": dtype.name if dtype else str(e.dtype),
        "buffer_id": e.buffer_id,
    }
