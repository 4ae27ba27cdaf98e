"""The SPMD job of the MPI runtime tests; run as ``mpirun -n N python tests/mpi_job.py SUITE...``.

Suites (each rank checks its own result against numpy; rank 0 prints
``SUITE <name> OK <count>`` or ``SUITE <name> FAILED <count>``; failures are
printed as ``[rank r] FAIL ...`` lines):

- ``pairs``: every pair of types on small meshes with N devices, with
  ``verishard.plan`` and, when the local shapes agree, a direct ``AllPermute``.
- ``random``: random hand-built plans (every collective, multi-axis and
  sub-axis ones, split meshes) on larger arrays of random dtypes.
- ``movement``: every collective kind moves each element as ``core.movement``
  (the verified ``Semantics.source``) says.
- ``partial``: pairs of partial types (pending sums, some max/min) on
  ``x=2,y=2,z=2`` (a fixed sample) or ``x=2,y=3`` (all), from a random
  representation of a numpy array; each rank checks the value its pending
  group's outputs represent (integers exactly, floats to 1e-9).
- ``uneven``: pairs of uneven types (blocks of ``ceil(g / n)``) on
  ``x=2,y=2`` (all), ``x=2,y=3`` (all) or ``x=2,y=2,z=2`` (a fixed sample),
  run on padded buffers whose padding is a sentinel; each rank checks every
  valid position of its target buffer against numpy.
- ``bad``: bad plans and inputs; every rank must get the same
  ``RedistributionRefused`` naming the failing ranks, and the communicator
  must work afterwards.

Scenarios that end the job (run alone): ``exit-refused`` (one rank's input
is bad and nobody catches the error), ``exit-crash`` (one rank raises before
calling ``redistribute``), ``exit-timeout`` (one rank calls it too late; the
others give up after 3 s), ``exit-missing``/``exit-missing0`` (rank 2, or
rank 0, exits before calling it), ``exit-size`` (the plan's mesh needs another
number of ranks).
"""

from __future__ import annotations

import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mpi_cases as mc  # noqa: E402

import verishard  # noqa: E402
from verishard import AllGather, DynSlice, Mesh, Plan, Step, check, core  # noqa: E402
from verishard.runtime import AxisGroup, Donated, local_block, naive_plan  # noqa: E402
from verishard.runtime.layout import same_bytes  # noqa: E402
from verishard.runtime.mpi import RedistributionRefused, guarded, mesh_comm, redistribute  # noqa: E402

# set by main(); importing this module (pytest --doctest-modules does) must not start MPI
MPI = COMM = None
RANK = SIZE = 0

PAIR_MESHES = {
    4: [("x=2,y=2", (4, 6)), ("x=4", (8, 2)), ("x=2*2", (4,))],
    6: [("x=2,y=3", (6, 6)), ("x=3,y=2", (6, 2)), ("x=2*3", (12, 6))],
    8: [("x=2,y=2,z=2", (8,)), ("x=2,y=2,z=2", (4, 2)), ("x=4,y=2", (8, 4)), ("x=2,y=4", (4, 8))],
}
RANDOM_MESHES = {
    4: ["x=4", "x=2,y=2", "x=2*2", "x=1,y=2*2", "x=2,y=1,z=2"],
    6: ["x=2,y=3", "x=3,y=2", "x=2*3", "x=6"],
    8: ["x=2,y=2,z=2", "x=4,y=2", "x=2,y=4", "x=2,y=2*2", "x=2*2,y=2", "x=2*2*2", "x=8"],
}


class Suite:
    def __init__(self, name: str):
        self.name, self.count, self.failures = name, 0, []

    def fail(self, what: str) -> None:
        self.failures.append(what)

    def finish(self) -> bool:
        counts = COMM.allgather(len(self.failures))
        for f in self.failures[:5]:
            print(f"[rank {RANK}] FAIL {self.name}: {f}", flush=True)
        COMM.Barrier()
        total = sum(counts)
        if RANK == 0:
            status = "OK" if total == 0 else "FAILED"
            print(f"SUITE {self.name} {status} cases={self.count} failures={total}", flush=True)
        return total == 0


