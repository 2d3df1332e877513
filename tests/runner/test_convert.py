"""`mnrt convert` and the JSON form of light binaries: hostile documents and
awkward destinations give one line and leave nothing behind, and every key is checked."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import pytest
from binaries import json_paths, small_capture
from cli_harness import assert_one_line_error, invoke_cli, one_line_error, run
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_source_inside_the_blob_folder_is_refused_not_deleted(tmp_path):
    """The folder the blob files go to is replaced whole: a source inside it was converted
    and then gone."""
    (tmp_path / "out.blobs").mkdir()
    source = tmp_path / "out.blobs" / "src.mnlb"
    source.write_bytes(Path(SAMPLE).read_bytes())
    r = run("convert", str(source), str(tmp_path / "out.json"), "--blob-files")
    assert r.exit_code == 2 and "the source lies in" in one_line_error(r)
    assert source.read_bytes() == Path(SAMPLE).read_bytes()


def test_a_destination_that_is_one_of_the_documents_blob_files_is_refused(tmp_path):
    assert run("convert", str(SAMPLE), str(tmp_path / "out.json"), "--blob-files").exit_code == 0
    blob = next((tmp_path / "out.blobs").iterdir())
    kept = blob.read_bytes()
    r = run("convert", str(tmp_path / "out.json"), str(blob))
    assert r.exit_code == 2 and "one of the document's blob files" in one_line_error(r)
    assert blob.read_bytes() == kept


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
    doc = {"format": jsonio.JSON_FORMAT, "version": {"major": 1, "minor": 0}, "commands": []}
    doc[1] = 2
    with pytest.raises(MnrtError, match="keys must be strings"):
        jsonio.from_json(doc)


def test_an_integer_too_long_to_read_is_said_plainly(tmp_path):
    src = tmp_path / "in.json"
    src.write_text('{"format": "mnrt-light-binary-json", "a": ' + "9" * 5000 + "}")
    r = run("convert", str(src), str(tmp_path / "out.mnlb"))
    line = one_line_error(r)
    assert "more than 4300 digits" in line and "set_int_max_str_digits" not in line


def test_convert_leaves_its_input_and_nothing_else_when_it_fails(small_binary, tmp_path):
    source = tmp_path / "doc.json"
    source.write_text(json.dumps({**_doc(small_binary), "blobs": 5}))
    before = source.read_bytes()
    out = tmp_path / "out.mnlb"
    assert_one_line_error(*invoke_cli("convert", source, out), "$.blobs: expected a list")
    assert source.read_bytes() == before and not out.exists()
    binary = tmp_path / "b.mnlb"
    small_binary.save(binary)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        assert_one_line_error(*invoke_cli("convert", binary, locked / "b.json"), "cannot write")
    finally:
        locked.chmod(0o700)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.mnlb", "doc.json", "locked"]


def _doc(small_binary) -> dict:
    return json.loads(jsonio.dumps(small_binary))


def _with(key: str, value):
    def edit(doc: dict) -> dict:
        doc[key] = value
        return doc

    return edit


JSON_CASES = {
    "blobs not a list": (_with("blobs", 5), "$.blobs: expected a list"),
    "struct not an object": (_with("version", 5), "expected an object for Version"),
    "bool as an enum": (
        lambda d: d["commands"][1]["cmd"]["desc"].update(dtype=True) or d,
        "True is not a DType",
    ),
    "lone surrogate": (
        lambda d: d["metadata"].update(hostname="\ud800") or d,
        "is not a valid string",
    ),
    "integer beyond a double": (
        lambda d: d["metadata"].update(created_unix_s=10**400) or d,
        "... (401 characters) is not a valid double",
    ),
    "blob_dir outside the folder": (_with("blob_dir", "/etc"), "must be the plain name"),
    "blob_dir not a string": (_with("blob_dir", ["x"]), "must be the plain name"),
}


@pytest.mark.parametrize("case", list(JSON_CASES))
def test_convert_refuses_malformed_json_documents(small_binary, tmp_path, case):
    edit, pattern = JSON_CASES[case]
    source = tmp_path / "doc.json"
    source.write_text(json.dumps(edit(_doc(small_binary))))
    assert_one_line_error(*invoke_cli("convert", source, tmp_path / "out.mnlb"), pattern)
    assert not (tmp_path / "out.mnlb").exists()


@pytest.mark.parametrize(
    "text, pattern",
    [
        ('{"format": "mnrt-light-binary-json", "producer": 1' + "0" * 5000 + "}", "4300 digits"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"format": "x", "format": "mnrt-light-binary-json"}', "key 'format' twice"),
    ],
    ids=["long integer", "deep nesting", "duplicate key"],
)
def test_convert_refuses_json_that_python_parses_badly(tmp_path, text, pattern):
    source = tmp_path / "doc.json"
    source.write_text(text)
    assert_one_line_error(*invoke_cli("convert", source, tmp_path / "out.mnlb"), pattern)


def test_blob_files_must_be_regular_files_next_to_the_json(small_binary, fifo, tmp_path):
    doc = _doc(small_binary)
    del doc["blobs"][0]["base64"]
    doc["blobs"][0]["file"] = fifo.name
    source = Path(fifo).with_name("doc.json")
    source.write_text(json.dumps(doc))
    assert_one_line_error(*invoke_cli("convert", source, tmp_path / "o.mnlb"), "not a regular file")


def test_blob_files_and_folders_must_not_be_links_out_of_the_folder(small_binary, tmp_path):
    secret = tmp_path / "outside" / "secret.bin"
    secret.parent.mkdir()
    secret.write_bytes(b"not for the binary")
    work = tmp_path / "work"
    work.mkdir()
    doc = _doc(small_binary)
    del doc["blobs"][0]["base64"]
    doc["blobs"][0]["file"] = "blob.bin"
    (work / "blob.bin").symlink_to(secret)
    (work / "doc.json").write_text(json.dumps(doc))
    assert_one_line_error(
        *invoke_cli("convert", work / "doc.json", tmp_path / "o.mnlb"), "symbolic link"
    )

    (work / "blobs").symlink_to(secret.parent, target_is_directory=True)
    (work / "doc.json").write_text(json.dumps({**doc, "blob_dir": "blobs"}))
    assert_one_line_error(
        *invoke_cli("convert", work / "doc.json", tmp_path / "o.mnlb"), "must be the plain name"
    )
    assert not (tmp_path / "o.mnlb").exists()


def test_converting_a_file_onto_itself_is_refused(tmp_path):
    path = tmp_path / "t.mnlb"
    path.write_bytes(SAMPLE.read_bytes())
    link = tmp_path / "link.mnlb"
    os.link(path, link)
    for dest in (path, link):
        code, out = invoke_cli("convert", path, dest)  # before: replaced by its JSON, exit 0
        assert_one_line_error(code, out, "the same file")
        assert path.read_bytes() == SAMPLE.read_bytes()


def test_blob_files_for_json_to_binary_is_an_error(tmp_path, sample_doc):
    src = tmp_path / "t.json"
    src.write_text(json.dumps(sample_doc))
    code, out = invoke_cli("convert", src, tmp_path / "t.mnlb", "--blob-files")
    assert_one_line_error(code, out, "--blob-files applies to binary -> JSON only")
    assert not (tmp_path / "t.mnlb").exists()


@pytest.mark.parametrize("version", [{"major": 99, "minor": 0}, {"major": 1, "minor": 99}])
def test_a_json_of_a_version_this_mnrt_cannot_read_is_refused(tmp_path, sample_doc, version):
    doc = copy.deepcopy(sample_doc)
    doc["version"] = version  # before: restamped 1.0 and written
    src = tmp_path / "t.json"
    src.write_text(json.dumps(doc))
    code, out = invoke_cli("convert", src, tmp_path / "t.mnlb")
    assert_one_line_error(code, out, "is not readable by this mnrt")


@pytest.mark.parametrize("missing", ["commands", "version"])
def test_a_json_that_is_not_a_whole_binary_is_refused(tmp_path, sample_doc, missing):
    doc = {k: v for k, v in sample_doc.items() if k != missing}
    src = tmp_path / "t.json"
    src.write_text(json.dumps(doc))
    code, out = invoke_cli("convert", src, tmp_path / "t.mnlb")  # before: an empty binary
    assert_one_line_error(code, out, f'no "{missing}"')


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(data=st.data())
def test_fuzzed_json_documents_convert_cleanly_or_round_trip(data, small_doc):
    doc = copy.deepcopy(small_doc)
    paths = [p for p in json_paths(doc) if p and p[0] not in ("format",)]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = data.draw(_JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or replaced the path
    try:
        binary = jsonio.from_json(doc)
    except MnrtError:
        return
    again = LightBinary(binary.to_bytes())  # a binary convert writes loads and verifies
    assert jsonio.to_json(again) == jsonio.to_json(binary)


@pytest.fixture(scope="module")
def small_doc():
    return json.loads(jsonio.dumps(small_capture()))
