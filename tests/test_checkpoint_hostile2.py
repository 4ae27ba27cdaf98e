"""Hostile checkpoints, round two (issue 39 items 2, 4 and the checkpoint
edges of 6): manifests rewritten consistently (their digest recomputed with
the project's own code) that point blocks or names at one place; blocks
larger than their box, at save and in a file; FIFOs and other non-regular
files where a checkpoint's files go, in load, save, commit and the CLI
(each bounded in time: a hang fails the test, never stalls it); a user's
files beside a checkpoint surviving every save; malformed manifest values."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from verishard import checkpoint
from verishard.checkpoint import format as F
from verishard.errors import CheckpointError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
A = np.arange(40, dtype=np.float32).reshape(4, 10)
LAYOUT = ("x=2", "[2{x}4, 10]")
TARGET = ("u=1", "[4, 10]")
SECONDS = 20   # far above what any refusal takes; a blocked open never returns


@pytest.fixture
def saved(tmp_path):
    d = tmp_path / "ck"
    checkpoint.save({"a": A, "b": A + 100, "step": 3}, str(d), {"a": LAYOUT, "b": LAYOUT})
    return d


def manifest(d) -> dict:
    return json.loads((d / "manifest.json").read_text())


def rewrite(d, change) -> None:
    """Change the manifest and, as a consistent forger would, its digest (the project's own code)."""
    man = manifest(d)
    change(man)
    man["digest"] = F.manifest_digest(man)
    (d / "manifest.json").write_text(json.dumps(man))


def entry(man, name):
    return next(e for e in man["entries"] if e["path"] == [name])


def within(fn, seconds=SECONDS):
    """``fn()``'s result or exception, from a daemon thread: a call still blocked after ``seconds`` fails."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:   # noqa: BLE001  (handed to the test)
            box["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"still blocked after {seconds} s")
    return box.get("error", box.get("value"))


def refused_within(fn, match):
    got = within(fn)
    assert isinstance(got, CheckpointError), f"{type(got).__name__}: {got}"
    assert __import__("re").search(match, str(got)), str(got)
    return got


# --- item 2: every block checked where it is used ------------------------------------

ALIASES = {
    "two ranks, one header": lambda m: entry(m, "a")["blocks"].__setitem__(
        1, dict(entry(m, "a")["blocks"][0], rank=1)),
    "two names, one header": lambda m: entry(m, "b").update(blocks=[dict(b) for b in entry(m, "a")["blocks"]]),
    "a block inside another": lambda m: entry(m, "b")["blocks"][0].update(
        {k: entry(m, "a")["blocks"][1][k] + 8 for k in ("header", "table", "data")}),
}


@pytest.mark.parametrize("case", sorted(ALIASES))
def test_blocks_pointed_at_one_place_are_refused_by_load_and_verify(saved, case):
    rewrite(saved, ALIASES[case])
    with pytest.raises(CheckpointError, match="both point at bytes"):
        checkpoint.load(str(saved), {"a": TARGET, "b": TARGET}, rank=0)
    with pytest.raises(CheckpointError, match="both point at bytes"):
        checkpoint.verify(str(saved))


@pytest.mark.parametrize("case", ["two ranks, one header", "two names, one header"])
def test_header_check_is_per_block_without_the_overlap_check(saved, case, monkeypatch):
    """The second line of defence: with the overlap check removed, the
    header is still checked for every block that uses it (the cache is keyed
    by everything the header binds), so the aliased block is refused, never
    read as the other's data."""
    monkeypatch.setattr(F.Manifest, "_refuse_aliases", lambda self, where: None)
    rewrite(saved, ALIASES[case])
    with pytest.raises(CheckpointError, match="header's (rank|path)"):
        checkpoint.load(str(saved), {"a": TARGET, "b": TARGET}, rank=0)
    with pytest.raises(CheckpointError, match="header's (rank|path)"):
        checkpoint.verify(str(saved))


def test_whole_array_from_every_rank_is_refused_at_save(tmp_path):
    """The issue's case: 4 ranks each pass the whole array instead of their block."""
    W = np.arange(32, dtype=np.float32).reshape(8, 4)
    for r in range(4):
        with pytest.raises(CheckpointError) as err:
            checkpoint.save({"w": W}, str(tmp_path), {"w": ("x=4", "[2{x}8, 4]")}, rank=r, save_id="s1")
        msg = str(err.value)
        assert "'w'" in msg and f"rank {r}" in msg and "(8, 4)" in msg and "(2, 4)" in msg, msg
    with pytest.raises(CheckpointError, match="no rank has saved"):
        checkpoint.commit(str(tmp_path), "s1")


@pytest.mark.parametrize("block", [np.zeros((3, 10), np.float32), np.zeros((1, 10), np.float32),
                                   np.zeros((2, 11), np.float32), np.zeros((2, 10, 1), np.float32),
                                   np.zeros(20, np.float32)])
def test_block_of_another_shape_is_refused_at_save(tmp_path, block):
    with pytest.raises(CheckpointError, match=r"'a', rank 1: a local block of shape .*shape \(2, 10\)"):
        checkpoint.save({"a": block}, str(tmp_path), {"a": LAYOUT}, rank=1, save_id="s1")
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".bin", ".json"))]


