"""Hostile input on every surface (issue 34): each case a fuzzing run found
escaping, hanging or crashing, with what it must do now.

CLI: every input error exits 2 with one line on stderr naming the problem
(and the limit, where one applies), never 3 ("internal error") or a hang.
Python API: every public entry point raises only VerishardError subclasses.
bench/fuzz.py runs the same surfaces for longer (bench/results/fuzz.md).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verishard.cli import main

SCRIPT = Path(sys.executable).parent / "verishard"
BIG = "9" * 4400  # past Python's 4,300-digit int-string limit


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``main(argv)`` in process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_usage_error(argv: list[str], *needles: str) -> str:
    code, _, err = run_cli(argv)
    lines = err.strip().splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and lines[0].startswith("verishard: error: "), err
    assert "internal error" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


PLAN = ["plan", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]"]
XMESH = ["crossmesh", "--src-mesh", "x=2", "--src", "[2{x}4]", "--dst-mesh", "u=2", "--dst", "[2{u}4]"]


def _with(argv: list[str], option: str, value: str) -> list[str]:
    out = list(argv)
    if option in out:
        out[out.index(option) + 1] = value
    else:
        out += [option, value]
    return out


# ---------------------------------------------------------------------------
# CLI: the cases of issue 34 that exited 3 ("internal error") or hung


@pytest.mark.parametrize("argv, needles", [
    # lone surrogates (undecodable bytes in argv)
    (_with(PLAN, "--mesh", "x=2\udc80"), ["not an integer", "--mesh"]),
    (_with(PLAN, "--src", "[2{x\udc80}4]"), ["--src"]),
    (["plan", "--mesh", "x=2", "--shape", "4", "--jax", "--src", "P('x'\udc80)", "--dst", "P(None)"], ["--src"]),
    (["check", "/nonexistent/\udcff.json"], ["cannot read plan file"]),
    # unicode digits
    (_with(PLAN, "--mesh", "x=²"), ["'²' is not an integer"]),
    (_with(PLAN, "--src", "[²{x}4]"), ["'²'"]),
    (["plan", "--mesh", "x=2", "--shape", "²", "--jax", "--src", "P('x')", "--dst", "P()"], ["'²' is not an integer"]),
    (_with(XMESH, "--dst-ranks", "²"), ["'²' is not an integer"]),
    (_with(XMESH, "--dst-ranks", "١,٢"), ["is not an integer"]),  # Arabic-Indic digits: int() takes them, we do not
    (_with(XMESH, "--world-size", "١٢"), ["--world-size", "is not an integer"]),
    (["demo", "--no-mpi", "--nranks", "²"], ["--nranks '²' is not an integer"]),
    (["partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "²"], ["--batch '²' is not an integer"]),
    # integers of 4,400 digits
    (_with(PLAN, "--mesh", "x=" + BIG), ["MAX_DIGITS"]),
    (_with(PLAN, "--src", "[" + BIG + "{x}4]"), ["MAX_DIGITS"]),
    (["plan", "--mesh", "x=2", "--shape", BIG, "--jax", "--src", "P('x')", "--dst", "P()"], ["MAX_DIGITS"]),
    (["plan", "--mesh", "x=2", "--shape", "4", "--dtensor", "--src", f"Shard({BIG})", "--dst", "Replicate()"],
     ["MAX_DIGITS"]),
    (_with(XMESH, "--dst-ranks", BIG), ["MAX_DIGITS"]),
    (_with(XMESH, "--world-size", BIG), ["MAX_DIGITS"]),
    (["demo", "--no-mpi", "--nranks", BIG], ["MAX_DIGITS"]),
    # sizes that would need all the memory
    (_with(XMESH, "--dst-ranks", "0-99999999999"), ["MAX_DEVICES"]),
    (_with(XMESH, "--dst-ranks", "5-2"), ["empty"]),
    # meshes of hundreds of size-1 axes (hung past 30 s), 100,000 of them, types of 20,000 dimensions
    (_with(PLAN, "--mesh", "x=" + "*".join(["1"] * 300)), ["MAX_MESH_PARTS"]),
    (_with(PLAN, "--mesh", ",".join(f"a{i}=1" for i in range(300))), ["MAX_MESH_PARTS"]),
    (_with(PLAN, "--mesh", ",".join(f"a{i}=1" for i in range(100_000))), ["MAX_TEXT", "--mesh"]),
    (["plan", "--mesh", "x=2", "--src", "[" + ",".join(["1"] * 20_000) + "]", "--dst", "[1]"], ["MAX_TEXT"]),
    (["plan", "--mesh", "x=2", "--src", "[" + ",".join(["1"] * 65) + "]", "--dst", "[1]"], ["MAX_DIMS"]),
    (["plan", "--mesh", "x=2", "--shape", ",".join(["1"] * 65), "--jax", "--src", "P()", "--dst", "P()"],
     ["MAX_DIMS"]),
    (_with(PLAN, "--src", "[" + "2" * 100_000 + "]"), ["MAX_TEXT"]),
])
def test_cli_input_error_exits_2_with_one_line(argv, needles):
    assert_usage_error(argv, *needles)


def test_cli_output_paths(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    show = ["show", "--mesh", "x=2", "--src", "[2{x}4]", "--dst", "[4]", "--picture"]
    assert_usage_error(show + [str(tmp_path / "no" / "dir" / "p.png")], "No such file or directory")
    assert_usage_error(show + [str(afile / "p.png")], "Not a directory")
    assert_usage_error(show + [str(tmp_path)], "must end in .png or .svg")
    assert_usage_error(["partition", "tiny-transformer", "--platform", "cpu+2gpu", "--batch", "1",
                        "--picture", str(tmp_path / "no" / "x.png")], "No such file or directory")
    assert_usage_error(["check", str(tmp_path)], "Is a directory")
    # an output directory that is an existing file (FileExistsError before)
    from verishard import checkpoint
    import numpy as np
    ckpt = str(tmp_path / "ckpt")
    checkpoint.save(np.arange(4.0), "x=2", "[2{x}4]", ckpt)
    reshard = ["reshard-checkpoint", ckpt]
    assert_usage_error(reshard + [str(afile), "--mesh", "x=2", "--type", "[4]"], "exists and is not a directory")
    assert_usage_error(reshard + [str(afile / "sub"), "--mesh", "x=2", "--type", "[4]"], "Not a directory")
    assert_usage_error(reshard + [str(tmp_path / "out"), "--mesh", "x=2", "--type", "[4]", "--read-buffer", BIG],
                       "MAX_DIGITS")


def test_cli_surrogates_in_a_real_process(tmp_path):
    """Run as a command, where arguments arrive as bytes: an undecodable
    byte becomes a lone surrogate, which the error line must still print."""
    env = dict(os.environ, LC_ALL="C.UTF-8")
    bad = os.fsencode("x=2") + b"\xff"
    r = subprocess.run([os.fsencode(SCRIPT), b"plan", b"--mesh", bad, b"--src", b"[2{x}4]", b"--dst", b"[4]"],
                       capture_output=True, env=env, timeout=120)
    err = r.stderr.decode("utf-8", "replace").strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "not an integer" in err[0], r.stderr


def test_cli_limits_leave_room_for_real_meshes():
    """64 size-1 axes and 64 dimensions are inside the limits and plan."""
    mesh = ",".join(f"a{i}=1" for i in range(64))
    code, out, err = run_cli(["plan", "--mesh", mesh, "--src", "[2]", "--dst", "[2]"])
    assert code == 0, err
    dims = ",".join(["1"] * 64)
    code, out, err = run_cli(["plan", "--mesh", "x=2", "--src", f"[{dims}]", "--dst", f"[{dims}]"])
    assert code == 0, err


# ---------------------------------------------------------------------------
# Python API: every public entry point raises only VerishardError subclasses

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import numpy as np  # noqa: E402

import verishard  # noqa: E402
from verishard import ArrayType, Collective, Mesh, VerishardError, notation  # noqa: E402
from verishard.crossmesh import crossmesh_plan  # noqa: E402

MESHES = ["x=2", "x=2,y=3", "x=2,y=2*2", "{x:4}", "x=1"]
TYPES = ["[2{x}4]", "[4]", "[3{x}6, 4]", "[1{x,y}6]", "[4] partial{x}", "[3{x}5]", "[2{y}6, 2]"]
TEXTS = ["\udc80", "²", "١٢", "P('x', None)", "Shard(0),Replicate()", "Partial()", "[", "{", "9" * 40,
         "x=" + "*".join(["1"] * 70), "1e3", "-1", "0", " ", "", "None"]

atoms = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 8), st.sampled_from([2**62, 2**70, -2**63, 2**300]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(TEXTS + MESHES + TYPES),
)
hostile = st.recursive(atoms, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.one_of(st.integers(-2, 4), st.text(max_size=3)), inner, max_size=3)), max_leaves=8)
meshes = st.one_of(st.sampled_from(MESHES).map(Mesh.parse), st.sampled_from(MESHES), hostile)
shapes = st.one_of(st.lists(st.integers(1, 12), min_size=1, max_size=3).map(tuple), hostile)
types = st.one_of(st.sampled_from(TYPES), hostile)


def _dtensor_placements():
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor._dtensor_spec import ShardOrderEntry
    from torch.distributed.tensor.placement_types import _StridedShard
    placement = st.one_of(st.integers(-3, 4).map(Shard), st.just(Replicate()),
                          st.sampled_from(["sum", "max", "avg", "bogus"]).map(Partial),
                          st.builds(lambda d, f: _StridedShard(d, split_factor=f), st.integers(-1, 3),
                                    st.integers(-1, 4)), hostile)
    entry = st.one_of(st.builds(ShardOrderEntry, st.integers(-2, 3), st.lists(st.integers(-2, 3), max_size=3)
                                .map(tuple)), hostile)
    order = st.one_of(st.none(), st.lists(entry, max_size=3).map(tuple),
                      st.dictionaries(st.integers(-2, 3), st.lists(st.integers(-2, 3), max_size=3), max_size=2),
                      hostile)
    return st.lists(placement, max_size=3), order


def _type_or_text(mesh, t):
    """``t`` built on ``mesh`` when both parse, so deeper code is reached."""
    try:
        return ArrayType.parse(t, mesh) if isinstance(t, str) else t
    except VerishardError:
        return t


def _entry_points():
    """``(name, strategy of argument tuples, function)`` for each public entry point."""
    out = [
        ("Mesh.parse", st.tuples(hostile), Mesh.parse),
        ("Mesh", st.tuples(hostile), Mesh),
        ("ArrayType.parse", st.tuples(types, meshes), ArrayType.parse),
        ("ArrayType", st.tuples(meshes, hostile, hostile, hostile),
         lambda m, d, p, r: ArrayType(Mesh.parse("x=2,y=3") if not isinstance(m, Mesh) else m, d, p, r)),
        ("Collective.parse", st.tuples(st.one_of(st.sampled_from(["AllGather(0, x)", "AllToAll(0->1, x)",
                                                                  "AllPermute([2{x}4])", "Exchange([4], dim=0)"]),
                                                 hostile), st.sampled_from(MESHES).map(Mesh.parse)),
         Collective.parse),
        ("plan", st.tuples(meshes, types, types, st.booleans(), st.booleans()),
         lambda m, s, d, e, mi: verishard.plan(m, s, d, exchange=e, minimal=mi)),
        ("check", st.tuples(meshes, types, types, hostile), verishard.check),
        ("distribute", st.tuples(st.one_of(hostile, st.just([[1, 2], [3]]), st.just(np.arange(4))), meshes, types),
         verishard.distribute),
        ("assemble", st.tuples(st.one_of(hostile, st.just([np.zeros(2), np.zeros(3)])), meshes, types),
         verishard.assemble),
        ("notation.parse_partition_spec", st.tuples(hostile), notation.parse_partition_spec),
        ("notation.parse_placements", st.tuples(hostile), notation.parse_placements),
        ("notation.from_partition_spec", st.tuples(meshes, shapes, hostile), notation.from_partition_spec),
        ("notation.from_placements", st.tuples(meshes, shapes, hostile, hostile), notation.from_placements),
        ("notation.to_partition_spec", st.tuples(hostile), notation.to_partition_spec),
        ("notation.to_placements", st.tuples(hostile), notation.to_placements),
        ("crossmesh_plan", st.tuples(types, types, hostile, hostile, meshes, meshes),
         lambda s, d, r1, r2, m1, m2: crossmesh_plan(s, d, r1, r2, src_mesh=m1, dst_mesh=m2)),
    ]
    from verishard import dtensor
    placements, order = _dtensor_placements()
    out += [
        ("dtensor.from_placements", st.tuples(meshes, shapes, placements, order), dtensor.from_placements),
        ("dtensor.placements_to_tuples", st.tuples(placements), dtensor.placements_to_tuples),
        ("dtensor.shard_order_dict", st.tuples(order), dtensor.shard_order_dict),
        ("dtensor.to_placements", st.tuples(hostile), dtensor.to_placements),
    ]
    from jax.sharding import PartitionSpec
    from verishard import jax_sharding
    spec = st.one_of(hostile, st.lists(st.one_of(st.none(), st.sampled_from(["x", "y", "z"]), hostile), max_size=3)
                     .map(lambda e: PartitionSpec(*e) if all(isinstance(x, (str, type(None))) for x in e)
                          else e))
    out += [
        ("jax_sharding.from_partition_spec", st.tuples(meshes, shapes, spec), jax_sharding.from_partition_spec),
        ("jax_sharding.to_partition_spec", st.tuples(hostile), jax_sharding.to_partition_spec),
        ("jax_sharding.spec_entries", st.tuples(spec), jax_sharding.spec_entries),
        ("jax_sharding.jax_mesh", st.tuples(meshes, hostile), jax_sharding.jax_mesh),
    ]
    return out


ENTRY_POINTS = _entry_points()


def call_checked(fn, args) -> str:
    """Call ``fn(*args)``: 'ok' or 'refused' (a VerishardError); anything else escapes."""
    try:
        fn(*args)
    except VerishardError:
        return "refused"
    return "ok"


@pytest.mark.parametrize("name, args, fn", ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS])
def test_api_raises_only_verishard_errors(name, args, fn):
    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(args)
    def run(a):
        call_checked(fn, a)

    run()


# ---------------------------------------------------------------------------
# MPI: ranks that disagree are refused on every rank before any data moves


def test_mpi_ranks_that_disagree_are_refused_on_every_rank():
    """tests/hostile_mpi_job.py on 4 ranks: each mismatch of issue 34 (another
    round budget, a float16 or float64 source, a target passing another
    dtype, target ranks in another order, another plan; runtime.mpi with
    another chunks or budget_bytes; issue 39: sources passing the whole array
    instead of their block, a timeout of nan or -1) raises the same refusal on
    every rank, and a correct run right after each gives every rank its block."""
    from mpi_helpers import report, require_mpi

    from verishard.runtime.launch import mpirun
    require_mpi()
    job = Path(__file__).with_name("hostile_mpi_job.py")
    res = mpirun([sys.executable, str(job)], 4, timeout=240, cwd=str(job.parent.parent))
    assert not res.timed_out and res.returncode == 0, report(res, 4)
    # every rank's 12 cases refused and followed by a correct run (rank 0 says HOSTILE OK only when all ranks are)
    assert res.output.count("refused; the correct run after it matches") == 4 * 12, report(res, 4)
    assert "HOSTILE OK" in res.output, report(res, 4)


# ---------------------------------------------------------------------------
# Performance edges: refused with a clear error where planning them has no use


def test_staged_rounds_of_too_many_cuts_are_refused():
    """The staged cross-mesh rounds of issue 34 (1.5 s at N = 2**13, over 300 s
    at 2**16, as the packing grows faster than quadratically in cuts): over
    MAX_ROUND_CUTS cuts the budget is refused, naming the one that fits."""
    from verishard.errors import LimitError
    from verishard.runtime.crossmesh_mpi import _cuts, rounds
    n = 2**16
    p = crossmesh_plan(f"[{n // 2}{{x}}{n}]", f"[{n}]", src_mesh="x=2", dst_mesh="u=1", src_ranks=[0, 1],
                       dst_ranks=[2])
    with pytest.raises(LimitError, match=r"65536 slices; at most 4096 .*MAX_ROUND_CUTS.*at least 64 bytes"):
        rounds(p, 4, budget=4)
    assert sum(map(len, rounds(p, 4, budget=64))) == 4096
    # the count that is refused is the core's own
    for s, d, m1, m2 in [("[8{x}16, 16]", "[16, 4{u}16]", "x=2", "u=4"), ("[4{x}7, 3]", "[7, 1{u}3]", "x=2", "u=3"),
                         ("[6{x}12, 5{y}10]", "[4{u}12, 10]", "x=2,y=2", "u=3")]:
        q = crossmesh_plan(s, d, src_mesh=m1, dst_mesh=m2)
        for budget in (1, 2, 3, 5, 17, 64):
            assert _cuts(q, budget)[0] == sum(map(len, rounds(q, 1, budget)))


@pytest.mark.parametrize("surface", ["manifest", "fifo", "oversized"])
def test_fuzz_checkpoint_surfaces_briefly(surface, tmp_path):
    """A few seconds of bench/fuzz.py's checkpoint surfaces of issue 39
    (rewritten manifests, FIFOs and links, oversized blocks): every input
    clean (refused, or exactly what the files bind), none hanging."""
    import random
    import signal
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import fuzz
    old = signal.signal(signal.SIGALRM, fuzz._alarm)
    try:
        tally, rng = fuzz.Tally(20), random.Random(7)
        bases = {v: fuzz.manifest_base(str(tmp_path), v) for v in (3, 4)}
        for _ in range(25):
            if surface == "manifest":
                label, run = fuzz.manifest_case(rng, bases, str(tmp_path))
            elif surface == "fifo":
                label, run = fuzz.fifo_case(rng, bases[4], None, str(tmp_path))
            else:
                label, run = fuzz.oversized_case(rng, str(tmp_path))
            tally.run(surface, label, run)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert tally.counts[surface]["clean"] == 25, tally.examples
