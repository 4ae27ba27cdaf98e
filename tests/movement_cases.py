"""One-step cases of every collective kind and, for each, what every device
must hold afterwards according to the extracted, proved data movement: the
oracle of the per-collective backend tests (tests/test_backend_movement.py
for JAX, tests/torch_movement_job.py for torch), as tests/test_runtime.py and
tests/mpi_job.py use it for the simulator and MPI.

- plain even steps (all-gather, dynamic slice, all-to-all, permute):
  ``core.movement`` (``Semantics.movement``): device ``r``'s position ``i``
  is the source rank's element at the source offset;
- uneven steps: ``core.umovement`` (``Uchecker.umovement``) on padded
  buffers; positions it marks as fresh padding (source rank ``N``) are not
  compared;
- steps on partial types, as ``Partial.pexec_step`` defines them: the four
  collectives move data as ``core.movement`` of the types without pending
  axes; ``AllReduce(xs)`` reduces over the device's ``xs``-group at the same
  offset; ``ReduceScatter(d, xs)`` at the offset ``core.movement`` gives for
  ``DynSlice(d, xs)``; ``ToPartial(xs)``: index 0 of the group keeps, the
  others hold the unit. The groups themselves (members in index order) are
  read from ``core.movement`` of an all-gather over ``xs``.

Every case is a plan of one step accepted by the verified checker
(``verishard.check``), so the backends run exactly what they run in use.
"""

from __future__ import annotations

import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import mpi_cases as mc  # noqa: E402

import verishard as vs  # noqa: E402
from verishard import (AllGather, AllReduce, ArrayType, DynSlice, Mesh, ReduceScatter, ToPartial,  # noqa: E402
                       core)
from verishard.runtime.backend import reduction_identity  # noqa: E402

KINDS = ("gather", "slice", "a2a", "permute")
UNEVEN_KINDS = ("AllGather", "DynSlice", "AllToAll", "AllPermute")
_REDUCE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def even_cases(mesh_text: str, shape, per_kind: int, seed: int = 0) -> list[tuple[str, vs.Plan]]:
    """Up to ``per_kind`` single-axis and as many multi-axis steps of each
    plain kind on ``mesh_text`` (as tests/test_runtime.py picks them)."""
    m = Mesh.parse(mesh_text)
    rng = random.Random(seed)
    out = []
    for kind in KINDS:
        cases = mc.one_step_cases(m, shape, kind, 10**6, rng)
        assert cases, f"no {kind} case on {mesh_text}"
        cases = ([c for c in cases if len(c[1].parts(m)) <= 1][:per_kind]
                 + [c for c in cases if len(c[1].parts(m)) > 1][:per_kind])
        out += [(kind, vs.check(m, t, t2, [c])) for t, c, t2 in cases]
    return out


def uneven_cases(mesh_text: str, shape, per_kind: int) -> list[tuple[str, vs.Plan]]:
    """Up to ``per_kind`` uneven steps of each kind, taken from the verified
    planner's plans between the uneven types of ``shape``."""
    from uneven_reference import all_types
    m = Mesh.parse(mesh_text)
    types = [ArrayType(m, list(s)) for s in all_types(m.part_sizes, shape)]
    got: dict[str, list] = {k: [] for k in UNEVEN_KINDS}
    for i, s in enumerate(types):
        p = vs.plan(m, s, types[(7 * i + 3) % len(types)])
        t = p.src
        for step in p.steps:
            kind = type(step.collective).__name__
            if (t.uneven or step.type.uneven) and len(got.get(kind, ())) < per_kind:
                got[kind].append((kind, vs.check(m, t, step.type, [step.collective])))
            t = step.type
    assert all(got.values()), {k: len(v) for k, v in got.items()}
    return [c for k in UNEVEN_KINDS for c in got[k]]