def test_uneven_blocks_save_exactly(tmp_path):
    """The exact valid blocks of an uneven type (3, 3, 1 rows) are accepted and load back."""
    W = np.arange(70, dtype=np.int32).reshape(7, 10)
    lay = ("x=3", "[3{x}7, 10]")
    for r, (a, z) in enumerate([(0, 3), (3, 6), (6, 7)]):
        checkpoint.save({"w": W[a:z]}, str(tmp_path), {"w": lay}, rank=r, save_id="s1")
    checkpoint.commit(str(tmp_path), "s1")
    assert np.array_equal(checkpoint.load(str(tmp_path), {"w": None})["w"], W)
    with pytest.raises(CheckpointError, match=r"shape \(3, 10\).*shape \(1, 10\)"):   # the padded buffer
        checkpoint.save({"w": np.zeros((3, 10), np.int32)}, str(tmp_path), {"w": lay}, rank=2, save_id="s2")


def _block_bytes(save_id, path, rank, block, t_text, start):
    """A block as a save writes it, for ``block`` of any shape (header, digest table, data)."""
    from verishard.sharding import ArrayType
    t = ArrayType.parse(t_text, "x=2")
    fields = F.header_fields(save_id, path, rank, F.dtype_name(block.dtype, "test"), t)
    fields.update(start=list(start), shape=list(block.shape))
    header = F.canonical(fields)
    header += b" " * (-len(header) % 8)
    rc, cc = F.tiles(t.global_shape, tuple(start), block.shape, block.dtype.itemsize)
    return header, F.table_of(np.ascontiguousarray(block), rc, cc), block.tobytes()


def test_oversized_block_in_a_file_is_refused_at_load(tmp_path):
    """A data file rewritten so that rank 0's block is the whole array (its own
    header, digest table and data consistent with that shape), the manifest's
    offsets and digest rewritten to match: the manifest's type says rank 0
    holds 2 rows, so load refuses instead of reading 4."""
    d = tmp_path / "ck"
    for r in range(2):
        checkpoint.save({"a": A[2 * r:2 * r + 2]}, str(d), {"a": LAYOUT}, rank=r, save_id="s1")
    checkpoint.commit(str(d), "s1")
    header, table, data = _block_bytes("s1", ["a"], 0, A, LAYOUT[1], (0, 0))
    (d / "s1-p00000.bin").write_bytes(header + table + data)

    def change(m):
        b = entry(m, "a")["blocks"][0]
        b.update(header=0, header_bytes=len(header), table=len(header), data=len(header) + len(table))
        next(f for f in m["files"] if f["name"] == "s1-p00000.bin")["bytes"] = len(header + table + data)
    rewrite(d, change)
    for call in (lambda: checkpoint.load(str(d), {"a": TARGET}, rank=0), lambda: checkpoint.verify(str(d))):
        with pytest.raises(CheckpointError, match="digest table ends|header's shape"):
            call()


# --- item 4: files that are not regular, refused at once ------------------------------

def test_open_regular_refuses_every_other_kind(tmp_path):
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.mkfifo(tmp_path / "fifo")
        os.mkdir(tmp_path / "dir")
        (tmp_path / "file").write_bytes(b"x")
        os.symlink(tmp_path / "file", tmp_path / "link")
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(tmp_path / "sock"))
        for name, flags, match in [("fifo", os.O_RDONLY, "FIFO"), ("fifo", os.O_WRONLY, "not a regular file"),
                                   ("fifo", os.O_RDWR | os.O_CREAT, "FIFO"), ("dir", os.O_RDONLY, "directory"),
                                   ("sock", os.O_RDONLY, "not a regular file"), ("link", os.O_RDONLY, "symbolic"),
                                   ("../file", os.O_RDONLY, "plain file name"), ("", os.O_RDONLY, "plain")]:
            refused_within(lambda: F.open_regular(dirfd, name, "here", flags), match)
        fd = F.open_regular(dirfd, "file", "here")
        try:
            assert os.read(fd, 4) == b"x" and os.get_blocking(fd)   # O_NONBLOCK cleared again
        finally:
            os.close(fd)
        s.close()
    finally:
        os.close(dirfd)


