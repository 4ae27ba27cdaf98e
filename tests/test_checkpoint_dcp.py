"""PyTorch DCP checkpoints read as they are (issue 31 item 4): directories
written by torch's own ``dcp.save`` loaded onto other layouts, reading only
the needed byte ranges; and DCP directories that are damaged or hostile.
(A gloo case, DTensors saved by dcp.save from 2 processes and loaded on 3:
tests/test_checkpoint_state.py::test_dtensor_state_over_gloo.)"""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from verishard import ArrayType, checkpoint  # noqa: E402
from verishard.errors import CheckpointError  # noqa: E402

W = np.arange(256 * 96, dtype=np.float32).reshape(256, 96)


def block(t: ArrayType, a: np.ndarray, r: int) -> np.ndarray:
    return a[tuple(slice(s, s + n) for s, n in zip(t.block_starts(r), t.valid_shape(r)))]


@pytest.fixture
def saved(tmp_path):
    state = {"model": {"w": torch.from_numpy(W), "b": torch.arange(7, dtype=torch.int64)},
             "step": 5, "name": "run-1", "t": torch.tensor(3.5, dtype=torch.float64)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(tmp_path), no_dist=True)
    return tmp_path


@pytest.mark.parametrize("mesh,typ", [("u=3", "[256, 32{u}96]"), ("u=5", "[52{u}256, 96]"),
                                      ("u=2,v=3", "[128{u}256, 32{v}96]"), ("u=7", "[256, 14{u}96]")])
def test_load_dcp_onto_other_layouts_reading_only_the_block(saved, mesh, typ):
    t = ArrayType.parse(typ, mesh)
    for r in range(t.mesh.num_devices):
        stats = {}
        got = checkpoint.load(str(saved), {"model": {"w": (mesh, typ)}}, rank=r, stats=stats)["model"]["w"]
        assert np.array_equal(got, block(t, W, r))
        # the block's bytes, plus the metadata and the archive's directory and header (a few KB)
        md = os.path.getsize(saved / ".metadata")
        assert got.nbytes <= stats["bytes_read"] - md <= got.nbytes + 4096, stats


def test_load_everything_and_values(saved):
    got = checkpoint.load(str(saved))
    assert np.array_equal(got["model"]["w"], W) and list(got["model"]["b"]) == list(range(7))
    assert got["step"] == 5 and got["name"] == "run-1"
    assert got["t"].shape == () and got["t"] == 3.5
    assert np.array_equal(checkpoint.load(str(saved), {"model": {"w": ("u=1", "[256, 96]")}}, rank=0)["model"]["w"],
                          W)


def test_load_dcp_into_dtensor(saved):
    from torch.distributed.tensor import Shard
    from verishard.torch.dtensor import fake_process_group
    with fake_process_group(4):   # this process is rank 0 of 4
        from torch.distributed.device_mesh import init_device_mesh
        dm = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
        got = checkpoint.load(str(saved), {"model": {"w": (dm, [Shard(1), Shard(0)])}})["model"]["w"]
        assert tuple(got.placements) == (Shard(1), Shard(0))
        assert np.array_equal(got.to_local().numpy(), W[:128, :48])


def test_dcp_faults(saved, tmp_path_factory):
    distcp = next(p for p in saved.iterdir() if p.suffix == ".distcp")
    with pytest.raises(CheckpointError, match="no entry 'model.x'"):
        checkpoint.load(str(saved), {"model": {"x": None}})
    with pytest.raises(CheckpointError, match="global shape"):
        checkpoint.load(str(saved), {"model": {"w": ("u=2", "[128{u}256, 95]")}}, rank=0)
    raw = distcp.read_bytes()
    distcp.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError, match="truncated|not a torch.save archive"):
        checkpoint.load(str(saved), {"model": {"b": None}})
    outside = tmp_path_factory.mktemp("elsewhere") / "x.distcp"
    outside.write_bytes(raw)
    distcp.unlink()
    distcp.symlink_to(outside)
    with pytest.raises(CheckpointError, match="symbolic link"):
        checkpoint.load(str(saved))


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("payload", [pickle.dumps(Evil()), pickle.dumps([1, 2]), b"\x80\x04garbage",
                                     pickle.dumps({"a": 1})])
def test_hostile_metadata_never_runs_code(saved, payload):
    (saved / ".metadata").write_bytes(payload)
    with pytest.raises(CheckpointError, match="not a DCP pickle|not DCP metadata"):
        checkpoint.load(str(saved))
