"""State-dict checkpoints (issue 31 items 1-3): nested dicts of arrays and
values in one manifest; loads into numpy blocks, DTensors and jax.Arrays;
across rank counts (numpy with MPI, torch with gloo, JAX on 8 CPU devices);
and exact reads: the bytes a rank reads against the bytes it needs."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from verishard import ArrayType, checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def block(t: ArrayType, a: np.ndarray, r: int) -> np.ndarray:
    return a[tuple(slice(s, s + n) for s, n in zip(t.block_starts(r), t.valid_shape(r)))]


def test_nested_state_with_values_scalars_and_torch(tmp_path):
    torch = pytest.importorskip("torch")
    w = np.arange(60, dtype=np.float32).reshape(6, 10)
    state = {"model": {"layer": {"w": w, "b": torch.arange(10, dtype=torch.int32)}},
             "optim": {"step": 42, "lr": 1e-3, "betas": 0.9, "name": "adam", "flag": True, "none": None,
                       "count": np.int64(3), "scale": np.float32(0.5), "t": np.array(2.5)},
             "huge": 2 ** 100}
    checkpoint.save(state, str(tmp_path), {"model": {"layer": {"w": ("x=2,y=2", "[3{x}6, 5{y}10]")}}})
    got = checkpoint.load(str(tmp_path))
    assert np.array_equal(got["model"]["layer"]["w"], w)
    assert np.array_equal(got["model"]["layer"]["b"], np.arange(10, dtype=np.int32))
    o = got["optim"]
    assert (o["step"], o["lr"], o["betas"], o["name"], o["flag"], o["none"]) == (42, 1e-3, 0.9, "adam", True, None)
    assert (o["count"], o["scale"], got["huge"]) == (3, 0.5, 2 ** 100) and isinstance(o["count"], int)
    assert o["t"].shape == () and o["t"] == 2.5
    part = checkpoint.load(str(tmp_path), {"model": {"layer": {"w": ("u=3", "[6, 4{u}10]")}}}, rank=2)
    assert list(part) == ["model"] and np.array_equal(part["model"]["layer"]["w"], w[:, 8:])


@pytest.mark.parametrize("bad,match", [
    ({"a": object()}, "neither an array nor a plain value"),
    ({3: 1}, "is not a string"),
    ({"a": 1.0j}, "neither an array"),
    ({"a": np.zeros(3, dtype="U2")}, "not a number type"),
    ({"a": np.zeros(4)}, "global array of shape"),
])
def test_bad_states_refused(tmp_path, bad, match):
    with pytest.raises(checkpoint.CheckpointError, match=match):
        checkpoint.save(bad, str(tmp_path), {"a": ("x=2", "[3{x}6]")} if "a" in bad and
                        isinstance(bad["a"], np.ndarray) and bad["a"].dtype.kind == "f" else None)
    assert not os.path.exists(tmp_path / "manifest.json")
    assert [n for n in os.listdir(tmp_path) if n != ".lock"] == []   # nothing half-written left


LAYOUTS = [  # (saved mesh, type), (target mesh, type): row, column, grid, uneven
    (("x=8", "[128{x}1024, 512]"), ("u=3", "[342{u}1024, 512]")),
    (("x=8", "[128{x}1024, 512]"), ("u=6", "[1024, 86{u}512]")),
    (("x=2,y=4", "[512{x}1024, 128{y}512]"), ("u=3,v=2", "[342{u}1024, 256{v}512]")),
    (("x=8", "[1024, 64{x}512]"), ("u=5", "[205{u}1024, 512]")),
    (("x=4", "[256{x}1024, 512]"), ("u=7", "[1024, 74{u}512]")),
    (("x=8", "[131072{x}1048576]"), ("u=3", "[349526{u}1048576]")),
]


@pytest.mark.parametrize("src,dst", LAYOUTS)
def test_exact_reads(tmp_path, src, dst):
    """Every rank reads its block's bytes, its tiles' digests and the block
    headers: within 1% of the block, counted by the reader and by the kernel
    (``rchar`` of /proc/self/io, every byte passed through read/pread)."""
    shape = (1024, 512) if "512]" in src[1] else (1048576,)
    A = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    checkpoint.save({"a": A}, str(tmp_path), {"a": src})
    t = ArrayType.parse(dst[1], dst[0])

    def rchar():
        with open("/proc/self/io") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("rchar:"))
    for r in range(t.mesh.num_devices):
        stats = {}
        before = rchar()
        got = checkpoint.load(str(tmp_path), {"a": (t.mesh, t)}, rank=r, stats=stats)["a"]
        kernel = rchar() - before
        assert np.array_equal(got, block(t, A, r))
        assert stats["bytes_needed"] == got.nbytes
        assert got.nbytes <= stats["bytes_read"] <= 1.01 * got.nbytes, (r, stats)
        manifest = os.path.getsize(tmp_path / "manifest.json")
        assert stats["bytes_read"] <= kernel <= stats["bytes_read"] + manifest + 64 * 1024, (r, kernel, stats)


def test_jax_state_on_8_devices(tmp_path):
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 JAX devices")
    from jax.sharding import NamedSharding, PartitionSpec as P
    from verishard.jax.sharding import jax_mesh
    A = np.arange(24 * 24, dtype=np.float32).reshape(24, 24)
    B = np.arange(48, dtype=np.int32)
    m8 = jax_mesh("x=2,y=4")
    state = {"params": {"a": jax.device_put(A, NamedSharding(m8, P("x", "y"))),
                        "b": jax.device_put(B, NamedSharding(m8, P("y")))}, "step": 3}
    checkpoint.save(state, str(tmp_path))
    for mesh, spec_a, spec_b in (("u=3", P(None, "u"), P("u")), ("u=8", P("u"), P()),
                                 ("u=2,v=3", P("v", "u"), P(("u", "v"))), ("u=1", P(), P())):
        jm = jax_mesh(mesh)
        got = checkpoint.load(str(tmp_path), {"params": {"a": NamedSharding(jm, spec_a),
                                                         "b": NamedSharding(jm, spec_b)}, "step": None})
        a, b = got["params"]["a"], got["params"]["b"]
        assert isinstance(a, jax.Array) and a.sharding == NamedSharding(jm, spec_a)
        assert np.array_equal(np.asarray(a), A) and np.array_equal(np.asarray(b), B)
        assert got["step"] == 3
        for s in a.addressable_shards:
            assert np.array_equal(np.asarray(s.data), A[s.index])


def test_numpy_state_over_mpi(tmp_path):
    from mpi_helpers import report, require_mpi
    from verishard.runtime.launch import mpirun
    require_mpi()
    res = mpirun([sys.executable, os.path.join(HERE, "checkpoint_job.py"), "mpi", str(tmp_path)], 4,
                 timeout=240, cwd=ROOT)
    assert not res.timed_out and res.returncode == 0, report(res, 4)
    assert "CHECKPOINT MPI OK" in res.output, report(res, 4)


@pytest.mark.parametrize("savers,loaders", [(2, 3)])
def test_dtensor_state_over_gloo(tmp_path, savers, loaders):
    pytest.importorskip("torch")
    res = subprocess.run([sys.executable, os.path.join(HERE, "checkpoint_job.py"), "torch", str(tmp_path),
                          str(savers), str(loaders)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("saved True") == savers, out[-4000:]   # every rank returns once committed
    assert out.count("] ours OK") == loaders and out.count("] dcp OK") == loaders, out[-4000:]


def _types(n: int) -> list[tuple[str, str]]:
    """Row, column and (on composite meshes) nested and grid types over n devices, for a 12 x 10 array."""
    out = [(f"u={n}", f"[{-(-12 // n)}{{u}}12, 10]"), (f"u={n}", f"[12, {-(-10 // n)}{{u}}10]")]
    if n in (4, 6, 8):
        a, b = 2, n // 2
        out += [(f"u={a},v={b}", f"[{-(-12 // n)}{{v,u}}12, 10]"),
                (f"u={a},v={b}", f"[{-(-12 // a)}{{u}}12, {-(-10 // b)}{{v}}10]")]
    return out


def test_any_saving_ranks_to_any_loading_ranks(tmp_path):
    """Saved from 1, 2, 4 and 8 ranks; loaded on every count from 1 to 8 in
    row, column, nested (two axes on one dimension, uneven) and grid types."""
    A = (np.arange(120, dtype=np.int32).reshape(12, 10) * 37) % 101
    for s in (1, 2, 4, 8):
        for k, (sm, st) in enumerate(_types(s)):
            d = str(tmp_path / f"{s}-{k}")
            checkpoint.save({"a": A}, d, {"a": (sm, st)})
            for n in range(1, 9):
                for dm, dt in _types(n):
                    t = ArrayType.parse(dt, dm)
                    for r in range(n):
                        got = checkpoint.load(d, {"a": (dm, dt)}, rank=r)["a"]
                        assert np.array_equal(got, block(t, A, r)), (sm, st, dm, dt, r)


def test_nested_uneven_dtensor_target(tmp_path):
    """A DTensor layout with two mesh dimensions on one uneven tensor
    dimension ([Shard(0), Shard(0)], 7 rows over 2 x 2: DTensor's chunks of
    chunks), loaded as a DTensor, against DTensor's own local shape and offset."""
    pytest.importorskip("torch")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
    from verishard.torch.dtensor import fake_process_group
    A = np.arange(28, dtype=np.float32).reshape(7, 4)
    checkpoint.save({"a": A}, str(tmp_path), {"a": ("x=3", "[3{x}7, 4]")})
    with fake_process_group(4):
        dm = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
        got = checkpoint.load(str(tmp_path), {"a": (dm, [Shard(0), Shard(0)])})["a"]
        shape, offset = _compute_local_shape_and_global_offset((7, 4), (2, 2), [0, 0], [Shard(0), Shard(0)])
        assert tuple(got.to_local().shape) == tuple(shape)
        assert np.array_equal(got.to_local().numpy(), A[offset[0]:offset[0] + shape[0]])


def test_docs_torchrun_example(tmp_path):
    """The torchrun example of docs/checkpoint.md, run as the page says: saved
    from 4 processes, loaded on 3."""
    pytest.importorskip("torch")
    text = open(os.path.join(ROOT, "docs", "checkpoint.md")).read()
    after = text[text.index("### A training state with torchrun"):]
    code = after[after.index("```python\n") + len("```python\n"):]
    script = tmp_path / "ckpt_example.py"
    script.write_text(code[:code.index("```")])
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = ""
    for n, phase in ((4, "save"), (3, "load")):
        res = subprocess.run([torchrun, "--standalone", "--nproc-per-node", str(n), str(script), phase,
                              str(tmp_path / "ckpt")], capture_output=True, text=True, timeout=300, cwd=ROOT,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert res.returncode == 0, "\n".join(l for l in (res.stdout + res.stderr).splitlines() if not l.startswith("W1"))[-3000:]
        out = res.stdout
    assert "loaded (Shard(dim=1),) (20, 10) step 1" in out, out
