"""Kernel fingerprints in the file (format 1.2; their sample since 1.3): written, read back,
through JSON and back."""

from __future__ import annotations

import json

import numpy as np
import pytest
from binaries import chain_capture
from cli_harness import assert_one_line_error, invoke_cli
from hypothesis import given
from hypothesis import strategies as st

import mnrt
from mnrt.format import jsonio
from mnrt.format.edit import Editor
from mnrt.format.fingerprints import (
    SAMPLE,
    Fingerprint,
    Sample,
    Stats,
    columns_of_commands,
    to_columns,
)


def test_fingerprints_survive_saving_and_the_json_form(tmp_path):
    binary = chain_capture(6)
    assert len(binary.fingerprints) == 6
    path = tmp_path / "c.mnlb"
    binary.save(path)
    assert mnrt.LightBinary.load(path).fingerprints == binary.fingerprints
    doc = json.loads(jsonio.dumps(binary))
    assert len(doc["fingerprints"]) == 6
    assert jsonio.from_json(doc).fingerprints == binary.fingerprints


_stats = st.builds(
    Stats,
    st.integers(0, 2**64 - 1),
    st.floats(),
    st.floats(),
    st.floats(),
    st.integers(0, 2**40),
)


@given(
    st.lists(st.lists(st.lists(_stats, min_size=1, max_size=3), max_size=4), max_size=4).map(
        lambda commands: [(3 * i + 1, kernels) for i, kernels in enumerate(commands)]
    )
)
def test_a_capture_s_commands_make_the_columns_their_fingerprints_would(commands):
    """A capture hands its fingerprints to the writer as columns made per command, not a
    Fingerprint per output: the same columns, the same file."""
    rows = [
        Fingerprint(index, k, j, s)
        for index, kernels in commands
        for k, outputs in enumerate(kernels)
        for j, s in enumerate(outputs)
    ]
    flat = [
        (i, [len(o) for o in kernels], [s for o in kernels for s in o]) for i, kernels in commands
    ]
    want, got = to_columns(rows), columns_of_commands(flat)
    assert list(got) == list(want)
    for name, column in want.items():
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(column))


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


def test_the_sample_of_the_statistics_is_recorded_and_kept(tmp_path):
    binary = chain_capture(3)
    assert binary.fingerprint_sample == SAMPLE
    path = tmp_path / "c.mnlb"
    Editor(binary).build(binary.commands, fingerprints=binary.fingerprints).save(path)
    assert mnrt.LightBinary.load(path).fingerprint_sample == SAMPLE
    doc = json.loads(jsonio.dumps(binary))
    assert (doc["fingerprint_runs"], doc["fingerprint_run"]) == SAMPLE
    doc["fingerprint_runs"], doc["fingerprint_run"] = 64, 256
    older = jsonio.from_json(doc)
    assert older.fingerprint_sample == (64, 256)
    kept = Editor(older).build(older.commands, fingerprints=older.fingerprints)
    assert kept.fingerprint_sample == (64, 256)  # trim, optimize and reduce keep it


def test_a_binary_that_does_not_name_its_sample_took_format_1_2s():
    """Format 1.2 did not record the sample; it took 64 runs of 256 (the schema's defaults)."""
    binary = chain_capture(2)
    doc = json.loads(jsonio.dumps(binary))
    del doc["fingerprint_runs"], doc["fingerprint_run"]
    assert jsonio.from_json(doc).fingerprint_sample == (64, 256)


@pytest.mark.parametrize("sample", [(0, 32), (64, 0)])
def test_a_file_whose_sample_has_no_elements_is_refused(sample, tmp_path):
    binary = chain_capture(2)
    binary.fingerprint_sample = Sample(*sample)  # what a corrupt or hostile file would say
    path = tmp_path / "bad.mnlb"
    Editor(binary).build(binary.commands, fingerprints=binary.fingerprints).save(path)
    with pytest.raises(mnrt.InvalidBinaryError, match="fingerprint sample of .* at least 1"):
        mnrt.LightBinary.load(path)
    assert_one_line_error(*invoke_cli("run", path), "fingerprint sample of")