def _fifo_in_place_of(path):
    os.remove(path) if os.path.lexists(path) else None
    os.mkfifo(path)


def test_fifo_manifest_refused_by_load_verify_and_save(saved):
    _fifo_in_place_of(saved / "manifest.json")
    refused_within(lambda: checkpoint.load(str(saved), {"a": TARGET}, rank=0), "manifest.json is not a regular file")
    refused_within(lambda: checkpoint.verify(str(saved)), "not a regular file")
    # save would replace it: not a checkpoint's manifest, so refused, and the FIFO stays
    refused_within(lambda: checkpoint.save({"a": A}, str(saved)), r"manifest.json is not a regular file \(a FIFO\)")
    refused_within(lambda: checkpoint.commit(str(saved), "s1"), "no rank has saved|not a regular file")
    assert (saved / "manifest.json").is_fifo()


def test_fifo_data_file_refused_by_load(saved):
    name = next(iter(checkpoint.read_manifest(str(saved)).files))
    _fifo_in_place_of(saved / name)
    refused_within(lambda: checkpoint.load(str(saved), {"a": TARGET}, rank=0), f"{name} is not a regular file")
    refused_within(lambda: checkpoint.verify(str(saved)), "FIFO")


def test_fifo_or_symlink_lock_refused_by_save(saved):
    _fifo_in_place_of(saved / ".lock")
    refused_within(lambda: checkpoint.save({"a": A}, str(saved)), r"\.lock is not a regular file")
    refused_within(lambda: checkpoint.save({"a": A[:2]}, str(saved), {"a": LAYOUT}, rank=0, save_id="s9"),
                   r"\.lock is not a regular file")
    os.remove(saved / ".lock")
    os.symlink(saved / "manifest.json", saved / ".lock")
    refused_within(lambda: checkpoint.save({"a": A}, str(saved)), r"\.lock is a symbolic link")
    assert np.array_equal(checkpoint.load(str(saved), {"a": None})["a"], A)   # the checkpoint is untouched


def test_fifo_as_the_directory(tmp_path):
    os.mkfifo(tmp_path / "ck")
    refused_within(lambda: checkpoint.load(str(tmp_path / "ck"), {"a": None}), "Not a directory")
    refused_within(lambda: checkpoint.save({"a": A}, str(tmp_path / "ck")), "exists and is not a directory")


def test_fifo_note_refused_by_commit(tmp_path):
    checkpoint.save({"a": A[:2]}, str(tmp_path), {"a": LAYOUT}, rank=0, save_id="s1")
    os.mkfifo(tmp_path / "s1-p00001.json")
    refused_within(lambda: checkpoint.commit(str(tmp_path), "s1"), "s1-p00001.json is not a regular file")


def test_fifos_named_like_save_files_survive_saves(saved):
    """FIFOs with the names a save's files, markers and temporary files have:
    no save opens one (blocking) nor removes one; saves go on."""
    names = ["old-p00000.bin", "old-p00001.json", ".writer-old~123-0123abcd", ".tmp-old~123-0123abcd+old-p00000.bin"]
    for n in names:
        os.mkfifo(saved / n)
    assert within(lambda: checkpoint.save({"a": A * 2}, str(saved), {"a": LAYOUT})) is not None
    assert within(lambda: checkpoint.save({"a": A * 3}, str(saved), {"a": LAYOUT})) is not None
    assert all((saved / n).exists() for n in names)
    assert np.array_equal(checkpoint.load(str(saved), {"a": None})["a"], A * 3)


def test_cli_reshard_checkpoint_with_a_fifo_exits_2(tmp_path):
    saved = tmp_path / "ck"
    checkpoint.save(A, *LAYOUT, str(saved))
    name = next(iter(checkpoint.read_manifest(str(saved)).files))
    cmd = [sys.executable, "-m", "verishard.cli", "reshard-checkpoint", str(saved), str(tmp_path / "out"),
           "--mesh", "u=2", "--type", "[2{u}4, 10]"]
    for fifo in ("manifest.json", name):
        keep = (saved / fifo).read_bytes()
        _fifo_in_place_of(saved / fifo)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert p.returncode == 2, p.stderr
        assert f"{fifo} is not a regular file" in p.stderr and "Traceback" not in p.stderr, p.stderr
        os.remove(saved / fifo)
        (saved / fifo).write_bytes(keep)
    os.makedirs(tmp_path / "out")
    os.mkfifo(tmp_path / "out" / ".lock")   # in the directory it writes
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and ".lock is not a regular file" in p.stderr, p.stderr
    os.remove(tmp_path / "out" / ".lock")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)   # restored: it works
    assert p.returncode == 0, p.stderr


