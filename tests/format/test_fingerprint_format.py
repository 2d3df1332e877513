"""Kernel fingerprints in the file (format 1.2): written, read back, through JSON and back."""

from __future__ import annotations

import json

from binaries import chain_capture

import mnrt
from mnrt.format import jsonio


def test_fingerprints_survive_saving_and_the_json_form(tmp_path):
    binary = chain_capture(6)
    assert len(binary.fingerprints) == 6
    path = tmp_path / "c.mnlb"
    binary.save(path)
    assert mnrt.LightBinary.load(path).fingerprints == binary.fingerprints
    doc = json.loads(jsonio.dumps(binary))
    assert len(doc["fingerprints"]) == 6
    assert jsonio.from_json(doc).fingerprints == binary.fingerprints


def test_a_fingerprint_naming_a_command_without_kernels_is_refused(tmp_path):
    doc = json.loads(jsonio.dumps(chain_capture(2)))
    doc["fingerprints"][0]["command"] = 0  # OpenDevice runs no kernel
    binary = jsonio.from_json(doc)
    try:
        mnrt.replay(binary, locate=True)
    except mnrt.InvalidBinaryError as e:
        assert "names command 0, which runs no kernels" in str(e)
    else:
        raise AssertionError("a fingerprint of command 0 was accepted")
