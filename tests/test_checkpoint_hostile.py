"""Bad and hostile checkpoints (issue 34 items 1 and 5, issue 31 item 5):
every case is one CheckpointError naming the problem, never a raw Python
error, a read outside the directory or a silently wrong load; concurrent and
killed saves never leave a checkpoint that loads wrong or not at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from verishard import checkpoint
from verishard.checkpoint import format as F
from verishard.errors import CheckpointError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A = np.arange(40, dtype=np.float32).reshape(4, 10)
TARGET = ("u=1", "[4, 10]")


@pytest.fixture
def saved(tmp_path):
    d = tmp_path / "ck"
    checkpoint.save({"a": A, "b": A + 100, "step": 3}, str(d),
                    {"a": ("x=2", "[2{x}4, 10]"), "b": ("x=2", "[2{x}4, 10]")})
    return d


def manifest(d) -> dict:
    return json.loads((d / "manifest.json").read_text())


def rewrite(d, change, digest=True) -> None:
    """Change the manifest, and (as a consistent forger would) its digest too."""
    man = manifest(d)
    change(man)
    if digest and isinstance(man, dict):
        man["digest"] = F.manifest_digest(man)
    (d / "manifest.json").write_text(json.dumps(man))


def entry(man, name):
    return next(e for e in man["entries"] if e["path"] == [name])


def refused(d, match, targets=None):
    with pytest.raises(CheckpointError, match=match):
        checkpoint.load(str(d), targets if targets is not None else {"a": TARGET, "b": TARGET}, rank=0)


def data_file(d):
    return d / manifest(d)["files"][0]["name"]


# --- files changed after the save -------------------------------------------------

def test_truncated_file(saved):
    f = data_file(saved)
    f.write_bytes(f.read_bytes()[:-4])
    refused(saved, "truncated")


def test_missing_file(saved):
    os.remove(data_file(saved))
    refused(saved, "missing")


def test_flipped_byte_in_data_and_in_the_digest_table(saved):
    man = manifest(saved)
    blk = entry(man, "b")["blocks"][1]
    f = data_file(saved)
    for at in (blk["data"] + 5, blk["table"] + 1):
        raw = bytearray(f.read_bytes())
        raw[at] ^= 0xFF
        f.write_bytes(bytes(raw))
        assert np.array_equal(checkpoint.load(str(saved), {"a": TARGET}, rank=0)["a"], A)   # "a" is intact
        refused(saved, "fail their digest", {"b": TARGET})
        with pytest.raises(CheckpointError, match="fail their digest"):
            checkpoint.verify(str(saved))
        raw[at] ^= 0xFF
        f.write_bytes(bytes(raw))


def test_manifest_edited_without_its_digest(saved):
    rewrite(saved, lambda m: entry(m, "a").update(dtype="<i4"), digest=False)
    refused(saved, "digest does not match")


@pytest.mark.parametrize("dtype,match", [("<i4", "header's dtype"), (">f4", "header's dtype"),
                                         ("|V4", "not a number type"), ("<U1", "not a number type"),
                                         ("|O8", "not a number type")])
def test_dtype_rewritten_consistently(saved, dtype, match):
    def change(m):
        for e in m["entries"]:
            if e["kind"] == "array":
                e["dtype"] = dtype
    rewrite(saved, change)
    refused(saved, match)


def test_entries_swapped_with_their_blocks(saved):
    def change(m):
        a, b = entry(m, "a"), entry(m, "b")
        a["blocks"], b["blocks"] = b["blocks"], a["blocks"]
    rewrite(saved, change)
    refused(saved, "header's path")


def test_rank_blocks_swapped(saved):
    def change(m):
        bl = entry(m, "a")["blocks"]
        bl[0]["rank"], bl[1]["rank"] = bl[1]["rank"], bl[0]["rank"]
    rewrite(saved, change)
    refused(saved, "header's rank")


def test_rank_files_swapped(tmp_path):
    for r in range(2):
        checkpoint.save(A[2 * r:2 * r + 2], "x=2", "[2{x}4, 10]", str(tmp_path), rank=r, save_id="s1")
    checkpoint.commit(str(tmp_path), "s1")
    f0, f1 = tmp_path / "s1-p00000.bin", tmp_path / "s1-p00001.bin"
    b0, b1 = f0.read_bytes(), f1.read_bytes()
    f0.write_bytes(b1)
    f1.write_bytes(b0)
    with pytest.raises(CheckpointError, match="header's rank"):
        checkpoint.load(str(tmp_path), *TARGET, rank=0)


def test_type_changed_to_transposed_blocks(tmp_path):
    sq = np.arange(16, dtype=np.float32).reshape(4, 4)
    checkpoint.save({"a": sq}, str(tmp_path), {"a": ("x=2", "[2{x}4, 4]")})
    rewrite(tmp_path, lambda m: entry(m, "a").update(type="[4, 2{x}4]"))
    refused(tmp_path, "header's (start|shape)|digest table ends", {"a": ("u=1", "[4, 4]")})


def test_mesh_and_shape_rewritten(saved):
    rewrite(saved, lambda m: entry(m, "a").update(mesh="x=4", type="[1{x}4, 10]"))
    refused(saved, "blocks for ranks|digest table ends")
    rewrite(saved, lambda m: entry(m, "a").update(mesh="x=2", type="[3{x}6, 10]"))
    refused(saved, "header's global_shape|past the end|digest table ends|both point at", {"a": None})


def test_wrong_dtype_or_shape_asked(saved):
    with pytest.raises(CheckpointError, match="holds float32, not float64"):
        checkpoint.load(str(saved), {"a": TARGET}, rank=0, dtype=np.float64)
    refused(saved, "global shape", {"a": ("u=1", "[4, 12]")})
    refused(saved, "no entry 'c'", {"c": TARGET})


# --- paths -------------------------------------------------------------------------

def test_data_file_that_is_a_symlink_out(saved, tmp_path):
    f = data_file(saved)
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(f.read_bytes())
    f.unlink()
    f.symlink_to(outside)
    refused(saved, "symbolic link")


def test_manifest_that_is_a_symlink_out(saved, tmp_path):
    outside = tmp_path / "m.json"
    outside.write_text((saved / "manifest.json").read_text())
    (saved / "manifest.json").unlink()
    (saved / "manifest.json").symlink_to(outside)
    refused(saved, "symbolic link")


def test_symlink_loop(saved):
    (saved / "manifest.json").unlink()
    (saved / "manifest.json").symlink_to(saved / "manifest.json")
    refused(saved, "symbolic link")


@pytest.mark.parametrize("name", ["../x-p00000.bin", "/etc/passwd", "a/b-p00000.bin", ".hidden-p00000.bin",
                                  "x" * 300, "", "manifest.json"])
def test_file_names_outside_or_odd(saved, name):
    def change(m):
        m["files"][0]["name"] = name
        for e in m["entries"]:
            for b in e.get("blocks", []):
                b["file"] = name
    rewrite(saved, change)
    refused(saved, "not a valid name")


# --- manifest shapes ---------------------------------------------------------------

@pytest.mark.parametrize("text,match", [
    ("[]", "JSON list"), ('"x"', "JSON str"), ("null", "JSON NoneType"), ("3", "JSON int"), ("1.5", "not valid"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply|not valid"), ('{"a": NaN}', "not valid"),
    ("{", "not valid"), ("9" * 5000, "not valid"), ('{"format": "verishard-checkpoint", "version": 1}',
                                                    "version '1'"),
])
def test_manifest_shapes(saved, text, match):
    (saved / "manifest.json").write_text(text)
    refused(saved, match)


def test_manifest_not_utf8(saved):
    (saved / "manifest.json").write_bytes(b"\xff\xfe{}")
    refused(saved, "not valid")


def test_manifest_size_cap(saved):
    with open(saved / "manifest.json", "r+b") as f:
        f.truncate(F.MAX_MANIFEST_BYTES + 1)   # sparse: nothing is allocated
    refused(saved, "more than a manifest may have")


@pytest.mark.parametrize("field,value,match", [
    ("header", 1.5, "non-integer number"), ("header", -1, "outside"), ("header_bytes", 2 ** 40, "outside"),
    ("data", 2 ** 62, "outside"), ("rank", "0", "str, not int"), ("rank", True, "bool, not int"),
    ("table", None, "NoneType, not int"), ("file", ["x"], "list, not str"),
])
def test_block_fields(saved, field, value, match):
    rewrite(saved, lambda m: entry(m, "a")["blocks"][0].update({field: value}))
    refused(saved, match)


@pytest.mark.parametrize("change,match", [
    (lambda m: m.update(entries={}), "dict, not list"),
    (lambda m: m.update(files=[{"name": 3}]), "int, not str"),
    (lambda m: m.__setitem__("entries", [7]), "expected a JSON object"),
    (lambda m: entry(m, "a").update(path=[]), "'path'"),
    (lambda m: entry(m, "a").update(path=["x"] * 40), "more than 32"),
    (lambda m: entry(m, "a").update(type="[" * 50_000), "longer than"),
    (lambda m: entry(m, "a").update(mesh="x=2**70"), "mesh"),
    (lambda m: entry(m, "a").update(type="[2{x}4, 10] partial{x}"), "pending"),
    (lambda m: entry(m, "step").update(kind="int", value="1e9"), "not a int"),
    (lambda m: entry(m, "step").update(kind="pickle"), "not a kind"),
    (lambda m: m["entries"].append(dict(entry(m, "a"))), "saved twice"),
])
def test_manifest_schema(saved, change, match):
    rewrite(saved, change)
    refused(saved, match, {"a": TARGET, "step": None})


# --- concurrency and killed writers -------------------------------------------------

KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from verishard import checkpoint
    orig = checkpoint._Writer.add
    def slow(self, *a, **k):
        orig(self, *a, **k)
        print("BLOCK", flush=True)
        time.sleep(30)
    checkpoint._Writer.add = slow
    A = np.full((8, 1000), float(sys.argv[2]), dtype=np.float64)
    checkpoint.save(A, "x=4", "[2{x}8, 1000]", sys.argv[1])
""")