def run_case(suite: Suite, plan: Plan, A: np.ndarray, label: str, donate: bool = False) -> None:
    suite.count += 1
    local = local_block(A, plan.mesh, plan.src, RANK)
    res = redistribute(plan, Donated(local) if donate else local, timeout=60)
    want = local_block(A, plan.mesh, plan.dst, RANK)
    if not same_bytes(res.output, want):
        suite.fail(f"{label}: wrong data")
    check_traffic(suite, plan, res, A.dtype.itemsize, label)


def check_traffic(suite: Suite, plan: Plan, res, it: int, label: str) -> None:
    """Per step: no rank received more than the checker's figure, and the most is that figure."""
    for s, step in zip(res.steps, plan.steps):
        if s.received > step.received * it:
            suite.fail(f"{label}: step {s.index} received {s.received} B > verified {step.received * it} B")
    mine = np.array([s.received for s in res.steps], dtype=np.int64)
    worst = np.empty_like(mine)
    COMM.Allreduce(mine, worst, op=MPI.MAX)
    want = [step.received * it for step in plan.steps]
    if worst.tolist() != want:
        suite.fail(f"{label}: most bytes received per step {worst.tolist()}, the checker predicts {want}")


def suite_pairs() -> bool:
    suite = Suite("pairs")
    rng = np.random.default_rng(0)
    for mesh_text, shape in PAIR_MESHES[SIZE]:
        mesh = Mesh.parse(mesh_text)
        A = mc.global_array(rng, shape, np.int32)
        types = mc.all_types(mesh, shape)
        for src in types:
            for dst in types:
                label = f"{mesh}: {src} -> {dst}"
                run_case(suite, verishard.plan(mesh, src, dst), A, label)
                direct = mc.direct_permute(mesh, src, dst)
                if direct is not None and src != dst:
                    run_case(suite, direct, A, label + " (AllPermute)")
    return suite.finish()


