"""Every dtype the frameworks hold (``verishard.dtypes.NAMES``: bool, int8-64,
uint8-64, float16, bfloat16, float32, float64, complex64/128 and the float8
types torch and JAX share) on every surface, bit for bit: checkpoints saved
from numpy, torch and JAX and loaded whole and onto other layouts; PyTorch
DCP directories written by ``dcp.save``; ``verishard.jax.reshard`` eager and
under ``jax.jit``; ``verishard.torch.redistribute`` and ``transfer`` and
DTensor checkpoints on 4 gloo processes (tests/dtypes_torch_job.py); the MPI
runtime under ``mpirun -n 4`` (tests/dtypes_mpi_job.py). Arrays are random
bytes (NaNs and non-canonical encodings included) compared as bytes.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pytest

from verishard import checkpoint, dtypes
from verishard.checkpoint import format as F
from verishard.errors import CheckpointError, DtypeError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

NAMES = dtypes.NAMES


def random_array(name: str, shape=(4, 6), seed: int = 0) -> np.ndarray:
    """Random bytes viewed as the dtype (bool: 0 or 1), element k < 256 with k
    as its most significant byte: every sign and exponent of a 1- or 2-byte
    float, NaNs and infinities among them, in an array of 256 elements."""
    dt = dtypes.numpy_dtype(name)
    n = int(np.prod(shape))
    raw = np.random.default_rng(seed).integers(0, 256, n * dt.itemsize, dtype=np.uint8).reshape(n, dt.itemsize)
    top = dt.itemsize - 1 if name not in ("complex64", "complex128") else dt.itemsize // 2 - 1   # (little-endian)
    raw[:256, top] = np.arange(min(n, 256))
    if name == "bool":
        raw %= 2
    return raw.reshape(-1).view(dt).reshape(shape)


def same(a, b) -> bool:
    """Same dtype, shape and bytes (NaNs compare equal)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


# --- the table ------------------------------------------------------------------------------------------------

def test_names_are_what_torch_and_jax_share():
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    import ml_dtypes
    for name in NAMES:
        assert isinstance(getattr(torch, name), torch.dtype), name
        assert np.dtype(getattr(jnp, name)) == dtypes.numpy_dtype(name), name
        assert dtypes.name_of(getattr(torch, name)) == name == dtypes.name_of(dtypes.numpy_dtype(name))
    shared = {n for n in dir(torch) if n.startswith("float8") and isinstance(getattr(torch, n), torch.dtype)} & \
        {n for n in dir(ml_dtypes) if n.startswith("float8")}
    assert shared and shared <= set(NAMES), shared - set(NAMES)


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith(("float", "bfloat"))])
def test_reduction_units_are_values_of_the_dtype(name):
    torch = pytest.importorskip("torch")
    for op in ("max", "min"):
        unit = dtypes.reduction_unit(name, op)
        a = np.array(unit, dtype=dtypes.numpy_dtype(name))
        t = torch.full((), unit, dtype=getattr(torch, name))
        assert not np.isnan(a.astype(np.float32)) and float(a.astype(np.float64)) == unit, (op, unit)
        assert float(t.to(torch.float64)) == unit, (op, unit)   # torch's value of the same unit
    with pytest.raises(DtypeError, match="no zero") if name == "float8_e8m0fnu" else _nothing():
        assert dtypes.reduction_unit(name, "sum") == 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("bad", [np.dtype("U3"), np.dtype(object), np.dtype([("a", "<f4")]), "float128x",
                                 np.dtype("V2")])
def test_other_dtypes_are_one_error(bad):
    with pytest.raises(DtypeError, match="not a number type verishard moves"):
        dtypes.name_of(bad)