def partial_cases(mesh_text: str = "x=2,y=2,z=2") -> list[tuple[str, vs.Plan]]:
    """Steps on partial types over ``x=2,y=2`` or ``x=2,y=2,z=2``: the
    reductions (sum, max, min; one and two axes), to-partial, and the four
    collectives on a type with a pending axis (a permute only with ``z``)."""
    m = Mesh.parse(mesh_text)
    P = lambda s: ArrayType.parse(s, m)  # noqa: E731
    z = "z" if "z" in m.axis_names else "x"   # the second pending axis of the two-axis cases
    out = []
    for op in ("sum", "max", "min"):
        tag = "" if op == "sum" else f"({op})"
        out += [
            ("AllReduce", P(f"[4, 2{{x}}4] partial{tag}{{y}}"), AllReduce("y"), P("[4, 2{x}4]")),
            ("AllReduce", P(f"[4, 4] partial{tag}{{y,{z}}}"), AllReduce(("y", z)), P("[4, 4]")),
            ("ReduceScatter", P(f"[4, 2{{x}}4] partial{tag}{{y}}"), ReduceScatter(0, "y"), P("[2{y}4, 2{x}4]")),
            ("ReduceScatter", P(f"[4, 4] partial{tag}{{y,{z}}}"), ReduceScatter(1, (z, "y")),
             P(f"[4, 1{{{z},y}}4]")),
            ("ToPartial", P("[2{x}4, 4]"), ToPartial("y"), P(f"[2{{x}}4, 4] partial{tag}{{y}}")),
        ]
    out += [
        ("AllGather", P("[4, 2{x}4] partial{y}"), AllGather(1, "x"), P("[4, 4] partial{y}")),
        ("DynSlice", P("[4, 4] partial{y}"), DynSlice(0, "x"), P("[2{x}4, 4] partial{y}")),
        ("AllToAll", P("[2{x}4, 4] partial{y}"), vs.AllToAll(0, 1, "x"), P("[4, 2{x}4] partial{y}")),
    ]
    if z == "z":
        out += [("AllPermute", P("[2{x}4, 4] partial{z}"), vs.AllPermute(P("[2{y}4, 4] partial{z}")),
                 P("[2{y}4, 4] partial{z}"))]
    return [(kind, vs.check(m, t, t2, [c])) for kind, t, c, t2 in out]


def inputs(plan: vs.Plan, dtype=np.int64) -> list[np.ndarray]:
    """Every device's local (padded) source buffer, all elements distinct
    across devices (device ``r`` holds ``r * L .. (r + 1) * L - 1``), so that
    an element read from a wrong device or offset shows."""
    t = plan.src
    L = t.size
    return [np.arange(r * L, (r + 1) * L, dtype=dtype).reshape(t.local_shape)
            for r in range(plan.mesh.num_devices)]


def _groups(m: Mesh, parts: tuple[int, ...]) -> np.ndarray:
    """``g[r, k]``: the device with index ``k`` in device ``r``'s group over
    ``parts``, read from the verified movement of an all-gather over them."""
    n = 1
    for p in parts:
        n *= m.part_sizes[p]
    names = m.names(parts)
    t = ArrayType(m, [(n, parts)])
    return core.movement(t, AllGather(0, names), ArrayType(m, [n]))[:, :, 0]


def expected(plan: vs.Plan, xs: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """For the one step of ``plan`` applied to the buffers ``xs``: every
    device's expected buffer and the mask of the positions that are compared
    (all but fresh padding)."""
    (step,) = plan.steps
    t, c, t2 = plan.src, step.collective, step.type
    m, N = plan.mesh, plan.mesh.num_devices
    flat = np.stack([x.reshape(-1) for x in xs])
    everywhere = np.ones(t2.size, dtype=bool)
    if isinstance(c, (AllReduce, ReduceScatter, ToPartial)):
        reduce = _REDUCE[plan.reduce]
        g = _groups(m, c.parts(m))
        if isinstance(c, ToPartial):
            unit = reduction_identity(flat.dtype, plan.reduce)
            keep = g[:, 0] == np.arange(N)
            want = [flat[r] if keep[r] else np.full(t2.size, unit, flat.dtype) for r in range(N)]
        else:
            if isinstance(c, AllReduce):
                offs = np.tile(np.arange(t2.size), (N, 1))
            else:
                offs = core.movement(t.plain, DynSlice(c.dim, c.axes), t2.plain)[:, :, 1]
            want = []
            for r in range(N):
                acc = flat[g[r, 0], offs[r]]
                for q in g[r, 1:]:
                    acc = reduce(acc, flat[q, offs[r]])
                want.append(acc)
        masks = [everywhere] * N
    else:
        plain_t, plain_t2 = t.plain, t2.plain
        uneven = t.uneven or t2.uneven
        mv = (core.umovement if uneven else core.movement)(plain_t, _plain_step(c), plain_t2)
        src, off = mv[:, :, 0], mv[:, :, 1]
        masks = [src[r] < N for r in range(N)]
        want = [np.where(masks[r], flat[np.minimum(src[r], N - 1), off[r]], 0) for r in range(N)]
    return ([w.reshape(t2.local_shape) for w in want], [k.reshape(t2.local_shape) for k in masks])


def _plain_step(c):
    """The step as the plain types' movement names it (a permute's target without pending axes)."""
    if isinstance(c, vs.AllPermute):
        return vs.AllPermute(c.target.plain)
    return c


def mismatches(plan: vs.Plan, xs: list[np.ndarray], ys: list[np.ndarray]) -> list[str]:
    """The devices whose buffer after the step differs from the movement's."""
    wants, masks = expected(plan, xs)
    bad = []
    for r, (y, w, k) in enumerate(zip(ys, wants, masks)):
        y = np.asarray(y)
        if y.shape != w.shape or not np.array_equal(y[k], w[k]):
            bad.append(f"{plan.steps[0].collective} from {plan.src}, device {r}: got {y.ravel().tolist()}, "
                       f"the movement says {np.where(k, w, -1).ravel().tolist()} (-1: padding)")
    return bad