def suite_exchange() -> bool:
    """Every pair of the pair meshes for which the planner takes the exchange
    (plan(..., exchange=True)): unchunked, and chunked in 2 pieces along its
    free dimension with the source donated; equal to numpy, traffic as the
    checker's report (the lower bound)."""
    suite = Suite("exchange")
    rng = np.random.default_rng(3)
    for mesh_text, shape in PAIR_MESHES[SIZE]:
        mesh = Mesh.parse(mesh_text)
        shape = shape + (4,)   # a dimension no type shards: the exchange can run in pieces
        A = mc.global_array(rng, shape, np.int32)
        for src in mc.all_types(mesh, shape):
            for dst in mc.all_types(mesh, shape):
                plan = verishard.plan(mesh, src, dst, exchange=True)
                if not plan.collectives or not isinstance(plan.collectives[0], core.Exchange):
                    continue
                label = f"{mesh}: {src} -> {dst}"
                if plan.traffic != plan.lower_bound or plan.peak != plan.bound:
                    suite.fail(f"{label}: traffic {plan.traffic} / lower bound {plan.lower_bound}, "
                               f"peak {plan.peak} / bound {plan.bound}")
                run_case(suite, plan, A, label)
                suite.count += 1
                local = local_block(A, plan.mesh, plan.src, RANK)
                res = redistribute(plan, Donated(local), chunks=2, timeout=60)
                if not same_bytes(res.output, local_block(A, plan.mesh, plan.dst, RANK)):
                    suite.fail(f"{label} (2 pieces): wrong data")
                if res.chunking is None or res.chunking.ks != (2,):
                    suite.fail(f"{label} (2 pieces): ran in {res.chunking and res.chunking.ks} pieces")
                check_traffic(suite, plan, res, A.dtype.itemsize, label + " (2 pieces)")
    # uneven types (Exchangeproof.ueplan_spec): valid positions equal numpy, whole and in pieces
    from uneven_reference import all_types as uneven_types

    from verishard.runtime.uneven import distribute_padded
    shape = {4: (3, 5, 2), 6: (5, 4, 2), 8: (3, 5, 2)}[SIZE]
    mesh = Mesh.parse({4: "x=2,y=2", 6: "x=2,y=3", 8: "x=2,y=2,z=2"}[SIZE])
    types = [verishard.ArrayType(mesh, list(t)) for t in uneven_types(mesh.part_sizes, shape)]
    pairs = [(a, b) for a in types for b in types if a.uneven or b.uneven]
    if SIZE == 8:
        pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), 400, replace=False))]
    A = rng.integers(0, 1000, shape).astype(np.int32)
    sentinel = np.int32(-7)
    for src, dst in pairs:
        plan = verishard.plan(mesh, src, dst, exchange=True)
        if not plan.exchange:
            continue
        label = f"{mesh}: {src} -> {dst}"
        box = tuple(slice(0, v) for v in plan.dst.valid_shape(RANK))
        want = distribute_padded(A, plan.mesh, plan.dst, sentinel)[RANK]
        for chunks in (1, 2):
            local = distribute_padded(A, plan.mesh, plan.src, sentinel)[RANK]
            res = redistribute(plan, Donated(local), chunks=chunks, timeout=60)
            if res.output.shape != plan.dst.local_shape or not np.array_equal(res.output[box], want[box]):
                suite.fail(f"{label} ({chunks} pieces): wrong data")
            check_traffic(suite, plan, res, A.dtype.itemsize, f"{label} ({chunks} pieces)")
            suite.count += 1
    # partial types over uneven dimensions (Puexchangeproof.puexec_correct): all-reduce, exchange, make
    # pending; the outputs, gathered, reduce to the array at every valid position
    from test_exchange import partial_padded, reduced
    from verishard.runtime.uneven import assemble_padded
    mesh = Mesh.parse({4: "x=2,y=2", 6: "x=2,y=3", 8: "x=2,y=2,z=2"}[SIZE])
    shape = (3, 5)
    ptypes = []
    for t in uneven_types(mesh.part_sizes, shape):
        free = [p for p in range(len(mesh.part_sizes)) if p not in {q for _, ps in t for q in ps}]
        if free:
            ptypes.append(verishard.ArrayType(mesh, list(t), (free[0],)))
        ptypes.append(verishard.ArrayType(mesh, list(t)))
    A = rng.integers(-50, 50, shape).astype(np.int32)
    pairs = [(a, b) for a in ptypes for b in ptypes if (a.partial or b.partial) and (a.uneven or b.uneven)]
    for k in sorted(rng.choice(len(pairs), min(len(pairs), 60), replace=False)):
        src, dst = pairs[k]
        plan = verishard.plan(mesh, src, dst)
        local = partial_padded(A, mesh, src, np.random.default_rng(int(k)), "sum")[RANK]
        res = redistribute(plan, local, timeout=60)
        ys = COMM.allgather(res.output)
        if not np.array_equal(assemble_padded(reduced(ys, mesh, dst, "sum"), mesh, dst.plain), A):
            suite.fail(f"{mesh}: {src} -> {dst}: wrong data")
        check_traffic(suite, plan, res, A.dtype.itemsize, f"{mesh}: {src} -> {dst}")
        suite.count += 1
    return suite.finish()


def suite_partial() -> bool:
    from verishard.runtime import represented, split_partial
    suite = Suite("partial")
    meshes = {8: [("x=2,y=2,z=2", (4, 4), 600)], 6: [("x=2,y=3", (6, 6), None)]}.get(SIZE, [])
    rng = np.random.default_rng(5)
    for mesh_text, shape, sample in meshes:
        mesh = Mesh.parse(mesh_text)
        types = mc.partial_types(mesh, shape, ("sum", "max"))
        pairs = [(s, d) for s in types for d in types if (s.reduce == d.reduce or not (s.partial and d.partial))
                 and (s.partial or d.partial)]
        if sample is not None:
            pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), sample, replace=False))]
        for i, (src, dst) in enumerate(pairs):
            dtype = (np.int32, np.float64)[i % 2]
            A = rng.integers(-50, 50, shape).astype(dtype)
            plan = verishard.plan(mesh, src, dst)
            local = split_partial(A, plan.mesh, plan.src, np.random.default_rng(i))[RANK]   # same split on every rank
            res = redistribute(plan, local, timeout=60)
            got = represented(COMM.allgather(res.output), plan.dst)[RANK]
            want = local_block(A, plan.mesh, plan.dst.plain, RANK)
            exact = np.dtype(dtype).kind != "f" or plan.reduce != "sum"
            if not (same_bytes(got, want) if exact else np.allclose(got, want, rtol=1e-9, atol=1e-9)):
                suite.fail(f"{mesh}: {src} -> {dst} [{dtype.__name__}]: wrong data")
            check_traffic(suite, plan, res, A.dtype.itemsize, f"{mesh}: {src} -> {dst}")
            suite.count += 1
    return suite.finish()


