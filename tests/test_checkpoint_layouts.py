"""Loading onto DTensor layouts our types cannot express (issue 31 item 2):
nested uneven ``torch.chunk`` shards over two mesh dimensions, uneven and
interleaved ``_StridedShard``, empty shards. Each rank gets DTensor's own
local shard, reading only its boxes (the verified box schedule from the
saved blocks or DCP's chunks), bit for bit as ``distribute_tensor`` lays it
out; a 4-process gloo job checks against ``distribute_tensor`` itself."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Partial, Shard  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402

from verishard import checkpoint  # noqa: E402
from verishard.torch.dtensor import fake_process_group, from_placements  # noqa: E402
from verishard.errors import CheckpointError, ShardingError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHAPE = (1021, 250)   # uneven on both dimensions over 2 x 2: nested chunks differ from our blocks
A = (np.arange(SHAPE[0] * SHAPE[1], dtype=np.float32).reshape(SHAPE) * 0.37) - 11.5

TARGETS = [
    [Shard(0), Shard(0)],                          # torch.chunk of each chunk: rows 256, 255 | 255, 255
    [_StridedShard(0, split_factor=2), Shard(0)],  # mesh dimension 1 major
    [Shard(0), _StridedShard(0, split_factor=2)],  # interleaved: two boxes per rank
    [Shard(1), Shard(1)],                          # columns 63, 62 | 63, 62
    [Shard(1), _StridedShard(1, split_factor=2)],
]
SAVED = [("x=3", "[341{x}1021, 250]"), ("x=2,y=2", "[511{x}1021, 125{y}250]")]


def dtensor_local(full: np.ndarray, sizes, coords, placements) -> np.ndarray:
    """What ``distribute_tensor(full, mesh, placements).to_local()`` gives the
    rank at ``coords``: each mesh dimension's placement splits what the
    previous ones left (DTensor's ``_split_tensor``), left to right."""
    x = torch.from_numpy(full)
    for i, p in enumerate(placements):
        x = p._split_tensor(x, sizes[i], with_padding=False)[0][coords[i]]
    return x.contiguous().numpy()


@pytest.fixture
def mesh():
    with fake_process_group(4):
        yield init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))


@pytest.mark.parametrize("saved", SAVED, ids=["rows", "grid"])
def test_nested_targets_read_exactly_their_boxes(tmp_path, mesh, saved):
    """Every rank of every target: DTensor's local shard, bit for bit, and
    bytes read (data, digests and headers) within 1% of it."""
    checkpoint.save({"w": A}, str(tmp_path), {"w": saved})
    for placements in TARGETS:
        with pytest.raises(ShardingError):   # a layout our types cannot express
            from_placements("a=2,b=2", SHAPE, placements)
        for r, coords in enumerate(itertools.product(range(2), range(2))):
            stats = {}
            got = checkpoint.load(str(tmp_path), {"w": (mesh, placements)}, rank=r, stats=stats)["w"]
            want = dtensor_local(A, (2, 2), coords, placements)
            assert isinstance(got, DTensor) and tuple(got.placements) == tuple(placements)
            assert tuple(got.shape) == SHAPE
            local = got.to_local().numpy()
            assert local.shape == want.shape and local.tobytes() == want.tobytes(), (placements, r)
            assert stats["bytes_needed"] == want.nbytes
            assert want.nbytes <= stats["bytes_read"] <= 1.01 * want.nbytes, (placements, r, stats)


