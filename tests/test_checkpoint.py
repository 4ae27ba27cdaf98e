"""Checkpoints (verishard.checkpoint): save from one mesh and type, load on
another, every rank reading only its pieces. Faults and hostile input:
tests/test_checkpoint_hostile.py."""

from __future__ import annotations

import os

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
        assert checkpoint.save(block(t, A, r), "x=2,y=2", t, str(tmp_path), rank=r, save_id="step-1") is None
    with pytest.raises(CheckpointError, match="no"):
        checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 6]", 0)   # not committed yet
    checkpoint.commit(str(tmp_path), "step-1")
    got = checkpoint.load(str(tmp_path), "u=2", "[4{u}8, 6]", 1)
    assert np.array_equal(got, A[4:])
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".json") and f != "manifest.json"]
    with pytest.raises(CheckpointError, match="save id"):   # no id: ranks could not agree on a fresh one
        checkpoint.save(block(t, A, 0), "x=2,y=2", t, str(tmp_path), rank=0)
    with pytest.raises(CheckpointError, match="committed checkpoint's"):   # never over the committed files
        checkpoint.save(block(t, A, 0), "x=2,y=2", t, str(tmp_path), rank=0, save_id="step-1")


def test_reads_only_its_pieces(tmp_path):
    A = np.arange(256 * 2048, dtype=np.float32).reshape(2048, 256)   # 2 MiB, rows of 1 KiB
    checkpoint.save(A, "x=8", "[256{x}2048, 256]", str(tmp_path))
    t = ArrayType.parse("[342{u}2048, 256]", "u=6")
    for r in range(6):
        stats = {}
        got = checkpoint.load(str(tmp_path), "u=6", t, r, stats=stats, read_buffer=1 << 16)
        assert np.array_equal(got, block(t, A, r))
        assert stats["bytes_needed"] == got.nbytes
        assert stats["bytes_read"] <= 1.01 * got.nbytes   # its rows, their digests and two block headers


def test_reshard_checkpoint_offline(tmp_path):
    A = np.arange(60.0).reshape(6, 10)
    checkpoint.save(A, "x=2,y=2", "[3{x}6, 5{y}10]", str(tmp_path / "a"))
    checkpoint.reshard(str(tmp_path / "a"), str(tmp_path / "b"), "u=3", "[6, 4{u}10]")
    man = checkpoint.read_manifest(str(tmp_path / "b"))
    assert str(man.entries["array",].t) == "[6, 4{u}10]" and len(man.files) == 3
    got = checkpoint.load(str(tmp_path / "b"), "x=2", "[3{x}6, 10]", 1)
    assert np.array_equal(got, A[3:])


def test_jax_array(tmp_path):
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices")
    from jax.sharding import NamedSharding, PartitionSpec as P
    from verishard.jax.sharding import jax_mesh
    jm = jax_mesh("x=2,y=2")
    A = np.arange(48, dtype=np.float32).reshape(6, 8)
    x = jax.device_put(A, NamedSharding(jm, P("x", "y")))
    checkpoint.save(x, path=str(tmp_path))
    man = checkpoint.read_manifest(str(tmp_path))
    assert str(man.entries["array",].t) == "[3{x}6, 4{y}8]"
    assert np.array_equal(checkpoint.load(str(tmp_path), "u=3", "[2{u}6, 8]", 2), A[4:])


def test_docs_page_runs():
    import doctest
    result = doctest.testfile(os.path.join(ROOT, "docs", "checkpoint.md"), module_relative=False,
                              optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_torch_dtensor(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.distributed.tensor import DTensor, Shard
    from verishard.torch.dtensor import device_mesh, fake_process_group
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
    assert str(checkpoint.read_manifest(str(tmp_path)).entries["array",].t) == "[3{x}6, 4{y}8]"
    assert np.array_equal(checkpoint.load(str(tmp_path), "u=2", "[6, 4{u}8]", 0), A[:, :4])