# --- item 4: save removes only what it wrote -------------------------------------------

USER_FILES = {"results-p00001.json": b'{"accuracy": 0.9}', "model.v2-p00003.bin": b"\x00weights",
              ".tmp-notes": b"notes", "notes.txt": b"text", ".writer-notes": b"", "x-p00000.json": b"[]",
              "y-p00000.bin": b'{"format": "verishard-block", "id": "z"}'}


def test_user_files_survive_saves_and_commits(tmp_path):
    for n, data in USER_FILES.items():
        (tmp_path / n).write_bytes(data)
    checkpoint.save({"a": A}, str(tmp_path), {"a": LAYOUT})
    checkpoint.save({"a": A + 1}, str(tmp_path), {"a": LAYOUT})
    for r in range(2):
        checkpoint.save({"a": A[2 * r:2 * r + 2]}, str(tmp_path), {"a": LAYOUT}, rank=r, save_id="s3")
    checkpoint.commit(str(tmp_path), "s3")
    assert {n: (tmp_path / n).read_bytes() for n in USER_FILES} == USER_FILES
    ours = sorted(set(os.listdir(tmp_path)) - set(USER_FILES))
    assert ours == sorted([".lock", "manifest.json", *checkpoint.read_manifest(str(tmp_path)).files])
    assert np.array_equal(checkpoint.load(str(tmp_path), {"a": None})["a"], A)


def test_a_saves_own_leftovers_are_still_removed(tmp_path):
    """What save did write is still swept: an uncommitted per-rank save's data
    file and note, once another save commits."""
    checkpoint.save({"a": A[:2]}, str(tmp_path), {"a": LAYOUT}, rank=0, save_id="dead")   # never committed
    assert sorted(os.listdir(tmp_path)) == [".lock", "dead-p00000.bin", "dead-p00000.json"]
    checkpoint.save({"a": A}, str(tmp_path), {"a": LAYOUT})
    assert sorted(os.listdir(tmp_path)) == sorted([".lock", "manifest.json",
                                                   *checkpoint.read_manifest(str(tmp_path)).files])


def test_a_writer_with_no_block_leaves_no_file(tmp_path):
    checkpoint.save({"step": 1}, str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".lock", "manifest.json"]
    assert checkpoint.load(str(tmp_path)) == {"step": 1}


# --- item 6: malformed manifest values ---------------------------------------------------

def test_scalar_true_on_an_array_is_refused(saved):
    rewrite(saved, lambda m: entry(m, "a").update(scalar=True))
    for call in (lambda: checkpoint.load(str(saved), {"a": None}), lambda: checkpoint.verify(str(saved))):
        with pytest.raises(CheckpointError, match="scalar"):
            call()


def test_a_saved_scalar_loads_as_one(tmp_path):
    checkpoint.save({"s": np.array(2.5, dtype=np.float32)}, str(tmp_path))
    got = checkpoint.load(str(tmp_path), {"s": None})["s"]
    assert got.shape == () and got == np.float32(2.5)


def test_type_of_huge_empty_blocks_is_refused_at_once(saved):
    """A type whose block for rank 1 is empty but 2**40 rows long (its digest
    table would list 2**40 row groups): refused from the table's size in
    the file before any cut is listed, never a hang or MemoryError."""
    def change(m):
        e = entry(m, "a")
        e.update(type="[1099511627776, 1{x}1]")
        e["blocks"].reverse()   # rank 1's empty block is read first
    rewrite(saved, change)
    # a subprocess with a memory cap: listing the cuts would hold the GIL, which a thread's timeout cannot stop
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
            "from verishard import checkpoint\n"
            "from verishard.errors import CheckpointError\n"
            "try:\n    checkpoint.load(sys.argv[1], {'a': None})\n"
            "except CheckpointError as e:\n    print('REFUSED', e)\n")
    p = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.startswith("REFUSED") and "needs at least" in p.stdout, p.stdout + p.stderr


HOSTILE = [None, True, False, -1, 0, 1, 2 ** 63, 2 ** 200, -(2 ** 70), "x", "", "9" * 5000, "-1", [], {}, [None],
           [-1], {"a": 1}, ["a"] * 40, "[1]", "<f4"]


