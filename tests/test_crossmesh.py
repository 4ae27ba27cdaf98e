"""Cross-mesh schedules (verishard.crossmesh, Crossmesh.xplan): every pair of
types on small meshes, even and uneven, against numpy on every target; the
traffic at the lower bound; validation before any communication; one small
MPI job (tests/crossmesh_job.py, 6 ranks)."""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pytest

from verishard import ArrayType, Mesh
from verishard.crossmesh import crossmesh_plan
from verishard.errors import ShardingError, VerishardError

HERE = os.path.dirname(os.path.abspath(__file__))


def all_types(mesh: Mesh, shape) -> list[ArrayType]:
    """Every type of ``shape`` over the whole axes of ``mesh`` (uneven allowed)."""
    names = mesh.axis_names
    out = set()
    for assign in itertools.product(range(len(shape) + 1), repeat=len(names)):
        groups = [[a for a, d in zip(names, assign) if d == k] for k in range(len(shape))]
        for orders in itertools.product(*[list(itertools.permutations(g)) for g in groups]):
            try:
                out.add(ArrayType.from_axes(mesh, shape, list(orders)))
            except VerishardError:
                continue
    return sorted(out, key=str)


def blocks(t: ArrayType, A: np.ndarray) -> list[np.ndarray]:
    return [A[tuple(slice(s, s + l) for s, l in zip(t.block_starts(r), t.valid_shape(r)))]
            for r in range(t.mesh.num_devices)]


def check_pair(s: ArrayType, d: ArrayType, r1, r2) -> None:
    A = np.random.default_rng(0).standard_normal(s.global_shape)
    p = crossmesh_plan(s, d, r1, r2)
    src = dict(zip(p.src_ranks, blocks(s, A)))
    out = p.simulate(src)
    want = blocks(d, A)
    for j, r in enumerate(p.dst_ranks):
        assert out[r].shape == want[j].shape, (s, d, r)
        assert np.array_equal(out[r], want[j]), (s, d, r)
        # each element of the block covered once, by pieces inside it
        cover = np.zeros(d.valid_shape(j), dtype=int)
        for q in p.pieces[j]:
            cover[p.dst_local(j, q)] += 1
            i = p.src_index(q.src)
            assert all(b * c <= x and x + l <= (b + 1) * c
                       for (x, l), b, c in zip(q.box, q.cell, s.local_shape)), (s, d, q)
            assert s.blocks(i) == q.cell
        assert (cover == 1).all(), (s, d, r)
        assert p.received(j) == p.lower_bound(j), (s, d, r)


MESHES = [("x=2,y=2", "u=3"), ("x=2,y=2", "u=2,v=3")]
SHAPES = [(12,), (5,), (12, 6), (5, 7)]


@pytest.mark.parametrize("src_mesh,dst_mesh", MESHES)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_pair_matches_numpy(src_mesh, dst_mesh, shape):
    m1, m2 = Mesh.parse(src_mesh), Mesh.parse(dst_mesh)
    n1, n2 = m1.num_devices, m2.num_devices
    # disjoint ranks, and ranks shared in a scrambled order (traffic must then drop)
    rank_sets = [(list(range(n1)), list(range(n1, n1 + n2))),
                 (list(range(n1)), [(3 * k + 1) % max(n1, n2) if n2 <= n1 else k for k in range(n2)][::-1])]
    pairs = 0
    for s in all_types(m1, shape):
        for d in all_types(m2, shape):
            for r1, r2 in rank_sets:
                check_pair(s, d, r1, r2)
                pairs += 1
    assert pairs >= 20


def test_shared_ranks_keep_what_they_hold():
    s = ArrayType.parse("[6{x}12]", "x=2")
    d = ArrayType.parse("[4{u}12]", "u=3")
    p = crossmesh_plan(s, d, [0, 1], [0, 1, 2])
    # rank 0 holds [0,6) and needs [0,4): nothing to receive
    assert p.received(0) == 0 and p.lower_bound(0) == 0
    assert p.received(1) == 2 and p.received(2) == 4


def test_replicas_are_balanced():
    s = ArrayType.parse("[12]", "x=4")        # every source holds everything
    d = ArrayType.parse("[3{u}12]", "u=4")
    p = crossmesh_plan(s, d)
    senders = [q.src for ps in p.pieces for q in ps]
    assert sorted(senders) == [0, 1, 2, 3]


def test_printout_lists_pairs():
    p = crossmesh_plan("[2{x}4]", "[4]", src_mesh="x=2", dst_mesh="u=1")
    text = p.describe()
    assert "0 -> 2" in text and "1 -> 2" in text and "Crossmeshproof.xplan_correct" in text