def _kill_mid_save(path, value):
    p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path), str(value)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "BLOCK"     # one block written, the others not
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("earlier", [False, True])
def test_killed_writer_loses_nothing_and_is_cleaned(tmp_path, earlier):
    if earlier:
        checkpoint.save(np.full((8, 1000), 1.0), "x=4", "[2{x}8, 1000]", str(tmp_path))
    _kill_mid_save(tmp_path, 2.0)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]    # what the killed writer left
    if earlier:   # the earlier checkpoint is intact
        for r in range(2):
            assert (checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 1000]", r) == 1.0).all()
        assert checkpoint.verify(str(tmp_path)) == 4
    else:
        with pytest.raises(CheckpointError, match="did not finish"):
            checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 1000]", 0)
    checkpoint.save(np.full((8, 1000), 3.0), "x=4", "[2{x}8, 1000]", str(tmp_path))
    left = sorted(n for n in os.listdir(tmp_path) if n not in ("manifest.json", ".lock"))
    assert left == [checkpoint.read_manifest(str(tmp_path)).files.popitem()[0]]   # the next save cleaned up


def test_per_rank_resave_never_touches_the_committed_files(tmp_path):
    """A job that dies while re-saving leaves the previous checkpoint loadable."""
    for r in range(2):
        checkpoint.save(A[2 * r:2 * r + 2], "x=2", "[2{x}4, 10]", str(tmp_path), rank=r, save_id="s1")
    checkpoint.commit(str(tmp_path), "s1")
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if n.endswith(".bin")}
    checkpoint.save(A[:2] * 0, "x=2", "[2{x}4, 10]", str(tmp_path), rank=0, save_id="s2")   # rank 1 "dies"
    assert {n: (tmp_path / n).read_bytes() for n in before} == before
    assert np.array_equal(checkpoint.load(str(tmp_path), *TARGET, rank=0), A)
    with pytest.raises(CheckpointError, match="no block saved for ranks \\[1\\]"):
        checkpoint.commit(str(tmp_path), "s2")


