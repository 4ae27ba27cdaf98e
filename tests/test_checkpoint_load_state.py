"""Loading into the user's own state (issue 40 part 2): torch tensors, numpy
arrays and DTensors filled in place (the same objects, their memory written,
no second copy), jax.Arrays and ShapeDtypeStructs as new arrays with the
leaf's sharding, a subtree by name, the saved-from types with no target; and
``reshard-checkpoint`` of a whole training state by name patterns."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tracemalloc
from typing import NamedTuple

import numpy as np
import pytest

from verishard import ArrayType, checkpoint
from verishard.errors import CheckpointError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def block(t: ArrayType, a: np.ndarray, r: int) -> np.ndarray:
    return a[tuple(slice(s, s + n) for s, n in zip(t.block_starts(r), t.valid_shape(r)))]


def test_in_place_into_a_torch_state_dict(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    src = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 3))
    checkpoint.save({"model": src.state_dict(), "step": 4}, str(tmp_path),
                    {"model": {"0.weight": ("x=2", "[3{x}6, 8]")}})
    dst = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 3))
    target = {"model": dst.state_dict(), "step": None}
    before = {k: (v, v.data_ptr()) for k, v in target["model"].items()}
    got = checkpoint.load(str(tmp_path), target)
    assert got["step"] == 4 and list(got["model"]) == list(before)
    for k, (obj, ptr) in before.items():
        assert got["model"][k] is obj and obj.data_ptr() == ptr
        assert obj.numpy().tobytes() == src.state_dict()[k].numpy().tobytes(), k
    assert all(torch.equal(a, b) for a, b in zip(dst.parameters(), src.parameters()))   # the module's own weights


def test_in_place_bfloat16_and_float8(tmp_path):
    """bfloat16 weights and float8 tensors read straight into the target's
    memory (numpy's ml_dtypes view of the same bytes), bit for bit."""
    torch = pytest.importorskip("torch")
    w = (torch.arange(48, dtype=torch.float32).reshape(6, 8) / 7 - 3).to(torch.bfloat16)
    f8 = torch.linspace(-4, 4, 12).to(torch.float8_e4m3fn)
    checkpoint.save({"w": w, "f8": f8}, str(tmp_path), {"w": ("x=2", "[3{x}6, 8]")})
    target = {"w": torch.zeros(6, 8, dtype=torch.bfloat16), "f8": torch.zeros(12, dtype=torch.float8_e4m3fn)}
    ptrs = {k: v.data_ptr() for k, v in target.items()}
    got = checkpoint.load(str(tmp_path), target)
    for k, ref in (("w", w), ("f8", f8)):
        assert got[k] is target[k] and got[k].data_ptr() == ptrs[k]
        assert torch.equal(got[k].view(torch.uint8), ref.view(torch.uint8)), k
    with pytest.raises(CheckpointError, match="'w'.*holds bfloat16 .* the target is float16"):
        checkpoint.load(str(tmp_path), {"w": torch.zeros(6, 8, dtype=torch.float16)})


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_in_place_from_a_dcp_directory_keeps_dotted_keys(tmp_path):
    """A DCP checkpoint of ``{"model": model.state_dict()}`` (DCP names ``model.0.weight``) loaded into the
    same kind of dict: its dotted keys find their entries, the result keeps them, filled in place."""
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    src = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    dcp.save({"model": src.state_dict()}, checkpoint_id=str(tmp_path), no_dist=True)
    dst = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    target = {"model": dst.state_dict()}
    got = checkpoint.load(str(tmp_path), target)
    assert list(got["model"]) == list(target["model"])
    assert all(got["model"][k] is v for k, v in target["model"].items())
    assert all(torch.equal(a, b) for a, b in zip(dst.parameters(), src.parameters()))


def test_in_place_makes_no_second_copy(tmp_path):
    """A 32 MiB tensor loaded in place allocates less than an eighth of it
    (blocks are read straight into its memory; what remains is the read
    buffer of one tile); loaded without a target, the same measure sees the
    32 MiB array it returns."""
    torch = pytest.importorskip("torch")
    a = torch.arange(8 << 20, dtype=torch.float32).reshape(4096, 2048)
    checkpoint.save({"a": a}, str(tmp_path), {"a": ("x=4", "[1024{x}4096, 2048]")})
    target = torch.zeros_like(a)

    def peak(t):
        tracemalloc.start()
        try:
            checkpoint.load(str(tmp_path), {"a": t}, read_buffer=64 << 10)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak(target) < 4 << 20 and torch.equal(target, a)
    assert peak(None) >= 32 << 20


def test_numpy_leaves_in_place_and_subtrees_by_name(tmp_path):
    W = np.arange(48, dtype=np.float64).reshape(6, 8) / 7
    state = {"model": {"layer": {"w": W, "b": np.arange(8, dtype=np.int16)}, "scale": np.array(2.5, np.float32)},
             "optim": {"lr": 0.1}}
    checkpoint.save(state, str(tmp_path), {"model": {"layer": {"w": ("x=3", "[2{x}6, 8]")}}})
    w = np.zeros((6, 8))
    s = np.zeros((), np.float32)
    got = checkpoint.load(str(tmp_path), {"model": {"layer": {"w": w}, "scale": s}})
    assert got["model"]["layer"]["w"] is w and np.array_equal(w, W)
    assert got["model"]["scale"] is s and s == 2.5
    for target in ("model", {"model": None}):
        sub = checkpoint.load(str(tmp_path), target)
        assert list(sub) == ["model"] and np.array_equal(sub["model"]["layer"]["w"], W)
        assert sub["model"]["layer"]["b"].dtype == np.int16 and sub["model"]["scale"] == 2.5
    assert list(checkpoint.load(str(tmp_path), "model/layer")["model"]["layer"]) == ["w", "b"]
    assert checkpoint.load(str(tmp_path), {"optim": None, "model": {"layer": {"b": None}}}) == {
        "optim": {"lr": 0.1}, "model": {"layer": {"b": pytest.approx(np.arange(8))}}}
    with pytest.raises(CheckpointError, match="'model/layer' names 2 entries; its target is None"):
        checkpoint.load(str(tmp_path), {"model": {"layer": ("x=2", "[3{x}6, 8]")}}, rank=0)
    with pytest.raises(CheckpointError, match="no entry 'modle'"):
        checkpoint.load(str(tmp_path), "modle")


def test_no_target_gives_the_saved_types_and_load_state_dict_works(tmp_path):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    from jax.sharding import NamedSharding, PartitionSpec as P
    from verishard.jax.sharding import jax_mesh
    model = torch.nn.Linear(5, 4)
    jx = jax.device_put(np.arange(6.0, dtype=np.float32), NamedSharding(jax_mesh("x=2"), P("x")))
    state = {"model": model.state_dict(), "np": np.arange(3), "jx": jx, "step": 2,
             "t0": torch.tensor(1.5)}
    checkpoint.save(state, str(tmp_path))
    got = checkpoint.load(str(tmp_path))
    assert isinstance(got["model"]["weight"], torch.Tensor) and isinstance(got["np"], np.ndarray)
    assert isinstance(got["jx"], jax.Array) and np.array_equal(np.asarray(got["jx"]), np.arange(6.0))
    assert isinstance(got["t0"], torch.Tensor) and got["t0"].shape == () and got["t0"].item() == 1.5
    fresh = torch.nn.Linear(5, 4)
    fresh.load_state_dict(checkpoint.load(str(tmp_path), "model")["model"])
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)


