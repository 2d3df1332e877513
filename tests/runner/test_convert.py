"""`mnrt convert` and the JSON form of light binaries: hostile documents and
awkward destinations give one line and leave nothing behind, and every key is checked."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import pytest
from cli_harness import one_line_error, run

from mnrt.errors import MnrtError
from mnrt.format import LightBinary, jsonio

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "traced_loop.mnlb"


@pytest.fixture(scope="module")
def sample_doc():
    return jsonio.to_json(LightBinary.load(SAMPLE))


def test_an_enqueue_program_without_buffer_ids_converts(sample_doc):
    # The vector is optional; the packer once learned its template from such a command.
    doc = copy.deepcopy(sample_doc)
    for c in doc["commands"]:
        if c["cmd"]["type"] == "EnqueueProgram":
            del c["cmd"]["buffer_ids"]
            break
    binary = jsonio.from_json(doc)
    assert len(binary) == len(doc["commands"])


def test_a_blob_folder_name_taken_by_a_file_is_one_line(tmp_path):
    (tmp_path / "out.blobs").write_text("not a folder")
    r = run("convert", str(SAMPLE), str(tmp_path / "out.json"), "--blob-files")
    assert r.exit_code == 2 and "not a folder" in one_line_error(r)
    with pytest.raises(MnrtError, match="cannot write blob files"):
        jsonio.to_json(LightBinary.load(SAMPLE), tmp_path / "out.blobs")


def test_a_failed_conversion_leaves_no_blob_folder(tmp_path):
    r = run("convert", str(SAMPLE), str(tmp_path / "foo.blobs"), "--blob-files")
    assert r.exit_code == 2 and "same name" in one_line_error(r)
    (tmp_path / "out.json").mkdir()  # the JSON cannot be written: a folder is there
    r = run("convert", str(SAMPLE), str(tmp_path / "out.json"), "--blob-files")
    assert r.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_failed_conversion_keeps_the_earlier_blob_folder(tmp_path):
    assert run("convert", str(SAMPLE), str(tmp_path / "out.json"), "--blob-files").exit_code == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out.blobs").iterdir()}
    (tmp_path / "out.json").unlink()
    (tmp_path / "out.json").mkdir()
    assert run("convert", str(SAMPLE), str(tmp_path / "out.json"), "--blob-files").exit_code == 2
    assert {p.name: p.read_bytes() for p in (tmp_path / "out.blobs").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.blobs", "out.json"]


def test_a_destination_name_as_long_as_names_go_is_written(tmp_path):
    dest = tmp_path / ("b" * 245 + ".mnlb")  # 250 bytes: legal; a name made from it was not
    src = tmp_path / "in.json"
    src.write_text(json.dumps(jsonio.to_json(LightBinary.load(SAMPLE))))
    assert run("convert", str(src), str(dest)).exit_code == 0
    assert LightBinary.load(dest).file_size > 0


def test_a_fifo_destination_is_refused_not_replaced(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    r = run("convert", str(SAMPLE), str(fifo))
    assert r.exit_code == 2 and "not a regular file" in one_line_error(r)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("where", ["root", "device", "desc", "version", "blob"])
def test_unknown_keys_are_refused_everywhere(sample_doc, where):
    doc = copy.deepcopy(sample_doc)
    target = {
        "root": doc,
        "device": doc["device"],
        "desc": next(c["cmd"]["desc"] for c in doc["commands"]
                     if c["cmd"]["type"] == "CreateBuffer"),
        "version": doc["version"],
        "blob": doc["blobs"][0],
    }[where]  # fmt: skip
    target["type" if where in ("root", "device", "desc") else "bogus"] = "x"
    with pytest.raises(MnrtError, match="unknown field"):
        jsonio.from_json(doc)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("size", 10**6, "is not the"), ("size", "12", "is not the"), ("hash", 5, "must be a string"),
     ("id", True, "expected an object with id")],
)  # fmt: skip
def test_a_blob_entry_says_what_its_data_is(sample_doc, key, value, message):
    doc = copy.deepcopy(sample_doc)
    doc["blobs"][0][key] = value
    with pytest.raises(MnrtError, match=message):
        jsonio.from_json(doc)


def test_a_document_built_in_python_with_other_keys_is_an_mnrt_error():
    doc = {"format": jsonio.JSON_FORMAT, "version": {"major": 1, "minor": 0}, 1: 2}
    with pytest.raises(MnrtError, match="keys must be strings"):
        jsonio.from_json(doc)


def test_an_integer_too_long_to_read_is_said_plainly(tmp_path):
    src = tmp_path / "in.json"
    src.write_text('{"format": "mnrt-light-binary-json", "a": ' + "9" * 5000 + "}")
    r = run("convert", str(src), str(tmp_path / "out.mnlb"))
    line = one_line_error(r)
    assert "more than 4300 digits" in line and "set_int_max_str_digits" not in line
