"""Case generators shared by the runtime tests (simulator and MPI): meshes,
global shapes, dtypes, global arrays, every type of a shape, and plans built
by hand (random walks of well-typed collectives, checked by ``verishard.check``).

Candidate collectives come from the independent reference model
(``tests/reference.py``); the plans are then accepted or rejected by the
verified checker. Everything is driven by ``random.Random(seed)`` so that
every MPI rank builds the same cases.
"""

from __future__ import annotations

import functools
import os
import itertools
import random
import sys
from math import prod

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import reference as ref  # noqa: E402

from verishard import (AllGather, AllPermute, AllToAll, ArrayType, DynSlice, Mesh, Plan,  # noqa: E402
                       ShardingError, check)

# dtypes of the tests: every kind numpy has, a structured one and an aligned one with padding
STRUCT = np.dtype([("a", "i1"), ("b", "<f8"), ("c", "<c8", (2,))])
ALIGNED = np.dtype([("a", "i1"), ("b", "<f4"), ("c", "u2")], align=True)
DTYPES = [np.dtype(d) for d in ("int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64",
                                "complex64", "complex128", "bool", ">i4", "U3", "datetime64[s]")] + [STRUCT, ALIGNED]

# meshes of the random tests: whole axes, split axes (partial refinements), size-1 axes
MESHES = ["x=2", "x=3", "x=4", "x=2*2", "x=2,y=2", "x=2,y=3", "x=3,y=2", "x=4,y=2", "x=2,y=2*2", "x=2*2,y=2",
          "x=2,y=2,z=2", "x=1,y=4", "x=2,y=1,z=3", "x=2*3", "x=2,y=3*2"]


def to_ref(t: ArrayType) -> tuple:
    return tuple((d.global_size, d.parts) for d in t.dims)


def to_ref_collective(mesh: Mesh, c):
    """A collective as the reference model's plain tuple over ``mesh``'s parts."""
    if isinstance(c, AllGather):
        return ("gather", c.dim, c.parts(mesh))
    if isinstance(c, DynSlice):
        return ("slice", c.dim, c.parts(mesh))
    if isinstance(c, AllToAll):
        return ("a2a", c.src_dim, c.dst_dim, c.parts(mesh))
    return ("permute", to_ref(c.target))


def from_ref(mesh: Mesh, rt) -> ArrayType:
    return ArrayType(mesh, rt)


def to_collective(mesh: Mesh, c):
    kind = c[0]
    if kind == "gather":
        return AllGather(c[1], mesh.names(c[2]))
    if kind == "slice":
        return DynSlice(c[1], mesh.names(c[2]))
    if kind == "a2a":
        return AllToAll(c[1], c[2], mesh.names(c[3]))
    return AllPermute(from_ref(mesh, c[1]))


@functools.lru_cache(maxsize=256)
def _all_ref_types(n: tuple, gshape: tuple) -> tuple:
    return tuple(ref.all_types(n, gshape))


def all_types(mesh: Mesh, gshape) -> list[ArrayType]:
    """Every well-formed type of ``gshape`` over the parts of ``mesh``."""
    return [from_ref(mesh, t) for t in _all_ref_types(mesh.part_sizes, tuple(gshape))]


def partial_types(mesh: Mesh, gshape, reduces=("sum",)) -> list[ArrayType]:
    """Every type of ``all_types`` with every set of its unused parts pending, for each reduction."""
    out = []
    for t in all_types(mesh, gshape):
        free = [p for p in range(len(mesh.part_sizes)) if p not in t.used_parts]
        for k in range(len(free) + 1):
            for pending in itertools.combinations(free, k):
                out += [ArrayType(mesh, t.dims, pending, op) for op in (reduces if pending else ("sum",))]
    return out


def random_mesh(rng: random.Random, max_devices: int = 24) -> Mesh:
    while True:
        m = Mesh.parse(rng.choice(MESHES))
        if m.num_devices <= max_devices:
            return m