def suite_uneven() -> bool:
    from uneven_reference import all_types as uneven_types

    from verishard.runtime.uneven import distribute_padded
    suite = Suite("uneven")
    meshes = {4: [("x=2,y=2", (3, 5), None)], 6: [("x=2,y=3", (5, 4), None)],
              8: [("x=2,y=2,z=2", (3, 5), 300)]}.get(SIZE, [])
    rng = np.random.default_rng(11)
    sentinel = np.int32(-7)  # keeps the buffers int32
    for mesh_text, shape, sample in meshes:
        mesh = Mesh.parse(mesh_text)
        types = [verishard.ArrayType(mesh, list(t)) for t in uneven_types(mesh.part_sizes, shape)]
        pairs = [(s, d) for s in types for d in types if s.uneven or d.uneven]
        if sample is not None:
            pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), sample, replace=False))]
        A = rng.integers(0, 1000, shape).astype(np.int32)
        for src, dst in pairs:
            label = f"{mesh}: {src} -> {dst}"
            plan = verishard.plan(mesh, src, dst)
            local = distribute_padded(A, plan.mesh, plan.src, sentinel)[RANK]
            res = redistribute(plan, local, timeout=60)
            box = tuple(slice(0, v) for v in plan.dst.valid_shape(RANK))
            want = distribute_padded(A, plan.mesh, plan.dst, sentinel)[RANK]
            if res.output.shape != plan.dst.local_shape or not np.array_equal(res.output[box], want[box]):
                suite.fail(f"{label}: wrong data")
            check_traffic(suite, plan, res, A.dtype.itemsize, label)
            suite.count += 1
    return suite.finish()


def suite_random(cases: int = 60) -> bool:
    suite = Suite("random")
    rng = random.Random(1234 + SIZE)
    for i in range(cases):
        mesh = Mesh.parse(rng.choice(RANDOM_MESHES[SIZE]))
        shape = mc.random_shape(rng, mesh, max_elements=1 << 16)
        scale = [1] * len(shape)
        scale[rng.randrange(len(shape))] = rng.choice((8, 16, 32))   # larger arrays than the pairs
        shape = tuple(g * s for g, s in zip(shape, scale))
        src = mc.random_type(rng, mesh, shape)
        dtype = mc.DTYPES[i % len(mc.DTYPES)]
        A = mc.global_array(rng, shape, dtype)
        plan = mc.random_walk(rng, mesh, src, rng.randint(2, 7))
        run_case(suite, plan, A, f"case {i}: {plan.mesh}: {plan.src} -> {plan.dst} "
                 f"[{', '.join(map(str, plan.collectives))}] {dtype}", donate=bool(i % 2))
        run_case(suite, naive_plan(mesh, plan.src, plan.dst), A, f"case {i} naive")
    return suite.finish()