# --- checkpoints -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_round_trip_numpy_torch_jax(tmp_path, name):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    a = random_array(name, seed=NAMES.index(name))
    with jax.enable_x64(True):   # JAX's own rule: 64-bit dtypes need x64
        state = {"np": a, "torch": dtypes.numpy_to_torch(a.copy()), "jax": jax.numpy.asarray(a),
                 "scalar": dtypes.numpy_to_torch(a[0, :1].reshape(()).copy())}
        assert dtypes.name_of(state["jax"].dtype) == name and dtypes.name_of(state["torch"].dtype) == name
        checkpoint.save(state, tmp_path, {"np": ("x=2", "[2{x}4, 6]")})
    man = json.loads((tmp_path / F.MANIFEST).read_text())
    assert {e["dtype"] for e in man["entries"]} == {name} and man["version"] == F.VERSION
    back = checkpoint.load(tmp_path)   # no target: each as the kind it was saved from

    def host(x):
        return dtypes.torch_to_numpy(x) if isinstance(x, torch.Tensor) else np.asarray(x)
    assert isinstance(back["torch"], torch.Tensor) and isinstance(back["scalar"], torch.Tensor)
    assert isinstance(back["jax"], jax.Array) or name in ("int64", "uint64", "float64", "complex128")   # x64 off
    for key in ("np", "torch", "jax"):
        assert same(host(back[key]), a), key
    assert same(host(back["scalar"]), a[0, 0])
    for r in range(2):   # onto another layout, block by block
        got = checkpoint.load(tmp_path, {"np": ("x=2", "[4, 3{x}6]")}, rank=r)["np"]
        assert same(got, a[:, 3 * r:3 * r + 3])
    assert checkpoint.verify(tmp_path) == 5   # two blocks of "np", one each of the others
    back = checkpoint.load(tmp_path, {"torch": None}, dtype=name)["torch"]
    assert same(dtypes.torch_to_numpy(back), a)   # torch's view of the loaded bytes


def test_checkpoint_dtype_asked_for_is_checked(tmp_path):
    checkpoint.save({"w": random_array("bfloat16")}, tmp_path)
    with pytest.raises(CheckpointError, match="holds bfloat16, not float16"):
        checkpoint.load(tmp_path, {"w": None}, dtype="float16")


def test_a_one_device_jax_array_saves(tmp_path):
    jax = pytest.importorskip("jax")
    from jax.sharding import NamedSharding, PartitionSpec as P, SingleDeviceSharding
    a = random_array("bfloat16", (4, 6), 7)
    x = jax.device_put(a, jax.devices()[1])
    assert isinstance(x.sharding, SingleDeviceSharding)
    one = jax.device_put(a, NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",)), P("x")))
    checkpoint.save({"single": x, "named": one}, tmp_path)
    back = checkpoint.load(tmp_path)
    assert same(back["single"], a) and same(back["named"], a)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    y = checkpoint.load(tmp_path, {"single": NamedSharding(mesh, P(None, "x"))})["single"]
    assert y.dtype == a.dtype and same(np.asarray(y), a) and all(
        same(np.asarray(s.data), a[s.index]) for s in y.addressable_shards)


@pytest.mark.parametrize("bad,what", [(np.array(["ab"]), "<U2"), (np.array([object()]), "|O"),
                                      ("complex32", "complex32")])
def test_dtypes_not_stored_are_one_error(tmp_path, bad, what):
    if isinstance(bad, str):
        torch = pytest.importorskip("torch")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bad = torch.zeros(2, dtype=getattr(torch, bad))
    with pytest.raises(CheckpointError, match=f"dtype .*{what}.* is not a number type"):
        checkpoint.save({"w": bad}, tmp_path)
    assert not (tmp_path / F.MANIFEST).exists()


def test_without_ml_dtypes_only_low_precision_needs_it(tmp_path, monkeypatch):
    checkpoint.save({"w": random_array("bfloat16")}, tmp_path / "bf16")
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)   # import ml_dtypes now raises ImportError
    a = random_array("float32")
    checkpoint.save({"w": a}, tmp_path / "f32")
    assert same(checkpoint.load(tmp_path / "f32")["w"], a)
    with pytest.raises(CheckpointError, match="pip install ml_dtypes"):
        checkpoint.load(tmp_path / "bf16")
    torch = pytest.importorskip("torch")
    with pytest.raises(CheckpointError, match="dtype bfloat16 needs the package ml_dtypes.*pip install ml_dtypes"):
        checkpoint.save({"w": torch.zeros(2, dtype=torch.bfloat16)}, tmp_path / "t")


def _as_version_3(path) -> None:
    """Rewrite a fresh checkpoint as format 3 wrote it: numpy's dtype text in
    the manifest and in every block header (padded to its length), the
    manifest's digest recomputed."""
    man = json.loads((path / F.MANIFEST).read_text())
    man["version"] = 3
    for e in man["entries"]:
        if e["kind"] != "array":
            continue
        text = dtypes.numpy_dtype(e["dtype"]).str
        for b in e["blocks"]:
            with open(path / b["file"], "r+b") as f:
                f.seek(b["header"])
                raw = f.read(b["header_bytes"])
                new = raw.replace(f'"dtype":"{e["dtype"]}"'.encode(), f'"dtype":"{text}"'.encode())
                assert new != raw and len(new) <= len(raw)
                f.seek(b["header"])
                f.write(new + b" " * (len(raw) - len(new)))
        e["dtype"] = text
    man["digest"] = F.manifest_digest(man)
    (path / F.MANIFEST).write_text(json.dumps(man))