def _fields(man):
    """(description, container, key) of every value of the manifest but its digest."""
    out = [(f"top {k}", man, k) for k in man if k != "digest"]
    out += [(f"files[0].{k}", man["files"][0], k) for k in man["files"][0]]
    for name in ("a", "step"):
        e = entry(man, name)
        out += [(f"{name}.{k}", e, k) for k in e]
    b = entry(man, "a")["blocks"][1]
    out += [(f"a.blocks[1].{k}", b, k) for k in b]
    return out


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v)[:12] for v in HOSTILE])
def test_every_field_with_hostile_values(saved, value):
    """Every value of the manifest replaced by each hostile value, its digest
    recomputed: load and verify either refuse with one CheckpointError or
    return exactly the saved data; never another error, never wrong data."""
    base = manifest(saved)
    outcomes = set()
    for k in range(len(_fields(base))):
        man = json.loads(json.dumps(base))
        what, box, key = _fields(man)[k]
        box[key] = value
        man["digest"] = F.manifest_digest(man)
        (saved / "manifest.json").write_text(json.dumps(man))
        for call in (lambda: checkpoint.load(str(saved), {"a": TARGET, "step": None}, rank=0),
                     lambda: checkpoint.verify(str(saved))):
            try:
                got = call()
            except CheckpointError:
                outcomes.add("refused")
                continue
            except Exception as e:   # noqa: BLE001  (the assertion names it)
                pytest.fail(f"{what} = {value!r}: {type(e).__name__}: {e}")
            if isinstance(got, dict):   # a plain value is bound by the digest only: a forger may set it
                assert np.array_equal(got["a"], A) and (got["step"] == 3 or what == "step.value"), \
                    f"{what} = {value!r}: wrong data"
            outcomes.add("loaded")
    assert "refused" in outcomes


def test_a_committed_save_whose_writer_is_slow_to_let_go_is_still_swept(tmp_path, monkeypatch):
    """Save 1 commits, and before its writer lets go of its marker save 2
    commits: save 1's files go with save 2's sweep (they are not a running
    save's any more), so no stale data file stays behind."""
    committed, go = threading.Event(), threading.Event()
    release = checkpoint._Writer.release
    main = threading.current_thread()

    def held(self):   # the other thread's writer lets go only once told to
        if threading.current_thread() is not main:
            committed.set()
            go.wait(SECONDS)
        release(self)
    monkeypatch.setattr(checkpoint._Writer, "release", held)
    t = threading.Thread(target=checkpoint.save, args=({"w": A}, str(tmp_path), {"w": LAYOUT}))
    t.start()
    assert committed.wait(SECONDS)
    first = set(checkpoint.read_manifest(str(tmp_path)).files)
    checkpoint.save({"w": A + 1}, str(tmp_path), {"w": LAYOUT})
    go.set()
    t.join(SECONDS)
    files = set(checkpoint.read_manifest(str(tmp_path)).files)
    assert not files & first
    assert sorted(os.listdir(tmp_path)) == sorted([".lock", "manifest.json", *files])
    assert np.array_equal(checkpoint.load(str(tmp_path), {"w": None})["w"], A + 1)


@pytest.mark.parametrize("call,match", [
    (lambda d: checkpoint.load(3), "directory name .* not int"),
    (lambda d: checkpoint.verify(None), "directory name .* not NoneType"),
    (lambda d: checkpoint.read_manifest(b"x"), "directory name .* not bytes"),
    (lambda d: checkpoint.commit(1.5, "s1"), "directory name .* not float"),
    (lambda d: checkpoint.load(d, read_buffer="x"), "read_buffer 'x'"),
    (lambda d: checkpoint.load(d, read_buffer=0), "read_buffer 0"),
    (lambda d: checkpoint.load(d, {"a": LAYOUT}, rank="0"), "rank '0'"),
    (lambda d: checkpoint.load(d, {"a": LAYOUT}, rank=True), "rank True"),
    (lambda d: checkpoint.save({"a": A[:2]}, d, {"a": LAYOUT}, rank=-1, save_id="s2"), "rank -1"),
    (lambda d: checkpoint.save({"a": A[:2]}, d, {"a": LAYOUT}, rank="a", save_id="s2"), "rank 'a'"),
    (lambda d: checkpoint.save({"a": A}, d, [("a", LAYOUT)]), "layouts is a dict"),
])
def test_api_arguments(saved, call, match):
    with pytest.raises(CheckpointError, match=match):
        call(str(saved))
