"""Runtime without MPI: layout, the shared executor, the simulator backend.

The simulator is checked three ways: against numpy (``simulate(plan)`` of
``distribute(A, src)`` equals ``distribute(A, dst)``), against the verified
data movement (``core.movement``, from ``Semantics.source``), and against the
traffic the verified checker predicts (per step, worst device) and the spec's
per-device formula (computed with the independent reference model).
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import mpi_cases as mc  # noqa: E402
import reference as ref  # noqa: E402

import verishard  # noqa: E402
from verishard import (AllGather, AllPermute, AllToAll, ArrayType, DynSlice, Mesh, Plan, PlanError,  # noqa: E402
                       ShardingError, Step, check, core)
from verishard.runtime import (AxisGroup, Backend, Donated, LayoutError, RedistributionError,  # noqa: E402
                               RuntimeCheckError, SimBackend, assemble, box, boxes, distribute, execute,
                               local_block, naive_plan, simulate, validate_plan)
from verishard.runtime.simulator import expected_received  # noqa: E402

M = Mesh.parse("x=2,y=3")


def P(text, mesh=M):
    return ArrayType.parse(text, mesh)


WORKED = check(M, "[3{x}6]", "[2{y}6]", [DynSlice(0, "y"), AllPermute(P("[1{y,x}6]")), AllGather(0, "x")])


# ---------------------------------------------------------------------------
# layout


@pytest.mark.parametrize("dtype", mc.DTYPES + [np.dtype(object)], ids=str)
def test_distribute_assemble_roundtrip_every_dtype(dtype):
    rng = random.Random(3)
    m = Mesh.parse("x=2,y=2*2")
    A = mc.global_array(rng, (4, 6, 2), dtype)
    for t in mc.all_types(m, A.shape)[::3]:
        parts = distribute(A, m, t)
        assert len(parts) == 8
        for r, p in enumerate(parts):
            assert p.dtype == A.dtype and p.shape == t.local_shape and p.flags.c_contiguous
            assert verishard.runtime.layout.same_bytes(p, local_block(A, m, t, r))
        back = assemble(parts, m, t)
        assert verishard.runtime.layout.same_bytes(back, A)


@pytest.mark.parametrize("mesh", ["x=2,y=3", "x=2,y=2*2", "x=4,y=2", "x=2,y=1,z=3"])
def test_boxes_match_the_reference_model(mesh):
    m = Mesh.parse(mesh)
    for t in mc.all_types(m, (12, 4)):
        rt = mc.to_ref(t)
        for r, b in enumerate(boxes(m, t)):
            want = ref.box(m.part_sizes, rt, ref.coords(m.part_sizes, r))
            assert [(s.start, s.stop) for s in b] == [tuple(w) for w in want]
            assert box(m, t, r) == b


def test_layout_uses_the_verified_block_function(monkeypatch):
    calls = []
    real = core._core

    class Spy:  # the extracted module, with its block function observed
        def __getattr__(self, name):
            return getattr(real, name)

        def blocks(self, ints):
            calls.append(list(ints))
            return real.blocks(ints)

    monkeypatch.setattr(core, "_core", Spy())
    core.block_starts.cache_clear()
    t = P("[1{y,x}6, 2]")
    assert [p.tolist() for p in distribute(np.arange(12).reshape(6, 2), M, t)][1] == [[4, 5]]
    assert calls == [M.encode() + t.encode()]
    core.block_starts.cache_clear()


def test_worked_example_layout():
    A = np.arange(6)
    assert [p.tolist() for p in distribute(A, M, "[1{x,y}6]")] == [[0], [1], [2], [3], [4], [5]]
    assert [p.tolist() for p in distribute(A, M, "[1{y,x}6]")] == [[0], [2], [4], [1], [3], [5]]
    assert [p.tolist() for p in distribute(A, M, "[2{y}6]")] == [[0, 1], [2, 3], [4, 5]] * 2


def test_layout_errors():
    A = np.arange(6)
    with pytest.raises(ShardingError, match=r"global array has shape \(5,\)"):
        distribute(np.arange(5), M, "[3{x}6]")
    parts = distribute(A, M, "[3{x}6]")
    parts[4] = parts[4] + 1
    with pytest.raises(LayoutError, match="devices 3 and 4 hold the same block"):
        assemble(parts, M, "[3{x}6]")
    assert assemble(parts, M, "[3{x}6]", check=False).tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(LayoutError, match="got 5 arrays for 6 devices"):
        assemble(parts[:5], M, "[3{x}6]")
    with pytest.raises(LayoutError, match=r"device 2 holds shape \(2,\)"):
        assemble(parts[:2] + [np.zeros(2)] + parts[3:], M, "[3{x}6]")
    with pytest.raises(LayoutError, match="device 1 holds dtype float32"):
        assemble([parts[0], parts[1].astype(np.float32)] + parts[2:], M, "[3{x}6]")
    with pytest.raises(LayoutError, match="not a numpy array"):
        assemble([[0, 1, 2]] * 6, M, "[3{x}6]")
    with pytest.raises(ShardingError, match="out of range"):
        box(M, "[3{x}6]", 6)
    with pytest.raises(ShardingError, match="is over mesh"):
        distribute(A, "x=3,y=2", P("[3{x}6]"))
    # a type over a partial refinement of the mesh is accepted (same ranks)
    fine = Mesh.parse("x=2,y=2*2")
    t = ArrayType.parse("[1{y.1,x,y.0}8]", fine)
    assert [p.tolist() for p in distribute(np.arange(8), "x=2,y=4", t)] == \
        [p.tolist() for p in distribute(np.arange(8), fine, t)]


# ---------------------------------------------------------------------------
# groups, executor, backend interface


@pytest.mark.parametrize("mesh", ["x=2,y=3", "x=2,y=2*2", "x=2,y=1,z=3"])
def test_axis_group_index_is_the_mixed_radix_number(mesh):
    m = Mesh.parse(mesh)
    k = len(m.part_sizes)
    for size in range(1, k + 1):
        for parts in __import__("itertools").permutations(range(k), size):
            g = AxisGroup.of(m, parts)
            for r in range(m.num_devices):
                c = ref.coords(m.part_sizes, r)
                assert g.index[r] == ref.radix(m.part_sizes, c, parts)
            # members of one group differ only on the group's parts, in index order
            for row in g.members:
                cs = [ref.coords(m.part_sizes, int(r)) for r in row]
                assert [ref.radix(m.part_sizes, c, parts) for c in cs] == list(range(g.size))
                others = [p for p in range(k) if p not in parts]
                assert len({tuple(c[p] for p in others) for c in cs}) == 1


class Recorder(Backend):
    """A backend that records the calls the executor makes."""

    name = "recorder"

    def __init__(self):
        self.calls = []

    def all_gather(self, x, dim, group):
        self.calls.append(("all_gather", dim, group.names))
        return x

    def dyn_slice(self, x, dim, group):
        self.calls.append(("dyn_slice", dim, group.names))
        return x

    def all_to_all(self, x, src_dim, dst_dim, group):
        self.calls.append(("all_to_all", src_dim, dst_dim, group.names))
        return x

    def all_permute(self, x, sources):
        self.calls.append(("all_permute", tuple(int(s) for s in sources)))
        return x


def test_executor_calls_the_four_collectives_and_skips_trivial_steps():
    m = Mesh.parse("x=2,y=1,z=2*2")
    T = lambda text: ArrayType.parse(text, m)  # noqa: E731
    plan = check(m, "[8, 4]", "[4{z.1}8, 1{z.0,x}4]", [
        DynSlice(0, ("z.1", "x")), DynSlice(1, "y"),                 # the second is over a size-1 axis
        AllPermute(T("[2{x,z.1}8, 4{y}4]")),
        AllToAll(0, 1, "z.1"),
        AllPermute(T("[4{x}8, 2{z.1,y}4]")),                         # identity bijection
        AllGather(1, "y"),                                           # size-1 group
        AllPermute(T("[4{x}8, 2{z.1}4]")),                           # to the same type
        AllToAll(0, 1, "x"), DynSlice(0, "z.0"),
        AllPermute(T("[4{z.1}8, 1{z.0,x}4]"))])
    rec = Recorder()
    seen = []
    assert execute(plan, "value", rec, lambda i, s, t, y: seen.append((i, str(t)))) == "value"
    assert [c[0] for c in rec.calls] == ["dyn_slice", "all_permute", "all_to_all", "all_to_all",
                                         "dyn_slice", "all_permute"]
    assert rec.calls[0] == ("dyn_slice", 0, ("z.1", "x"))        # multi-axis, sub-axis, not in mesh order
    assert rec.calls[2] == ("all_to_all", 0, 1, ("z.1",))
    assert [i for i, _ in seen] == list(range(1, 11))           # on_step sees every step, even skipped ones
    assert seen[0][1] == "[8, 4]"


def test_backend_base_class_names_the_missing_method():
    class Half(Backend):
        def all_gather(self, x, dim, group):
            return x
    plan = check(M, "[6]", "[3{x}6]", [DynSlice(0, "x")])
    with pytest.raises(NotImplementedError, match="Half does not implement dyn_slice"):
        execute(plan, None, Half())


def test_donated_input_is_taken():
    box_ = Donated(distribute(np.arange(6), M, "[3{x}6]"))
    res = simulate(check(M, "[3{x}6]", "[6]", [AllGather(0, "x")]), box_)
    assert [p.tolist() for p in res.outputs] == [list(range(6))] * 6
    with pytest.raises(RedistributionError, match="already used"):
        box_.take()


def test_naive_plan():
    p = naive_plan("x=2,y=2,z=2", "[2{x,y}8, 4{z}8]", "[4{z}8, 2{y,x}8]")
    assert [str(c) for c in p.collectives] == ["AllGather(0, {x,y})", "AllGather(1, z)",
                                               "DynSlice(0, z)", "DynSlice(1, {y,x})"]
    assert p.peak == 64 and p.guaranteed is None


# ---------------------------------------------------------------------------
# the simulator against numpy and the checker's traffic


def _spec_received(mesh: Mesh, t: ArrayType, c) -> list[int]:
    """The spec's per-device received elements, from the reference model."""
    n, rt = mesh.part_sizes, mc.to_ref(t)
    N = mesh.num_devices
    if isinstance(c, DynSlice):
        return [0] * N
    if isinstance(c, AllPermute):
        p = ref.permutation(n, rt, mc.to_ref(c.target))
        return [ref.size(n, rt) if p[r] != r else 0 for r in range(N)]
    g = ref.group_size(n, c.parts(mesh))
    if isinstance(c, AllGather):
        return [(g - 1) * ref.size(n, rt)] * N
    return [ref.size(n, rt) - ref.size(n, rt) // g] * N


def _check_run(plan: Plan, A: np.ndarray):
    res = simulate(plan, distribute(A, plan.mesh, plan.src))
    want = distribute(A, plan.mesh, plan.dst)
    assert len(res.outputs) == len(want)
    for r, (y, w) in enumerate(zip(res.outputs, want)):
        assert verishard.runtime.layout.same_bytes(y, w), f"device {r}"
    it = A.dtype.itemsize
    assert len(res.steps) == len(plan.steps)
    for s, step, t in zip(res.steps, plan.steps, plan.types):
        assert int(s.received.max()) == step.received * it            # the verified checker, worst device
        assert s.received.tolist() == [v * it for v in _spec_received(plan.mesh, t, step.collective)]
        assert int(s.sent.sum()) == int(s.received.sum())
        assert s.held.tolist() == [step.type.size * it] * plan.mesh.num_devices
    assert res.received_bytes.max() == plan.traffic * it
    return res


@pytest.mark.parametrize("seed", range(150))
def test_simulate_random_problems_every_dtype(seed):
    rng = random.Random(seed)
    mesh, shape, src, dst = mc.random_problem(rng)
    dtype = mc.DTYPES[seed % len(mc.DTYPES)]
    A = mc.global_array(rng, shape, dtype)
    _check_run(verishard.plan(mesh, src, dst), A)
    _check_run(naive_plan(mesh, src, dst), A)
    direct = mc.direct_permute(mesh, src, dst)
    if direct is not None:
        _check_run(direct, A)
    # hand-built plans with every collective: random walks from src
    walk = mc.random_walk(rng, mesh, src, rng.randint(1, 6))
    _check_run(walk, A)


@pytest.mark.parametrize("seed", range(60))
def test_simulate_random_walks_on_refined_meshes(seed):
    rng = random.Random(1000 + seed)
    mesh = Mesh.parse(rng.choice(["x=2,y=2*2", "x=2*2,y=2", "x=2*3", "x=2,y=3*2", "x=2*2*2"]))
    shape = mc.random_shape(rng, mesh)
    src = mc.random_type(rng, mesh, shape)
    dtype = rng.choice(mc.DTYPES)
    _check_run(mc.random_walk(rng, mesh, src, 6), mc.global_array(rng, shape, dtype))


def test_simulate_object_dtype():
    m = Mesh.parse("x=2,y=2")
    A = mc.global_array(random.Random(0), (4, 4), object)
    walk = mc.random_walk(random.Random(5), m, ArrayType.parse("[2{x}4, 2{y}4]", m), 6)
    res = simulate(walk, distribute(A, m, walk.src))
    assert [[tuple(v) for v in y.ravel()] for y in res.outputs] == \
        [[tuple(v) for v in w.ravel()] for w in distribute(A, m, walk.dst)]


def test_simulate_agrees_with_the_reference_simulator():
    rng = random.Random(7)
    for _ in range(20):
        mesh, shape, src, _ = mc.random_problem(rng, 12, 512)
        walk = mc.random_walk(rng, mesh, src, 4)
        # a distribution (replicas equal): replicas may be chosen differently by the two permutations
        xs = distribute(mc.global_array(rng, shape, np.int32), mesh, src)
        res = simulate(walk, xs, check_data=False)
        ys = xs
        for t, c in zip(walk.types, walk.collectives):
            rc = mc.to_ref_collective(mesh, c)
            ys = ref.simulate(mesh.part_sizes, mc.to_ref(t), rc, ys)
        assert all(np.array_equal(a, b) for a, b in zip(res.outputs, ys))




# ---------------------------------------------------------------------------
# the simulator against the verified data movement (Semantics.source)


@pytest.mark.parametrize("kind", ["gather", "slice", "a2a", "permute"])
@pytest.mark.parametrize("mesh,shape", [("x=2,y=3", (6, 4)), ("x=2,y=2*2", (4, 8)), ("x=2,y=2,z=2", (4, 2, 4)),
                                        ("x=4,y=2", (8, 4)), ("x=2,y=1,z=3", (6, 3))])
def test_simulator_moves_every_element_as_core_movement(kind, mesh, shape):
    m = Mesh.parse(mesh)
    rng = random.Random(hash((kind, mesh)) & 0xffff)
    cases = mc.one_step_cases(m, shape, kind, 10**6, rng)
    assert cases, "no case of this kind"
    # up to 8 single-axis and 8 multi-axis collectives (a permute names no axes)
    cases = [c for c in cases if len(c[1].parts(m)) <= 1][:8] + [c for c in cases if len(c[1].parts(m)) > 1][:8]
    for t, c, t2 in cases:
        plan = check(m, t, t2, [c])
        L = t.size
        xs = [np.arange(r * L, (r + 1) * L, dtype=np.int64).reshape(t.local_shape) for r in range(m.num_devices)]
        ys = execute(plan, xs, SimBackend(m.num_devices))
        mv = core.movement(t, c, t2)                    # (N, L', 2): source rank and local offset
        assert mv.shape == (m.num_devices, t2.size, 2)
        for r, y in enumerate(ys):
            assert y.ravel().tolist() == (mv[r, :, 0] * L + mv[r, :, 1]).tolist(), f"{c} from {t}, device {r}"


def test_movement_covers_multi_axis_and_sub_axis_collectives():
    m = Mesh.parse("x=2,y=2*2")
    t = ArrayType.parse("[1{y.1,x}4, 4{y.0}8]", m)
    for c, t2 in [(AllGather(0, ("y.1", "x")), ArrayType.parse("[4, 4{y.0}8]", m)),
                  (AllToAll(0, 1, ("y.1", "x")), ArrayType.parse("[4, 1{y.0,y.1,x}8]", m)),
                  (AllPermute(ArrayType.parse("[1{x,y.0}4, 4{y.1}8]", m)), ArrayType.parse("[1{x,y.0}4, 4{y.1}8]", m))]:
        plan = check(m, t, t2, [c])
        xs = [np.arange(r * t.size, (r + 1) * t.size).reshape(t.local_shape) for r in range(8)]
        ys = execute(plan, xs, SimBackend(8))
        mv = core.movement(t, c, t2)
        for r, y in enumerate(ys):
            assert y.ravel().tolist() == (mv[r, :, 0] * t.size + mv[r, :, 1]).tolist()
    t = ArrayType.parse("[2, 8]", m)
    c, t2 = DynSlice(1, ("y.1", "x", "y.0")), ArrayType.parse("[2, 1{y.1,x,y.0}8]", m)
    ys = execute(check(m, t, t2, [c]), [np.arange(r * 16, r * 16 + 16).reshape(2, 8) for r in range(8)],
                 SimBackend(8))
    mv = core.movement(t, c, t2)
    assert all(y.ravel().tolist() == (mv[r, :, 0] * 16 + mv[r, :, 1]).tolist() for r, y in enumerate(ys))


# ---------------------------------------------------------------------------
# memory and traffic figures


def test_worked_example_figures():
    A = np.arange(6, dtype=np.float64)
    res = simulate(WORKED, distribute(A, M, WORKED.src))
    s1, s2, s3 = res.steps
    assert s1.peak.tolist() == [32] * 6 and s1.held.tolist() == [8] * 6        # 3 in + 1 out elements
    assert s2.received.tolist() == [0, 8, 8, 8, 8, 0]                          # devices 0 and 5 keep their block
    assert s2.peak.tolist() == [8, 16, 16, 16, 16, 8]
    assert s3.received.tolist() == [8] * 6 and s3.peak.tolist() == [24] * 6
    assert res.peak_bytes.tolist() == [32] * 6                                 # real peak > type-level 24
    assert WORKED.peak * 8 == 24
    assert "peak 32 B/device (type-level 24 B)" in str(res)


def test_gather_holds_input_and_output():
    m = Mesh.parse("x=2,y=2,z=2")
    plan = check(m, "[1{x,y,z}8]", "[8]", [AllGather(0, ("x", "y", "z"))])
    res = simulate(plan, distribute(np.arange(8, dtype=np.int32), m, plan.src))
    assert res.steps[0].peak.tolist() == [4 * 9] * 8
    assert res.steps[0].received.tolist() == res.steps[0].sent.tolist() == [4 * 7] * 8
    assert expected_received(plan.src, plan.collectives[0], m).tolist() == [7] * 8


# ---------------------------------------------------------------------------
# the simulator's own checks


def test_simulate_rejects_bad_inputs():
    xs = distribute(np.arange(6), M, WORKED.src)
    with pytest.raises(RedistributionError, match="got 5 arrays for 6 devices"):
        simulate(WORKED, xs[:5])
    with pytest.raises(RedistributionError, match=r"device 1 holds shape \(2,\)"):
        simulate(WORKED, [xs[0], xs[1][:2]] + xs[2:])
    with pytest.raises(RedistributionError, match="not a distribution"):
        simulate(WORKED, [xs[0] + 1] + xs[1:])
    simulate(WORKED, [xs[0] + 1] + xs[1:], check_data=False)          # moves them anyway
    with pytest.raises(PlanError, match="expected a verishard Plan"):
        simulate([AllGather(0, "x")], xs)
    assert validate_plan(WORKED) == WORKED
    forged = Plan(WORKED.mesh, WORKED.src, WORKED.dst,
                  (Step(DynSlice(0, "y"), P("[1{y,x}6]"), 0),) + WORKED.steps[1:], WORKED.peak)
    with pytest.raises(PlanError, match="step 1: the plan records type"):
        simulate(forged, xs)
    bad = Plan(WORKED.mesh, WORKED.src, WORKED.dst, (Step(DynSlice(0, "x"), P("[3{x}6]"), 0),), 3)
    with pytest.raises(PlanError, match="already shards"):
        simulate(bad, xs)


class WrongOrderGather(SimBackend):
    def all_gather(self, xs, dim, group):
        out = super().all_gather(xs, dim, group)
        return [np.flip(y, axis=dim).copy() for y in out]


class ChattyPermute(SimBackend):
    def all_permute(self, xs, sources):
        out = super().all_permute(xs, sources)
        self.last_received = self.last_received + 1
        self.last_sent = self.last_sent + 1
        return out


def test_simulator_checks_catch_a_wrong_backend(monkeypatch):
    xs = distribute(np.arange(6), M, WORKED.src)
    import verishard.runtime.simulator as sim
    monkeypatch.setattr(sim, "SimBackend", WrongOrderGather)
    with pytest.raises(RuntimeCheckError, match=r"step 3 \(AllGather\(0, x\)\): device 0 does not hold its block"):
        simulate(WORKED, xs)
    monkeypatch.setattr(sim, "SimBackend", ChattyPermute)
    with pytest.raises(RuntimeCheckError, match="device 0 received 1 B, the spec's figure is 0 B"):
        simulate(WORKED, xs)