@pytest.mark.parametrize("kwargs,message", [
    (dict(src="[2{x}4]", dst="[3{u}6]"), "global shapes differ"),
    (dict(src="[2{x}4]", dst="[2{u}4]", src_ranks=[0, 0]), "listed twice"),
    (dict(src="[2{x}4]", dst="[2{u}4]", dst_ranks=[2, 9], world_size=4), "out of range 0..3"),
    (dict(src="[2{x}4]", dst="[2{u}4]", src_ranks=[0, 1], dst_ranks=[1, 2], allow_overlap=False),
     "both a source and a target"),
    (dict(src="[2{x}4]", dst="[2{u}4]", src_ranks=[0, 1, 2]), "3 source ranks for a mesh of 2"),
    (dict(src="[2{x}4]", dst="[2{u}4]", dst_ranks=[-1, 2]), "out of range"),
])
def test_validation(kwargs, message):
    with pytest.raises(ShardingError, match=message):
        crossmesh_plan(src_mesh="x=2", dst_mesh="u=2", **kwargs)


def test_partial_types_are_refused():
    with pytest.raises(ShardingError, match="pending"):
        crossmesh_plan("[4] partial{x}", "[2{u}4]", src_mesh="x=2", dst_mesh="u=2")


def test_rounds_respect_the_budget():
    from verishard.runtime.crossmesh_mpi import rounds
    p = crossmesh_plan("[8{x}16, 16]", "[16, 4{u}16]", src_mesh="x=2", dst_mesh="u=4")
    rs = rounds(p, 8, budget=64 * 8)
    for cuts in rs:
        for rank in set(p.src_ranks + p.dst_ranks):
            sent = sum(8 * np.prod([l for _, l in box]) for a, _, _, box in cuts if a == rank)
            got = sum(8 * np.prod([l for _, l in box]) for _, b, _, box in cuts if b == rank)
            assert sent <= 64 * 8 and got <= 64 * 8
    moved = sum(np.prod([l for _, l in box]) for cuts in rs for *_, box in cuts)
    assert moved == sum(p.volumes().values())


def test_mpi_job_six_ranks():
    from mpi_helpers import report, require_mpi
    from verishard.runtime.launch import mpirun
    require_mpi()
    res = mpirun([sys.executable, os.path.join(HERE, "crossmesh_job.py")], 6, timeout=240,
                 cwd=os.path.dirname(HERE))
    assert not res.timed_out and res.returncode == 0, report(res, 6)
    assert "CROSSMESH OK" in res.output, report(res, 6)


@pytest.mark.parametrize("src,dst,sm,dm,shape_budget", [
    ("[4{x}8, 6{y}12]", "[3{u}8, 6{v}12]", "x=2,y=2", "u=3,v=2", 5),
    ("[8{x}16, 16]", "[16, 4{u}16]", "x=2", "u=4", 16),
    ("[3{x}5, 7]", "[5, 2{u}7]", "x=2", "u=4", 3),
    ("[2{x,y}7]", "[7]", "x=2,y=2", "u=1", 1),
])
def test_verified_rounds_move_each_element_once_within_the_budget(src, dst, sm, dm, shape_budget):
    """The rounds of the core (Rounds.xrounds): every element of every target
    block is held by the target or arrives in exactly one cut, from a source
    holding it; per round a rank over the budget moves a single cut."""
    from verishard.runtime.crossmesh_mpi import rounds
    p = crossmesh_plan(src, dst, src_mesh=sm, dst_mesh=dm)
    rs = rounds(p, 1, budget=shape_budget)
    vol = lambda box: int(np.prod([l for _, l in box]))  # noqa: E731
    for cuts in rs:
        for rank in set(p.src_ranks + p.dst_ranks):
            for side in (0, 1):
                mine = [c for c in cuts if c[side] == rank]
                assert sum(vol(c[3]) for c in mine) <= shape_budget or len(mine) == 1
    for j, r in enumerate(p.dst_ranks):
        got = np.zeros(p.dst.global_shape, dtype=int)
        for q in p.pieces[j]:
            if q.src == r:
                got[tuple(slice(s, s + l) for s, l in q.box)] += 1
        for cuts in rs:
            for a, b, jj, box in cuts:
                if jj == j:
                    assert b == r and a != r
                    i = p.src_index(a)
                    sbox = tuple(slice(s, s + l) for s, l in zip(p.src.block_starts(i), p.src.valid_shape(i)))
                    inside = np.zeros_like(got, dtype=bool)
                    inside[sbox] = True
                    assert inside[tuple(slice(s, s + l) for s, l in box)].all()  # the sender holds it
                    got[tuple(slice(s, s + l) for s, l in box)] += 1
        want = np.zeros_like(got)
        want[p.dst_slices()[j]] = 1
        assert (got == want).all()
