"""Checkpoints (verishard.checkpoint): save from one mesh and type, load on
another, every rank reading only its pieces; and the faults: truncated,
missing or corrupted files, the wrong dtype, a writer killed mid-save."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from verishard import ArrayType, Mesh, checkpoint
from verishard.errors import CheckpointError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def block(t: ArrayType, A: np.ndarray, r: int) -> np.ndarray:
    return A[tuple(slice(s, s + l) for s, l in zip(t.block_starts(r), t.valid_shape(r)))]


PAIRS = [
    ("x=2,y=2", "[3{x}6, 5{y}10]", "u=3", "[2{u}6, 10]"),
    ("x=2,y=2", "[3{x}6, 5{y}10]", "u=3", "[6, 4{u}10]"),           # uneven target
    ("x=2,y=2", "[2{x,y}6, 10]", "u=2,v=3", "[3{u}6, 4{v}10]"),     # uneven source and target
    ("x=2,y=2", "[6, 10]", "u=2,v=3", "[1{v,u}6, 10]"),             # replicated source
    ("x=2,y=2", "[3{y}6, 5{x}10]", "u=2,v=3", "[6, 2{u,v}10]"),
]


@pytest.mark.parametrize("sm,st,dm,dt", PAIRS)
@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_save_then_load_on_another_mesh(tmp_path, sm, st, dm, dt, dtype):
    A = (np.arange(60).reshape(6, 10) * 3 - 7).astype(dtype)
    checkpoint.save(A, sm, st, str(tmp_path))
    t = ArrayType.parse(dt, dm)
    for r in range(t.mesh.num_devices):
        got = checkpoint.load(str(tmp_path), dm, t, r)
        assert got.dtype == A.dtype
        assert np.array_equal(got, block(t, A, r))
    assert checkpoint.verify(str(tmp_path)) == Mesh.parse(sm).num_devices


def test_ranks_saving_independently_then_commit(tmp_path):
    A = np.arange(48.0).reshape(8, 6)
    t = ArrayType.parse("[4{x}8, 3{y}6]", "x=2,y=2")
    for r in range(4):
        assert checkpoint.save(block(t, A, r), "x=2,y=2", t, str(tmp_path), rank=r) is None
    with pytest.raises(CheckpointError, match="no"):
        checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 6]", 0)   # not committed yet
    checkpoint.commit(str(tmp_path))
    got = checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 6]", 1)
    assert np.array_equal(got, A[4:])
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".json") and f != "manifest.json"]


def test_reads_only_its_pieces(tmp_path):
    A = np.arange(256 * 1024, dtype=np.float32).reshape(1024, 256)   # 1 MiB, rows of 1 KiB
    checkpoint.save(A, "x=8", "[128{x}1024, 256]", str(tmp_path))
    t = ArrayType.parse("[171{u}1024, 256]", "u=6")
    total = 0
    for r in range(6):
        stats = {}
        got = checkpoint.load(str(tmp_path), "u=6", t, r, stats=stats, read_buffer=1 << 16)
        assert np.array_equal(got, block(t, A, r))
        assert stats["bytes_read"] <= got.nbytes + 2 * 2 * checkpoint.CHUNK   # two files at most, edges
        total += stats["bytes_read"]
    assert total <= A.nbytes + 6 * 4 * checkpoint.CHUNK


def test_reshard_checkpoint_offline(tmp_path):
    A = np.arange(60.0).reshape(6, 10)
    checkpoint.save(A, "x=2,y=2", "[3{x}6, 5{y}10]", str(tmp_path / "a"))
    checkpoint.reshard(str(tmp_path / "a"), str(tmp_path / "b"), "u=3", "[6, 4{u}10]")
    man = checkpoint.read_manifest(str(tmp_path / "b"))
    assert man["type"] == "[6, 4{u}10]" and len(man["files"]) == 3
    got = checkpoint.load(str(tmp_path / "b"), "x=2", "[3{x}6, 10]", 1)
    assert np.array_equal(got, A[3:])


@pytest.fixture
def saved(tmp_path):
    A = np.arange(40, dtype=np.float32).reshape(4, 10)
    checkpoint.save(A, "x=2", "[2{x}4, 10]", str(tmp_path))
    man = json.loads((tmp_path / "manifest.json").read_text())
    return tmp_path, A, man


def test_truncated_file_is_refused(saved):
    path, _, man = saved
    f = path / man["files"][1]["file"]
    f.write_bytes(f.read_bytes()[:-4])
    with pytest.raises(CheckpointError, match="truncated"):
        checkpoint.load(str(path), "u=1", "[4, 10]", 0)


def test_missing_file_is_refused(saved):
    path, _, man = saved
    os.remove(path / man["files"][0]["file"])
    with pytest.raises(CheckpointError, match="missing"):
        checkpoint.load(str(path), "u=1", "[4, 10]", 0)


def test_wrong_dtype_is_refused(saved):
    path, _, man = saved
    with pytest.raises(CheckpointError, match="holds float32, not float64"):
        checkpoint.load(str(path), "u=1", "[4, 10]", 0, dtype=np.float64)
    man["files"][0]["dtype"] = "<f8"
    (path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="dtype float64, the manifest says float32"):
        checkpoint.load(str(path), "u=1", "[4, 10]", 0)
    man["files"][0]["dtype"] = "<f4"
    man["dtype"] = "<f8"
    for e in man["files"]:
        e["dtype"] = "<f8"
    (path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="bytes recorded"):
        checkpoint.load(str(path), "u=1", "[4, 10]", 0)


def test_corrupted_chunk_is_refused(saved):
    path, _, man = saved
    f = path / man["files"][1]["file"]
    data = bytearray(f.read_bytes())
    data[5] ^= 0xFF
    f.write_bytes(bytes(data))
    assert np.array_equal(checkpoint.load(str(path), "x=2", "[2{x}4, 10]", 0),
                          np.arange(20, dtype=np.float32).reshape(2, 10))   # rank 0 never reads file 1
    with pytest.raises(CheckpointError, match="fails its checksum"):
        checkpoint.load(str(path), "u=1", "[4, 10]", 0)
    with pytest.raises(CheckpointError, match="sha256"):
        checkpoint.verify(str(path))


def test_other_shape_is_refused(saved):
    path, _, _ = saved
    with pytest.raises(CheckpointError, match="global shape"):
        checkpoint.load(str(path), "u=1", "[4, 12]", 0)


def test_no_manifest_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="no manifest.json"):
        checkpoint.load(str(tmp_path), "u=1", "[4]", 0)


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from verishard import checkpoint
    orig = checkpoint._write_shard
    def slow(*a, **k):
        out = orig(*a, **k)
        print("SHARD", flush=True)
        time.sleep(30)
        return out
    checkpoint._write_shard = slow
    A = np.full((8, 1000), float(sys.argv[2]), dtype=np.float64)
    checkpoint.save(A, "x=4", "[2{x}8, 1000]", sys.argv[1])
""")


