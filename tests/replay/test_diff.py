"""`mnrt diff`: two binaries compared command by command."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from binaries import (
    chain_capture,
    json_paths,
    light_model_binary,
    perturbed,
    three_buffers,
    three_device_capture,
    weight_sites,
    with_written,
    write_and_read,
)
from cli_harness import assert_one_line_error, invoke_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnrt
from mnrt.format import blobs, jsonio
from mnrt.format.blobs import BlobTable
from mnrt.format.edit import STRONG_LEVEL, Editor
from mnrt.format.fb.CommandUnion import CommandUnion as U
from mnrt.format.fingerprints import SAMPLE
from mnrt.replay.diff import diff, to_text
from mnrt.replay.reduce import with_kernels, without


def test_a_binary_equals_itself_and_a_recapture_of_the_same_program():
    a, b = chain_capture(20), chain_capture(20)
    assert a.metadata["created_unix_s"] != b.metadata["created_unix_s"] or True
    assert diff(a, a)["equal"] and diff(a, b)["equal"]  # creation metadata aside


def test_changed_weights_show_as_a_written_blob_by_hash():
    a = chain_capture(20)
    _, _, gid = weight_sites(a)[3]
    d = diff(a, perturbed(a, gid))
    assert not d["equal"] and d["commands_equal"] == len(a) - 1
    (change,) = d["commands"]
    assert change["change"] == "changed" and change["type"] == "WriteBuffer"
    assert [f["field"] for f in change["fields"]] == ["data.hash"]


def test_fingerprints_taken_over_another_sample_show_in_the_header():
    a = chain_capture(4)
    doc = json.loads(jsonio.dumps(a))
    doc["fingerprint_runs"], doc["fingerprint_run"] = 64, 256  # format 1.2's
    d = diff(a, jsonio.from_json(doc))
    assert not d["equal"] and d["commands_equal"] == len(a) and not d["fingerprints"]["differ"]
    assert [(h["field"], h["a"], h["b"]) for h in d["header"]] == [
        ("fingerprint_sample", tuple(SAMPLE), (64, 256))
    ]
    assert f"~ fingerprint_sample: {SAMPLE!r} -> Sample(runs=64, run=256)" in to_text(d)
    doc["fingerprints"] = []
    unprinted = jsonio.from_json(doc)
    assert unprinted.fingerprint_sample == (64, 256)  # the default: it records none
    assert diff(a, unprinted)["header"] == []  # one side has no fingerprints: no sample
    # said as such, not as every fingerprint of the other side differing
    assert f"~ only A records kernel fingerprints ({len(a.fingerprints)})" in to_text(
        diff(a, unprinted)
    )
    assert "~ only B records kernel fingerprints" in to_text(diff(unprinted, a))


@pytest.mark.parametrize("moved_to", ["a kernel-less command", "beyond the last command"])
def test_a_fingerprint_one_side_lacks_is_a_difference_either_way_round(moved_to):
    """A fingerprint moved off its kernel (as a hostile edit did, to command 281 of 27):
    the diff compared only the first binary's fingerprints, at commands that line up, so
    with the edited binary first it was "equal"."""
    binary = chain_capture(4)  # fingerprinted
    f = binary.fingerprints[0]
    command = 0 if moved_to == "a kernel-less command" else len(binary.commands) + 254
    edited = Editor(binary).build(
        list(binary.commands),
        fingerprints=[f._replace(command=command), *binary.fingerprints[1:]],
    )
    for a, b in ((binary, edited), (edited, binary)):
        d = diff(a, b)
        assert not d["equal"] and len(d["fingerprints"]["differ"]) == 2, d["fingerprints"]


def test_goldens_are_compared_by_value():
    a = chain_capture(20)
    b = chain_capture(21)  # one more kernel: another program and another golden
    d = diff(a, b)
    golden = next(c for c in d["commands"] if c["type"] == "ReadBuffer")
    assert golden["golden"]["comparable"] and golden["golden"]["max_abs_err"] > 0
    assert golden["golden"]["mismatched"] <= golden["golden"]["elements"] == 16
    program = next(c for c in d["commands"] if c["type"] == "CreateProgram")
    assert any(f["field"] == "program.kernels[20]" and f["a"] is None for f in program["fields"])
    assert "golden by value: max_abs_err=" in to_text(d)


def test_a_golden_of_a_partial_element_is_a_difference_not_a_crash(tmp_path):
    """A hostile or broken binary's golden blob may hold bytes that are no whole number of
    its buffer's elements: diff says the goldens differ in size and cannot be compared by
    value (`mnrt verify` refuses the file)."""
    a = chain_capture(4)
    doc = json.loads(jsonio.dumps(a))
    golden = next(c["cmd"]["golden"] for c in doc["commands"] if c["cmd"].get("golden"))
    blob = next(b for b in doc["blobs"] if b["id"] == golden)
    blob["base64"], blob["size"] = "AACAPz4=", 5
    blob.pop("hash", None)
    b = jsonio.from_json(doc)
    (change,) = diff(a, b)["commands"]
    assert change["golden"] == {"comparable": False, "bytes": [64, 5]}
    pa, pb = tmp_path / "a.mnlb", tmp_path / "b.mnlb"
    a.save(pa)
    b.save(pb)
    code, out = invoke_cli("diff", pa, pb)
    assert code == 1 and "golden.size: 64 -> 5" in out and "Traceback" not in out


def test_a_binary_verify_refuses_never_equals_a_valid_one(tmp_path):
    """Ids are compared as renumbered, so a program given the reserved id 0 would line up
    with the original's: the diff says the two differ, in what `mnrt verify` says of each
    (a case a hostile-writer fuzz found)."""
    a = chain_capture(4)
    doc = json.loads(jsonio.dumps(a))
    create = next(c["cmd"] for c in doc["commands"] if c["cmd"]["type"] == "CreateProgram")
    create["program_id"] = 0
    b = jsonio.from_json(doc)
    d = diff(a, b)
    assert not d["equal"]
    (check,) = [h for h in d["header"] if h["field"] == "verify"]
    assert check["a"] == "OK" and "program id 0 is reserved" in check["b"]
    assert diff(b, b)["equal"]  # the same invalid binary twice: nothing differs
    pa, pb = tmp_path / "a.mnlb", tmp_path / "b.mnlb"
    a.save(pa)
    b.save(pb)
    code, out = invoke_cli("diff", pa, pb)
    assert code == 1 and "verify: OK -> program id 0 is reserved" in out


def test_kernels_are_compared_with_their_attributes():
    with mnrt.open_device("auto") as dev:

        def capture(axis: int) -> mnrt.LightBinary:
            q = dev.command_queue(0)
            mnrt.begin_capture()
            x = dev.create_buffer((2, 3), "float", name="x")
            y = dev.create_buffer((2, 3), "float", name="y")
            prog = dev.create_program([mnrt.Kernel("softmax", ["x"], ["y"], {"axis": axis})])
            q.enqueue_write_buffer(x, np.ones((2, 3), np.float32))
            q.enqueue_program(prog, {"x": x, "y": y})
            q.enqueue_read_buffer(y)
            return mnrt.end_capture()

        d = diff(capture(-1), capture(0))
    fields = [f for c in d["commands"] for f in c.get("fields", [])]
    assert {"field": "program.kernels[0].attrs.axis", "a": -1, "b": 0} in fields


def test_added_and_removed_commands_are_aligned_like_lines_of_text():
    a = chain_capture(10)
    fewer = mnrt.LightBinary(a.to_bytes())
    program = next(c.cmd.programId for c in a.commands if c.cmdType == U.CreateProgram)
    b = with_kernels(fewer, program, list(range(9)))  # the last kernel gone
    d = diff(a, b)
    assert not d["equal"] and d["commands_equal"] >= len(a) - 3


def test_cli_exit_codes_and_json(tmp_path):
    a = chain_capture(10)
    pa, pb, bad = tmp_path / "a.mnlb", tmp_path / "b.mnlb", tmp_path / "bad.mnlb"
    a.save(pa)
    with_written(a, "w3", np.zeros((4, 4), np.float32)).save(pb)
    bad.write_bytes(b"not a binary")
    assert invoke_cli("diff", pa, pa)[0] == 0
    code, out = invoke_cli("diff", pa, pb, "--json")
    assert code == 1 and json.loads(out)["commands"][0]["type"] == "WriteBuffer"
    code, out = invoke_cli("diff", pa, bad)
    assert code == 2 and out.startswith("mnrt: error:")
    assert invoke_cli("diff", pa, tmp_path / "missing.mnlb")[0] == 2


def test_a_corrupt_copy_is_unreadable_not_equal(tmp_path):
    """A copy whose payload no longer matches the hash its blob table records: compared by
    recorded hashes alone, it would be "equal"; diff names the corrupt file instead, in
    either order (exit 2)."""
    pa, pb = tmp_path / "a.mnlb", tmp_path / "b.mnlb"
    chain_capture(10).save(pa)
    data = bytearray(pa.read_bytes())
    data[-1] ^= 0x40  # the last byte of the data section belongs to the last blob
    pb.write_bytes(data)
    for x, y in ((pa, pb), (pb, pa)):
        assert_one_line_error(*invoke_cli("diff", x, y), f"{pb}: blob ")
    with pytest.raises(mnrt.InvalidBinaryError, match="corrupt|decompress"):
        diff(mnrt.LightBinary.load(pa), mnrt.LightBinary.load(pb))


def test_payloads_stored_as_other_bytes_are_compared_by_their_contents(monkeypatch):
    """Recompressed at another zstd level, payloads stored as other bytes are read to
    compare (equal); stored as the same bytes, none is decompressed. Two payloads that
    match one recorded hash and still differ (a collision, forced here) are a difference."""
    mlp = mnrt.LightBinary.load("samples/mlp.mnlb")  # format 1.0: rewritten as today's
    a = Editor(mlp).build(list(mlp.commands))
    strong = Editor(a).build(list(a.commands), fingerprints=a.fingerprints, level=STRONG_LEVEL)
    # (a frame the strong level packs no smaller is kept as it was: stored as the same bytes)
    repacked = {
        i
        for i, (x, y) in enumerate(zip(a.blobs.infos, strong.blobs.infos), 1)
        if x.hash == y.hash and x.stored_size != y.stored_size
    }
    assert repacked
    real, reads = BlobTable.read, []
    monkeypatch.setattr(BlobTable, "read", lambda t, i, c=None: reads.append(i) or real(t, i, c))
    assert diff(a, mnrt.LightBinary(a.to_bytes()))["equal"] and reads == []
    assert diff(a, strong)["equal"] and set(reads) == repacked
    w = np.ones((4, 4), np.float32)
    colliding = {w.tobytes(), (w * 2).tobytes()}
    xxh3 = blobs.xxhash.xxh3_64_intdigest
    hashes = type(
        "Colliding", (), {"xxh3_64_intdigest": lambda d: 7 if bytes(d) in colliding else xxh3(d)}
    )
    monkeypatch.setattr(blobs, "xxhash", hashes)
    a = chain_capture(10)
    one, other = with_written(a, "w3", w), with_written(a, "w3", w * 2)
    d = diff(one, other)
    assert not d["equal"] and d["commands"] == [] and len(d["payloads"]) == 1
    assert "same hash, other payload" in to_text(d)


def test_two_light_model_binaries(tmp_path):
    a = light_model_binary("light_squeezenet", tmp_path)
    assert diff(a, mnrt.LightBinary.load(a.path))["equal"]


def test_copies_and_events_are_diffed_by_their_type_names():
    a = three_device_capture()
    assert diff(a, three_device_capture())["equal"]
    waits = {i for i, c in enumerate(a.commands) if c.cmdType == U.WaitEvent}
    b = without(a, waits)
    d = diff(a, b)
    removed = [c["type"] for c in d["commands"] if c["change"] == "removed"]
    assert removed.count("WaitEvent") == len(waits) and "WaitEvent" in to_text(d)
    copy = next(i for i, c in enumerate(a.commands) if c.cmdType == U.CopyBuffer)
    d = diff(a, with_written(a, "z", np.zeros((64, 64), np.float32)))
    assert [c["type"] for c in d["commands"]] == ["WriteBuffer"]
    assert a.commands[copy].cmdType == U.CopyBuffer


def _at(doc, path):
    for key in path:
        doc = doc[key]
    return doc


HOSTILE = [0, 1, -1, 5, 2**31 - 1, 2**32 - 1, 2**40, 1e300, -1e300, "", "x", "AACAPz4="]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_diff_against_any_edited_binary_is_a_verdict(data):
    """Whatever an edit of its JSON form makes of a binary (a size, id, shape, dtype, blob or
    attribute changed: mostly binaries `mnrt verify` refuses), diff against the original
    gives its verdict, or names the edited binary unreadable, or the load refuses the edit
    with an MnrtError: never another exception."""
    a = chain_capture(3)
    doc = json.loads(jsonio.dumps(a))
    leaves = [p for p in json_paths(doc) if type(_at(doc, p)) in (int, float, str)]  # not bool
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(leaves))
        _at(doc, path[:-1])[path[-1]] = data.draw(st.sampled_from(HOSTILE))
    if data.draw(st.booleans()):  # a blob of other bytes, its size and hash to match
        blob = data.draw(st.sampled_from(doc["blobs"]))
        raw = data.draw(st.binary(max_size=80))
        blob["base64"], blob["size"] = base64.b64encode(raw).decode(), len(raw)
        blob.pop("hash", None)
    try:
        b = jsonio.from_json(doc)
    except mnrt.MnrtError:
        return
    for x, y, edited_side in ((a, b, "B"), (b, a, "A")):
        try:
            d = diff(x, y)
        except mnrt.InvalidBinaryError as e:  # a payload that is not what its hash says
            assert str(e).startswith(f"{edited_side}: blob "), e
            continue
        assert isinstance(d["equal"], bool)
        to_text(d)


def test_goldens_that_differ_where_one_is_nan_or_zero_diff_as_strict_json(tmp_path):
    """--json printed the errors as the bare `Infinity`, which strict parsers refuse; and an
    error against a golden of 0 as a relative error of 1.35e+308."""
    for name, values in (("nan", [1, np.nan, 0]), ("zero", [1, 2, 0]), ("three", [1, 2, 3])):
        write_and_read("v", "float", np.array(values, np.float32)).save(tmp_path / f"{name}.mnlb")
    for a, b, abs_err, rel_err in (("nan", "zero", "inf", "inf"), ("three", "zero", 3.0, "inf")):
        code, out = invoke_cli("diff", tmp_path / f"{a}.mnlb", tmp_path / f"{b}.mnlb", "--json")
        doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
        (golden,) = [c["golden"] for c in doc["commands"] if c.get("golden")]
        assert code == 1 and (golden["max_abs_err"], golden["max_rel_err"]) == (abs_err, rel_err)
        assert golden["mismatched"] == 1
    # one differing command and the rest equal, counted in words that agree with them
    code, out = invoke_cli("diff", tmp_path / "three.mnlb", tmp_path / "zero.mnlb")
    assert out.splitlines()[-1] == "different: 2 commands differ, 3 are equal (5 and 5 commands)"
    a = chain_capture(10)
    d = diff(a, with_written(a, "w3", np.zeros((4, 4), np.float32)))
    assert to_text(d).splitlines()[-1].startswith("different: 1 command differs, ")
    code, out = invoke_cli("diff", tmp_path / "zero.mnlb", tmp_path / "zero.mnlb")
    assert code == 0 and out.strip() == "equal: 5 commands, 1 blob (creation metadata aside)"


def _o1_against_o3(model, inputs, float_dtype: str, folder):
    """`diff` of a model's O1 and O3 compiles, the CreateProgram's entry, and its changed
    fields (field -> (a, b))."""
    with mnrt.Context() as ctx:
        for preset in ("O1", "O3"):
            options = {"option_json": preset, "float_dtype": float_dtype}
            ctx.compile(model, inputs, options=options).save_binary(folder / f"{preset}.mnlb")
    d = diff(*(mnrt.LightBinary.load(folder / f"{p}.mnlb") for p in ("O1", "O3")))
    program = next(c for c in d["commands"] if c["type"] == "CreateProgram")
    return d, program, {f["field"]: (f["a"], f["b"]) for f in program["fields"]}


def test_two_presets_of_one_model_pair_up_kernel_by_kernel_and_buffer_by_name(tmp_path):
    """O1 against O3 of one model: its values are named otherwise and kernels fused away,
    yet each convolution pairs with its own (its epilogue and mapping compared), each
    kernel only O1 runs is one `-` line written as a kernel, and the buffers both compiles
    make pair by name, only those O3 fused away removed; commands that name the same
    buffer by another id (a weight's write) are the same."""
    from mnrt.compiler.models import MODELS

    builder, inputs = MODELS["cnn"]()
    d, program, fields = _o1_against_o3(builder, inputs, "float", tmp_path)
    assert fields["program.kernels[0].attrs.epilogue"] == ("none", "relu")
    assert fields["program.kernels[1]"][1] is None  # the relu fused into the conv
    text = to_text(d)
    assert "    - program.kernels[1] relu(conv2d_0) -> relu_1\n" in text
    removed = [c["value"]["desc"]["name"] for c in d["commands"] if c["change"] == "removed"
               and c["type"] == "CreateBuffer"]  # fmt: skip
    assert "cnn.conv2d_0" in removed and "cnn.relu_1" not in removed
    # numbered otherwise after the first buffer O3 does not make, the others are the same:
    # the weights' writes, the goldens' buffers, the binary's outputs
    changed = {c["type"] for c in d["commands"] if c["change"] == "changed"}
    assert changed == {"CreateProgram", "EnqueueProgram", "GoldenCheck", "CreateBuffer"}
    # but for the buffer of the reshape, which O1 lays out in its input's buffer, a view
    assert "    program.views.reshape_7: {" in text and '"of": "global_avg_pool2d_6"' in text
    (buffer,) = [
        c for c in d["commands"] if c["change"] == "changed" and c["type"] == "CreateBuffer"
    ]
    assert {f["field"]: f["b"] for f in buffer["fields"]}["desc.name"] == "cnn.reshape_7"
    assert not d["io"] and "bufferId:" not in text
    short = to_text(d, limit=3).splitlines()  # a terminal's worth: the rest said, not shown
    more = len(program["fields"]) - 3
    at = short.index(f"~ [{program['a']}] -> [{program['b']}] CreateProgram")
    assert short[at + 4] == f"    ... and {more} more changed fields (see --json)"
    assert all(line.startswith("    ") for line in short[at + 1 : at + 4])


def test_a_command_on_a_buffer_only_one_side_has_differs_whatever_its_number():
    """A writes buffer p, which B lacks, under the number B gives its buffer x (B's write
    goes to x): the two writes differ, though their ids are equal and A's x is numbered
    as B's (the id of an object without a counterpart matches nothing of B's)."""
    data = np.ones((2, 3), np.float32)
    with mnrt.open_device("auto") as dev:

        def capture(with_p: bool) -> mnrt.LightBinary:
            q = dev.command_queue(0)
            mnrt.begin_capture()
            target = dev.create_buffer((2, 3), "float", name="p") if with_p else None
            x = dev.create_buffer((2, 3), "float", name="x")
            q.enqueue_write_buffer(target or x, data)
            q.finish()
            return mnrt.end_capture()

        a, b = capture(True), capture(False)
    d = diff(a, b)
    write = next(c for c in d["commands"] if c["type"] == "WriteBuffer")
    assert write["change"] == "changed" and write["fields"][0]["field"] == "bufferId", d
    assert (
        write["fields"][0]["a"] == write["fields"][0]["b"]
    )  # the same number, not the same buffer


def test_each_convolution_pairs_with_the_kernel_that_reads_its_weights(tmp_path):
    """At O3 mixed each convolution is a chain with the casts and ReLU around it: by op
    alone no O1 kernel paired with one, and every kernel was listed removed or added. Each
    pairs with the chain that reads its weight, and the pairs' changes are shown."""
    from mnrt.compiler import GraphBuilder

    rng = np.random.default_rng(3)
    b = GraphBuilder("two_convs")
    h = b.input("x", (1, 4, 8, 8), "float")
    for layer in ("w1", "w2"):
        w = b.param(layer, rng.standard_normal((4, 4, 3, 3)).astype(np.float32) / 8)
        h = b.relu(b.conv2d(h, w, padding=(1, 1, 1, 1)))
    b.output(h, "y")
    inputs = {"x": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    d, _, fields = _o1_against_o3(b, inputs, "mixed", tmp_path)
    paired = sorted(k[: -len(".op")] for k, v in fields.items() if v == ("conv2d", "chain"))
    assert paired == ["program.kernels[1]/[0]", "program.kernels[5]/[1]"]
    assert fields["program.kernels[1]/[0].inputs"] == (["x_half", "w1"], ["x", "w1"])
    assert "program.kernels[5]/[1].inputs" not in fields  # both read relu_1_half and w2
    assert "    - program.kernels[3] relu(conv2d_0) -> relu_1\n" in to_text(d)


def test_a_buffer_created_elsewhere_is_moved_not_removed_and_added():
    """Two compiles at other presets create a weight at another place among their
    intermediates: its creation and write pair by the buffer's name wherever they are."""
    d = diff(three_buffers("abc"), three_buffers("cab"))
    assert not d["equal"]
    assert {c["change"] for c in d["commands"]} == {"changed"}
    moved = [(c["type"], c["a"], c["b"]) for c in d["commands"] if c.get("moved")]
    assert moved and all(c.get("moved") and not c["fields"] for c in d["commands"])
    assert "CreateBuffer" in {t for t, _, _ in moved} and "WriteBuffer" in {t for t, _, _ in moved}
    text = to_text(d)
    assert "(moved)" in text and "\n- [" not in text and "\n+ [" not in text
    assert text.startswith("~ inputs: [a, b, c] -> [c, a, b]\n")  # by name, not by id
    assert f"{len(moved)} commands differ ({len(moved)} moved), " in text.splitlines()[-1]
    assert diff(three_buffers("abc"), three_buffers("abc"))["equal"]