def random_shape(rng: random.Random, mesh: Mesh, max_elements: int = 4096) -> tuple[int, ...]:
    sizes = [s for s in mesh.part_sizes if s > 1] or [1]
    while True:
        r = rng.randint(1, 3)
        shape = tuple(prod(rng.sample(sizes, rng.randint(0, len(sizes)))) * rng.choice((1, 1, 2, 3))
                      for _ in range(r))
        if prod(shape) <= max_elements:
            return shape


def random_type(rng: random.Random, mesh: Mesh, gshape) -> ArrayType:
    return rng.choice(all_types(mesh, gshape))


def global_array(rng: random.Random | np.random.Generator, shape, dtype) -> np.ndarray:
    """A global array of ``dtype`` whose elements are (nearly always) distinct."""
    g = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng.getrandbits(32))
    dtype = np.dtype(dtype)
    n = prod(shape)
    if dtype.kind == "b":
        return g.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "U":
        return np.array([str(v) for v in g.integers(0, 1000, size=n)], dtype=dtype).reshape(shape)
    if dtype.kind == "O":
        out = np.empty(n, dtype=object)
        for i, v in enumerate(g.integers(0, 10**6, size=n)):
            out[i] = (int(v), str(v))
        return out.reshape(shape)
    if dtype.kind == "M":
        return g.integers(0, 10**9, size=shape).astype(dtype)
    raw = g.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape).copy()


def candidates(mesh: Mesh, t: ArrayType, with_permutes: bool = True) -> list:
    """Every well-typed collective from ``t`` (reference-model encoding)."""
    n = mesh.part_sizes
    rt = to_ref(t)
    out = ref.well_typed(n, rt, with_permutes=False)
    if with_permutes:
        ls = ref.local_shape(n, rt)
        out += [("permute", t2) for t2 in _all_ref_types(n, t.global_shape)
                if t2 != rt and ref.local_shape(n, t2) == ls]
    return out


def random_walk(rng: random.Random, mesh: Mesh, src: ArrayType, steps: int,
                kinds: tuple[str, ...] = ("gather", "slice", "a2a", "permute")) -> Plan:
    """A plan of ``steps`` random well-typed collectives from ``src`` (choosing a
    kind first, then a collective of that kind), checked by ``verishard.check``."""
    n = mesh.part_sizes
    t, plan = to_ref(src), []
    for _ in range(steps):
        cands = [c for c in candidates(mesh, from_ref(mesh, t), "permute" in kinds) if c[0] in kinds]
        if not cands:
            break
        kind = rng.choice(sorted({c[0] for c in cands}))
        c = rng.choice([c for c in cands if c[0] == kind])
        plan.append(c)
        t, why = ref.apply(n, t, c)
        assert why is None, why
    return check(mesh, src, from_ref(mesh, t), [to_collective(mesh, c) for c in plan])


def random_problem(rng: random.Random, max_devices: int = 24, max_elements: int = 4096):
    mesh = random_mesh(rng, max_devices)
    shape = random_shape(rng, mesh, max_elements)
    return mesh, shape, random_type(rng, mesh, shape), random_type(rng, mesh, shape)


def one_step_cases(mesh: Mesh, gshape, kind: str, limit: int, rng: random.Random):
    """Up to ``limit`` (t, collective, t2) triples with a collective of ``kind``."""
    out = []
    types = all_types(mesh, gshape)
    rng.shuffle(types)
    for t in types:
        for c in candidates(mesh, t, kind == "permute"):
            if c[0] == kind:
                t2, _ = ref.apply(mesh.part_sizes, to_ref(t), c)
                out.append((t, to_collective(mesh, c), from_ref(mesh, t2)))
    rng.shuffle(out)
    return out[:limit]


def direct_permute(mesh: Mesh, src: ArrayType, dst: ArrayType) -> Plan | None:
    """``[AllPermute(dst)]`` when it is well typed, else None."""
    if src.local_shape != dst.local_shape:
        return None
    try:
        return check(mesh, src, dst, [AllPermute(dst)])
    except ShardingError:  # pragma: no cover
        return None