def suite_movement() -> bool:
    suite = Suite("movement")
    rng = random.Random(99)
    meshes = {4: [("x=2,y=2", (4, 4)), ("x=2*2", (8, 2))], 6: [("x=2,y=3", (6, 6))],
              8: [("x=2,y=2,z=2", (4, 2, 4)), ("x=2,y=2*2", (4, 8)), ("x=4,y=2", (8, 4))]}[SIZE]
    for mesh_text, shape in meshes:
        mesh = Mesh.parse(mesh_text)
        for kind in ("gather", "slice", "a2a", "permute"):
            cases = mc.one_step_cases(mesh, shape, kind, 10**6, rng)
            cases = [c for c in cases if len(c[1].parts(mesh)) <= 1][:6] + \
                [c for c in cases if len(c[1].parts(mesh)) > 1][:6]
            for t, c, t2 in cases:
                suite.count += 1
                L = t.size
                x = np.arange(RANK * L, (RANK + 1) * L, dtype=np.int64).reshape(t.local_shape)
                res = redistribute(check(mesh, t, t2, [c]), x, timeout=60)
                mv = core.movement(t, c, t2)[RANK]
                if res.output.ravel().tolist() != (mv[:, 0] * L + mv[:, 1]).tolist():
                    suite.fail(f"{mesh}: {c} from {t}: data does not move as core.movement says")
        # communicators: one Cartesian communicator per mesh, cached, with a sub-communicator
        # per part and per whole axis whose rank order is the verified group index
        suite.count += 1
        mcomm = mesh_comm(COMM, mesh)
        if mesh_comm(COMM, mesh) is not mcomm or mcomm.cart.Get_topo()[0] != list(mesh.part_sizes):
            suite.fail(f"{mesh}: the Cartesian communicator is not cached or has the wrong shape")
        wanted = [(p,) for p in range(len(mesh.part_sizes))] + [mesh.resolve(a) for a in mesh.axis_names]
        for parts in wanted:
            g = AxisGroup.of(mesh, parts)
            sub = mcomm.groups.get(tuple(parts))
            if sub is None or sub.Get_size() != g.size or sub.Get_rank() != int(g.index[RANK]):
                suite.fail(f"{mesh}: no correct sub-communicator over {g.names}")
    return suite.finish()


def expect_refused(suite: Suite, label: str, plan, local, *needles: str) -> None:
    suite.count += 1
    try:
        redistribute(plan, local, timeout=60)
    except RedistributionRefused as e:
        msg = str(e)
        for needle in needles:
            if needle not in msg:
                suite.fail(f"{label}: message lacks {needle!r}: {msg}")
        if not msg.startswith("redistribution refused before any data moved"):
            suite.fail(f"{label}: unexpected message {msg}")
        messages = COMM.allgather(msg)
        if len(set(messages)) != 1:
            suite.fail(f"{label}: ranks got different messages")
    else:
        suite.fail(f"{label}: no error")


def suite_bad() -> bool:
    suite = Suite("bad")
    mesh = Mesh.parse({4: "x=2,y=2", 6: "x=2,y=3", 8: "x=2,y=4"}[SIZE])
    plan = verishard.plan(mesh, "[6{x}12, 12]", f"[12, {12 // mesh.axis_sizes[1]}{{y}}12]")
    A = np.arange(144, dtype=np.float64).reshape(12, 12)
    good = local_block(A, mesh, plan.src, RANK)
    last = SIZE - 1

    def ok_after(label: str) -> None:  # the communicator still works after a refusal
        run_case(suite, plan, A, f"{label}: good run afterwards")

    expect_refused(suite, "wrong shape", plan, good[:1] if RANK == 1 else good,
                   f"rank 1: the local input has shape (1, 12), but the source type {plan.src} "
                   f"has local shape {plan.src.local_shape}")
    ok_after("wrong shape")
    expect_refused(suite, "dtype", plan, good.astype(np.float32) if RANK == 2 else good,
                   "the ranks disagree on the dtype", "rank 2: float32", "float64")
    expect_refused(suite, "not an array", plan, good.tolist() if RANK == 0 else good,
                   "rank 0: the local input is a list, not a numpy array")
    expect_refused(suite, "object dtype", plan, good.astype(object), "holds Python objects")
    other = naive_plan(mesh, plan.src, plan.src)
    expect_refused(suite, "plans differ", other if RANK == 3 else plan, good,
                   "the ranks disagree on the plan", "rank 3:")
    forged = Plan(plan.mesh, plan.src, plan.dst, (Step(DynSlice(0, "y"), plan.src, 0),), plan.peak)
    expect_refused(suite, "invalid plan", forged, good, f"ranks 0-{last}: the plan is invalid: step 1")
    expect_refused(suite, "no plan", None if RANK == last else plan, good,
                   f"rank {last}: the plan is invalid: expected a verishard Plan, not NoneType")
    big = Mesh.parse(f"x={SIZE},y=2")
    bplan = check(big, f"[1{{x}}{SIZE}]", f"[{SIZE}]", [AllGather(0, "x")])
    expect_refused(suite, "mesh size", bplan, np.zeros(1),
                   f"ranks 0-{last}: the plan's mesh {big} has {2 * SIZE} devices but the communicator has {SIZE} ranks")
    expect_refused(suite, "several ranks", plan,
                   good[:, :1] if RANK in (0, last) else (good.astype(np.int8) if RANK == 1 else good),
                   f"ranks 0,{last}: the local input has shape", "rank 1: int8",
                   "the ranks disagree on the dtype")
    ok_after("end")
    return suite.finish()