def test_empty_shards_and_three_dimensions(tmp_path, mesh):
    """Ranks with empty shards read nothing; a nested middle dimension of a
    3-D array and a 1-D array come out as DTensor lays them out."""
    B = np.arange(3 * 6 * 5, dtype=np.int64).reshape(3, 6, 5) * 7 % 23
    C = np.arange(2 * 9, dtype=np.float64).reshape(2, 9) / 3
    D = np.arange(9, dtype=np.int32)
    checkpoint.save({"b": B, "c": C, "d": D}, str(tmp_path), {"b": ("x=2", "[3, 3{x}6, 5]"), "c": ("x=2", "[2, 5{x}9]"),
                                                              "d": ("x=3", "[3{x}9]")})
    cases = [("b", B, [Shard(1), Shard(1)]), ("b", B, [Shard(1), _StridedShard(1, split_factor=2)]),
             ("c", C, [Shard(0), Shard(0)]), ("d", D, [_StridedShard(0, split_factor=2), Shard(0)])]
    for name, full, placements in cases:
        for r, coords in enumerate(itertools.product(range(2), range(2))):
            stats = {}
            got = checkpoint.load(str(tmp_path), {name: (mesh, placements)}, rank=r, stats=stats)[name]
            want = dtensor_local(full, (2, 2), coords, placements)
            assert got.to_local().numpy().tobytes() == want.tobytes() and got.to_local().shape == want.shape
            if want.size == 0:
                assert stats["bytes_read"] == 0 and stats["pieces"] == 0   # nothing to read, nothing read


def test_dcp_checkpoint_onto_nested_targets(tmp_path, mesh):
    """A checkpoint written by torch's own dcp.save, loaded onto the nested
    targets: DTensor's local shards, reading the needed byte ranges only."""
    import torch.distributed.checkpoint as dcp
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": {"w": torch.from_numpy(A)}}, checkpoint_id=str(tmp_path), no_dist=True)
    metadata = os.path.getsize(tmp_path / ".metadata")
    for placements in TARGETS:
        for r, coords in enumerate(itertools.product(range(2), range(2))):
            stats = {}
            got = checkpoint.load(str(tmp_path), {"model": {"w": (mesh, placements)}}, rank=r,
                                  stats=stats)["model"]["w"]
            want = dtensor_local(A, (2, 2), coords, placements)
            assert got.to_local().numpy().tobytes() == want.tobytes(), (placements, r)
            # the boxes' bytes, plus the metadata and the archive's directory and header (a few KB)
            assert want.nbytes <= stats["bytes_read"] - metadata <= want.nbytes + 4096, stats


def test_refusals(tmp_path, mesh):
    """A Partial nested target, a rank outside the mesh, and saving a DTensor
    of a nested layout (the manifest records our types): one clear error each."""
    nested = DTensor.from_local(torch.zeros(256, 250), mesh, [Shard(0), Shard(0)], run_check=False,
                                shape=torch.Size(SHAPE), stride=(250, 1))
    with pytest.raises(CheckpointError, match="w: dim 0 .*torch.chunk of each chunk.*save the DTensor redistributed"):
        checkpoint.save({"w": nested}, str(tmp_path / "nested"), save_id="s")
    checkpoint.save({"w": A}, str(tmp_path), {"w": SAVED[0]})
    with pytest.raises(CheckpointError, match="'w'"):
        checkpoint.load(str(tmp_path), {"w": (mesh, [Partial(), Shard(0)])}, rank=0)
    with pytest.raises(CheckpointError, match="rank 4 is not a rank"):
        checkpoint.load(str(tmp_path), {"w": (mesh, [Shard(0), Shard(0)])}, rank=4)
    for bad in ([_StridedShard(2, split_factor=2), Shard(0)], [_StridedShard(0, split_factor=0), Shard(0)]):
        with pytest.raises(CheckpointError, match="does not shard a tensor of 2 dimensions"):
            checkpoint.load(str(tmp_path), {"w": (mesh, bad)}, rank=0)


def test_nested_layouts_over_gloo(tmp_path):
    """4 gloo processes save DTensors (ours and dcp.save) and load both onto
    nested uneven and _StridedShard layouts of a 2 x 2 mesh, compared bit for
    bit with distribute_tensor (tests/checkpoint_job.py layouts)."""
    res = subprocess.run([sys.executable, os.path.join(HERE, "checkpoint_job.py"), "layouts", str(tmp_path / "ck")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    from checkpoint_job import nested_targets
    n = len(nested_targets())
    assert out.count(" OK local") == 2 * 4 * n and "WRONG" not in out, out[-4000:]