SAVER = textwrap.dedent("""
    import sys
    import numpy as np
    from verishard import checkpoint
    path, value, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    for k in range(n):
        checkpoint.save({"w": np.full((64, 256), value + k, dtype=np.float32), "step": k}, path,
                        {"w": ("x=4", "[16{x}64, 256]")})
""")


def test_concurrent_saves_and_racing_loads(tmp_path):
    """Two processes re-saving into one directory while this one loads: every
    load is one whole save (all elements equal, the step matching), or one
    clear error; the directory ends with exactly one save's files."""
    checkpoint.save({"w": np.zeros((64, 256), np.float32), "step": 0}, str(tmp_path),
                    {"w": ("x=4", "[16{x}64, 256]")})
    procs = [subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path), str(v), "12"], cwd=ROOT)
             for v in (1000.0, 2000.0)]
    loads = errors = 0
    try:
        while any(p.poll() is None for p in procs):
            try:
                got = checkpoint.load(str(tmp_path), {"w": ("u=2", "[64, 128{u}256]"), "step": None}, rank=1)
            except CheckpointError as e:
                assert "saved again" in str(e), e
                errors += 1
                continue
            w = got["w"]
            assert (w == w.flat[0]).all() and (w.flat[0] == 0 or w.flat[0] % 1000 == got["step"])
            loads += 1
    finally:
        for p in procs:
            p.wait(timeout=120)
    assert all(p.returncode == 0 for p in procs)
    assert loads > 0
    final = checkpoint.load(str(tmp_path), {"w": None, "step": None})
    assert final["step"] == 11 and final["w"].flat[0] in (1011.0, 2011.0)
    left = sorted(n for n in os.listdir(tmp_path) if n not in ("manifest.json", ".lock"))
    assert left == sorted(checkpoint.read_manifest(str(tmp_path)).files)


def test_concurrent_saves_in_threads(tmp_path):
    errs = []

    def run(v):
        try:
            for k in range(5):
                checkpoint.save({"w": np.full((8, 8), v + k)}, str(tmp_path), {"w": ("x=2", "[4{x}8, 8]")})
        except Exception as e:   # noqa: BLE001  (the test reports any)
            errs.append(e)
    ts = [threading.Thread(target=run, args=(v,)) for v in (10.0, 20.0)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs
    w = checkpoint.load(str(tmp_path), {"w": None})["w"]
    assert w.flat[0] in (14.0, 24.0) and (w == w.flat[0]).all()