# ---------------------------------------------------------------------------
# scenarios that end the job


def exit_refused() -> None:
    mesh = Mesh.parse(f"x={SIZE}")
    plan = check(mesh, f"[2{{x}}{2 * SIZE}]", f"[{2 * SIZE}]", [AllGather(0, "x")])
    x = np.zeros(3 if RANK == 1 else 2)
    redistribute(plan, x, timeout=60)


def exit_crash() -> None:
    mesh = Mesh.parse(f"x={SIZE}")
    plan = check(mesh, f"[2{{x}}{2 * SIZE}]", f"[{2 * SIZE}]", [AllGather(0, "x")])
    if RANK == 2:
        raise ValueError("rank 2 could not load its input")
    redistribute(plan, np.zeros(2), timeout=60)


def _late(missing: int, sleep: bool) -> None:
    mesh = Mesh.parse(f"x={SIZE}")
    plan = check(mesh, f"[2{{x}}{2 * SIZE}]", f"[{2 * SIZE}]", [AllGather(0, "x")])
    if RANK == missing:
        if sleep:
            time.sleep(60)   # calls redistribute too late (the others give up after 3 s)
        else:
            return           # exits before redistribute
    redistribute(plan, np.zeros(2), timeout=3)


def exit_timeout() -> None:
    _late(1, sleep=True)


def exit_missing() -> None:
    _late(2, sleep=False)


def exit_missing0() -> None:
    _late(0, sleep=False)


def exit_size() -> None:
    mesh = Mesh.parse("x=2,y=2,z=3")   # 12 devices; the tests run this with 4, 6 or 8 ranks
    plan = check(mesh, "[1{x,y,z}12]", "[12]", [AllGather(0, ("x", "y", "z"))])
    redistribute(plan, np.zeros(1), timeout=60)


SUITES = {"pairs": suite_pairs, "random": suite_random, "movement": suite_movement, "bad": suite_bad,
          "partial": suite_partial, "uneven": suite_uneven, "exchange": suite_exchange}
EXITS = {"exit-refused": exit_refused, "exit-crash": exit_crash, "exit-timeout": exit_timeout,
         "exit-missing": exit_missing, "exit-missing0": exit_missing0, "exit-size": exit_size}


def main() -> None:
    global MPI, COMM, RANK, SIZE
    from mpi4py import MPI
    COMM = MPI.COMM_WORLD
    RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
    names = sys.argv[1:] or list(SUITES)
    ok = True
    for name in names:
        if name in EXITS:
            EXITS[name]()
            continue
        start = time.monotonic()
        ok &= SUITES[name]()
        if RANK == 0:
            print(f"time {name} {time.monotonic() - start:.1f} s", flush=True)
    if not ok:  # every rank knows (Suite.finish is collective): end together, quietly
        sys.stdout.flush()
        COMM.Barrier()
        os._exit(1)


if __name__ == "__main__":
    sys.exit(guarded(main))