def test_dtensor_state_in_place_on_2_gloo_processes(tmp_path):
    pytest.importorskip("torch")
    res = subprocess.run([sys.executable, os.path.join(HERE, "load_state_job.py"), str(tmp_path / "ck")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert out.count("] ours OK") == 2 and out.count("] dcp OK") == 2, out[-4000:]


class TrainState(NamedTuple):
    params: dict
    step: object


def test_jax_targets_on_8_devices(tmp_path):
    jax = pytest.importorskip("jax")
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 JAX devices")
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from verishard.jax.sharding import jax_mesh
    A = np.arange(16 * 24, dtype=np.float32).reshape(16, 24)
    B = np.arange(40, dtype=np.int32)
    m8 = jax_mesh("x=2,y=4")
    checkpoint.save({"params": {"a": jax.device_put(A, NamedSharding(m8, P("x", "y"))), "b": B}, "step": 7},
                    str(tmp_path))
    jm = jax_mesh("u=4,v=2")
    sa, sb = NamedSharding(jm, P("v", "u")), NamedSharding(jm, P(("u", "v")))
    abstract = {"params": {"a": jax.ShapeDtypeStruct(A.shape, jnp.float32, sharding=sa),
                           "b": jax.ShapeDtypeStruct(B.shape, jnp.int32, sharding=sb)}, "step": None}
    arrays = {"params": {"a": jax.device_put(np.zeros_like(A), sa), "b": jax.device_put(np.zeros_like(B), sb)},
              "step": None}
    for target in (abstract, arrays, TrainState(params=abstract["params"], step=None)):
        got = checkpoint.load(str(tmp_path), target)
        params, step = (got.params, got.step) if isinstance(got, TrainState) else (got["params"], got["step"])
        assert step == 7 and params["a"].sharding == sa and params["b"].sharding == sb
        for x, full in ((params["a"], A), (params["b"], B)):
            assert np.array_equal(np.asarray(x), full)
            for s in x.addressable_shards:
                assert np.asarray(s.data).tobytes() == full[s.index].tobytes()


@pytest.mark.parametrize("make,match", [
    (lambda: object(), "none of the kinds load takes: None .*torch tensor or numpy array.*DTensor.*jax.Array.*"
                       r"\(mesh, type\)"),
    (lambda: np.zeros((6, 8), np.float32), "holds float64 of global shape \\(6, 8\\), the target is float32"),
    (lambda: np.zeros((8, 6)), r"global shape \(6, 8\), the target is float64 of global shape \(8, 6\)"),
    (lambda: np.frombuffer(bytes(6 * 8 * 8)).reshape(6, 8), "read-only"),
    (lambda: __import__("torch").zeros(6, 8, dtype=__import__("torch").int64), "the target is int64"),
    (lambda: __import__("jax").ShapeDtypeStruct((6, 8), np.float64), "without a sharding"),
])
def test_bad_targets_refused(tmp_path, make, match):
    checkpoint.save({"w": np.arange(48.0).reshape(6, 8)}, str(tmp_path))
    try:
        target = make()
    except ImportError:
        pytest.skip("needs torch and jax")
    with pytest.raises(CheckpointError, match=f"'w'.*{match}" if "none of" not in match else match):
        checkpoint.load(str(tmp_path), {"w": target})


def test_targets_of_no_kind_refused(tmp_path):
    torch = pytest.importorskip("torch")
    checkpoint.save({"w": np.arange(4.0)}, str(tmp_path))
    with pytest.raises(CheckpointError, match="not Linear; each target is one of: None .*torch tensor"):
        checkpoint.load(str(tmp_path), torch.nn.Linear(2, 2))   # the module, not its state_dict()
    with pytest.raises(CheckpointError, match="'w//' is not a name of the checkpoint"):
        checkpoint.load(str(tmp_path), "w//")


def _training_state():
    W1 = np.arange(8 * 12, dtype=np.float32).reshape(8, 12) / 4
    W2 = (np.arange(12 * 6, dtype=np.int32).reshape(12, 6) * 5) % 17
    return {"model": {"w1": W1, "w2": W2}, "optim": {"w1": {"exp_avg": W1 * 2, "exp_avg_sq": W1 * W1}},
            "step": 100}


def test_reshard_checkpoint_cli_of_a_training_state(tmp_path):
    """5 entries saved on 2 devices, rewritten by a JSON map (a type, a
    PartitionSpec and placements; the step copied), exit 0, then every rank's
    block of every array loads exactly; a pattern matching nothing is exit 2
    and writes nothing."""
    state = _training_state()
    checkpoint.save(state, str(tmp_path / "a"), {"model": {"w1": ("x=2", "[4{x}8, 12]"), "w2": ("x=2", "[12, 3{x}6]")},
                                                 "optim": {"w1": {"exp_avg": ("x=2", "[8, 6{x}12]")}}})
    layouts = {"model/w1": {"mesh": "u=3", "type": "[8, 4{u}12]"},
               "model/*": {"mesh": "u=2,v=2", "spec": "P('v', 'u')"},
               "optim/*": {"mesh": "u=4", "placements": "Shard(0)"}}
    (tmp_path / "l.json").write_text(json.dumps(layouts))
    cli = [sys.executable, "-m", "verishard.cli", "reshard-checkpoint", str(tmp_path / "a")]
    res = subprocess.run(cli + [str(tmp_path / "b"), "--layouts", str(tmp_path / "l.json")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "4 arrays resharded, 1 entries copied" in res.stdout
    want = {("model", "w1"): ("u=3", "[8, 4{u}12]"), ("model", "w2"): ("u=2,v=2", "[6{v}12, 3{u}6]"),
            ("optim", "w1", "exp_avg"): ("u=4", "[2{u}8, 12]"), ("optim", "w1", "exp_avg_sq"): ("u=4", "[2{u}8, 12]")}
    man = checkpoint.read_manifest(str(tmp_path / "b"))
    assert {k: (str(e.t.mesh), str(e.t)) for k, e in man.entries.items() if e.t is not None} == {
        k: (str(ArrayType.parse(t, m).mesh), str(ArrayType.parse(t, m))) for k, (m, t) in want.items()}
    for key, (m, t) in want.items():
        full = state[key[0]][key[1]] if len(key) == 2 else state[key[0]][key[1]][key[2]]
        at = ArrayType.parse(t, m)
        for r in range(at.mesh.num_devices):
            got = checkpoint.load(str(tmp_path / "b"), checkpoint.nest({key: (m, t)}), rank=r)
            x = got[key[0]][key[1]] if len(key) == 2 else got[key[0]][key[1]][key[2]]
            assert x.tobytes() == block(at, full, r).tobytes(), (key, r)
    assert checkpoint.load(str(tmp_path / "b"), "step") == {"step": 100}
    (tmp_path / "bad.json").write_text(json.dumps({"model/w3": {"mesh": "u=2", "spec": "P('u')"}}))
    res = subprocess.run(cli + [str(tmp_path / "c"), "--layouts", str(tmp_path / "bad.json")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2 and "pattern 'model/w3' matches no entry" in res.stderr, res.stderr
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_reshard_python_api_unmatched_copied_and_bad_layouts(tmp_path):
    state = _training_state()
    checkpoint.save(state, str(tmp_path / "a"))
    checkpoint.reshard(str(tmp_path / "a"), str(tmp_path / "b"), {"model/w2": ("x=3", "[4{x}12, 6]")})
    got = checkpoint.load(str(tmp_path / "b"))
    assert np.array_equal(got["optim"]["w1"]["exp_avg_sq"], state["optim"]["w1"]["exp_avg_sq"]) and got["step"] == 100
    man = checkpoint.read_manifest(str(tmp_path / "b"))
    assert str(man.entries[("model", "w2")].t) == "[4{x}12, 6]" and str(man.entries[("model", "w1")].t) == "[8, 12]"
    for bad, match in (({"model/*": ("x=3", "[4{x}12, 6]")}, "global shape is \\(8, 12\\)"),
                       ({"model/*": {"mesh": "x=2"}}, "a layout is \\{'mesh': M\\} with one of 'type'"),
                       ({"*": {"mesh": "x=2", "spec": "P('q')"}}, "'q'"),
                       ({}, "non-empty dict")):
        with pytest.raises(CheckpointError, match=match):
            checkpoint.reshard(str(tmp_path / "a"), str(tmp_path / "c"), bad)
    assert not (tmp_path / "c" / "manifest.json").exists()


def test_reshard_checkpoint_yaml_layouts(tmp_path):
    """A YAML map where PyYAML is installed; where it is not, one error saying so (exit 2)."""
    checkpoint.save(_training_state(), str(tmp_path / "a"))
    (tmp_path / "l.yaml").write_text("'model/*':\n  mesh: u=2\n  spec: P('u')\n")
    res = subprocess.run([sys.executable, "-m", "verishard.cli", "reshard-checkpoint", str(tmp_path / "a"),
                          str(tmp_path / "b"), "--layouts", str(tmp_path / "l.yaml")], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    try:
        import yaml  # noqa: F401
    except ImportError:
        assert res.returncode == 2 and "needs PyYAML (pip install pyyaml)" in res.stderr, res.stderr
        return
    assert res.returncode == 0, res.stderr
    assert str(checkpoint.read_manifest(str(tmp_path / "b")).entries[("model", "w1")].t) == "[4{u}8, 12]"


def test_reshard_holds_one_block_at_a_time_and_may_rewrite_in_place(tmp_path):
    """4 arrays of 8 MiB resharded onto 4 devices (blocks of 2 MiB): the
    rewrite allocates less than a quarter of the 32 MiB state (one target
    block and the read buffer, never an array or the state); then the
    checkpoint rewritten onto itself loads exactly."""
    rows = np.arange(2 << 20, dtype=np.float32).reshape(2048, 1024)
    state = {"model": {f"w{i}": rows + i for i in range(4)}, "step": 1}
    checkpoint.save(state, str(tmp_path), {"model": {f"w{i}": ("x=2", "[1024{x}2048, 1024]") for i in range(4)}})
    tracemalloc.start()
    try:
        checkpoint.reshard(str(tmp_path), str(tmp_path / "b"), {"model/*": {"mesh": "u=4", "spec": "P(None, 'u')"}},
                           read_buffer=64 << 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    checkpoint.reshard(str(tmp_path / "b"), str(tmp_path / "b"), {"model/w3": ("v=1", "[2048, 1024]")})
    got = checkpoint.load(str(tmp_path / "b"))
    assert all(np.array_equal(got["model"][f"w{i}"], rows + i) for i in range(4)) and got["step"] == 1
    assert str(checkpoint.read_manifest(str(tmp_path / "b")).entries["model", "w0"].t) == "[2048, 256{u}1024]"
    assert sorted(n for n in os.listdir(tmp_path / "b") if n.endswith(".bin")) == sorted(
        f for f in checkpoint.read_manifest(str(tmp_path / "b")).files)   # the first rewrite's files are gone


@pytest.mark.parametrize("content,extra,match", [
    (None, [], "--layouts .*l.json: No such file"),
    ("{not json", [], "not JSON"),
    ("[]", [], "a non-empty map of name patterns"),
    ('{"model/*": {"mesh": "u=2", "spec": "P(\'u\')"}}', ["--mesh", "u=2"], "not both"),
    ("fifo", [], "not a regular file"),
])
def test_reshard_checkpoint_cli_bad_layouts_exit_2(tmp_path, content, extra, match, capsys):
    from verishard.cli import main
    checkpoint.save(_training_state(), str(tmp_path / "a"))
    f = tmp_path / "l.json"
    if content == "fifo":
        os.mkfifo(f)   # never opened for reading: it would wait for a writer
    elif content is not None:
        f.write_text(content)
    code = main(["reshard-checkpoint", str(tmp_path / "a"), str(tmp_path / "b"), "--layouts", str(f)] + extra)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and re.search(match, err), err
    assert not (tmp_path / "b" / "manifest.json").exists()