def _kill_mid_save(path, value):
    p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path), str(value)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "SHARD"     # one shard written, the others not
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize("earlier", [False, True])
def test_killed_writer_loses_nothing_and_loads_nothing_wrong(tmp_path, earlier):
    if earlier:
        checkpoint.save(np.full((8, 1000), 1.0), "x=4", "[2{x}8, 1000]", str(tmp_path))
    _kill_mid_save(tmp_path, 2.0)
    if earlier:   # the earlier checkpoint is intact: its manifest and files
        for r in range(2):
            got = checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 1000]", r)
            assert (got == 1.0).all()
        assert checkpoint.verify(str(tmp_path)) == 4
    else:
        with pytest.raises(CheckpointError, match="did not finish"):
            checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 1000]", 0)


def test_jax_array(tmp_path):
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices")
    from jax.sharding import NamedSharding, PartitionSpec as P
    from verishard.jax_sharding import jax_mesh
    jm = jax_mesh("x=2,y=2")
    A = np.arange(48, dtype=np.float32).reshape(6, 8)
    x = jax.device_put(A, NamedSharding(jm, P("x", "y")))
    checkpoint.save(x, path=str(tmp_path))
    man = checkpoint.read_manifest(str(tmp_path))
    assert man["type"] == "[3{x}6, 4{y}8]"
    assert np.array_equal(checkpoint.load(str(tmp_path), "u=3", "[2{u}6, 8]", 2), A[4:])


def test_docs_page_runs():
    import doctest
    result = doctest.testfile(os.path.join(ROOT, "docs", "checkpoint.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_torch_dtensor(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.distributed.tensor import DTensor, Shard
    from verishard.dtensor import device_mesh, fake_process_group
    A = np.arange(48, dtype=np.float32).reshape(6, 8)
    t = ArrayType.parse("[3{x}6, 4{y}8]", "x=2,y=2")
    with fake_process_group(4):   # this process is rank 0 of 4
        dm = device_mesh("x=2,y=2")
        dt = DTensor.from_local(torch.from_numpy(block(t, A, 0).copy()), dm, [Shard(0), Shard(1)],
                                run_check=False, shape=torch.Size((6, 8)), stride=(8, 1))
        assert checkpoint.save(dt, path=str(tmp_path), save_id="s") is None   # rank 0's block, read from dt
    for r in range(1, 4):   # the other ranks, saving their blocks as numpy
        checkpoint.save(block(t, A, r), "x=2,y=2", t, str(tmp_path), rank=r, save_id="s")
    checkpoint.commit(str(tmp_path), "s")
    assert checkpoint.read_manifest(str(tmp_path))["type"] == "[3{x}6, 4{y}8]"
    assert np.array_equal(checkpoint.load(str(tmp_path), "u=2", "[6, 4{u}8]", 0), A[:, :4])