def test_format_3_checkpoints_still_load(tmp_path):
    state = {n: random_array(n, seed=k) for k, n in enumerate(dtypes.NUMPY_NAMES)}
    checkpoint.save(state, tmp_path, {n: ("x=2", "[2{x}4, 6]") for n in state})
    _as_version_3(tmp_path)
    assert json.loads((tmp_path / F.MANIFEST).read_text())["entries"][0]["dtype"].startswith(("<", "|"))
    back = checkpoint.load(tmp_path)
    assert all(same(back[n], a) for n, a in state.items())
    assert checkpoint.verify(tmp_path) == 2 * len(state)


def test_dcp_directories_of_every_dtype(tmp_path):
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    arrays = {n: random_array(n, (6, 4), k) for k, n in enumerate(NAMES)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({n: dtypes.numpy_to_torch(a.copy()) for n, a in arrays.items()}, checkpoint_id=str(tmp_path),
                 no_dist=True)
    back = checkpoint.load(tmp_path)
    for n, a in arrays.items():
        assert same(back[n], a), n
        got = checkpoint.load(tmp_path, {n: ("u=3", "[2{u}6, 4]")}, rank=2, dtype=getattr(torch, n))[n]
        assert same(got, a[4:6]), n


# --- JAX ---------------------------------------------------------------------------------------------------------

def test_jax_reshard_every_dtype():
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 8:  # pragma: no cover
        pytest.skip("needs 8 JAX devices")
    from jax.sharding import NamedSharding, PartitionSpec as P
    import verishard.jax as vj
    jm = vj.jax_mesh("x=2,y=4")
    pairs = [(P("x", "y"), P()), (P("x", None), P("y", "x")), (P(None, "y"), P(("x", "y"), None))]
    bad = []
    with jax.enable_x64(True):
        for k, name in enumerate(NAMES):
            a = random_array(name, (16, 16), k)   # every sign and exponent of bfloat16 and float8: NaNs too
            for src, dst in pairs:
                x = jax.device_put(a, NamedSharding(jm, src))
                s = NamedSharding(jm, dst)
                for how, y in (("eager", vj.reshard(x, s)),
                               ("jit", jax.jit(lambda v: vj.reshard(v, s, src=x.sharding))(x))):
                    ok = same(np.asarray(y), a) and y.sharding.is_equivalent_to(s, 2) and all(
                        same(np.asarray(sh.data), a[sh.index]) for sh in y.addressable_shards)
                    if not ok:
                        bad.append((name, str(src), str(dst), how))
    assert not bad, bad


# --- torch.distributed (gloo) and MPI ----------------------------------------------------------------------------

def test_torch_redistribute_transfer_and_checkpoints_on_gloo(tmp_path):
    pytest.importorskip("torch")
    from torch_job import launch
    ranks = launch("dtypes_torch_job.py", tmp_path, 4, timeout=400)
    seen = {}
    for r, d in ranks.items():
        for rec in d["records"]:
            where = f"rank {r}: {rec}"
            seen.setdefault(rec["case"], set()).add(rec["dtype"])
            if rec["case"] == "partial":
                if "error" in rec:   # gloo cannot reduce it: neither can DTensor, and ours names the dtype
                    assert "dtensor_error" in rec and rec["error"].startswith("NotSupportedYet"), where
                    assert f"dtype {rec['dtype']}" in rec["error"] or f"torch.{rec['dtype']}" in rec["error"], where
                else:
                    assert rec["dtype_kept"] and rec["dtensor"], where
                continue
            assert "error" not in rec, where
            assert rec["ok"] and rec["dtype_kept"] and rec.get("placements", True), where
    assert all(v == set(NAMES) for v in seen.values()) and set(seen) == {"redistribute", "transfer", "partial",
                                                                        "checkpoint"}, seen
    reduced = {rec["dtype"] for rec in ranks[0]["records"] if rec["case"] == "partial" and "error" not in rec}
    assert {"bfloat16", "float16", "float32", "int32", "complex64"} <= reduced


def test_mpi_runtime_every_dtype():
    from mpi_helpers import report, require_mpi
    require_mpi()
    from verishard.runtime.launch import mpirun
    res = mpirun([sys.executable, os.path.join(HERE, "dtypes_mpi_job.py")], 4, timeout=300,
                 cwd=os.path.dirname(HERE))
    assert not res.timed_out and res.returncode == 0, report(res, 4)
    assert "DTYPES mpi OK" in res.output, report(res, 4)
