"""The PyTorch DTensor adapter: the plan DTensor's redistribute planner
chooses (``torch.distributed.tensor._redistribute``), greedy or with its
minimum-cost (graph) search, on a fake process group.

DTensor's plan is a list of transforms, each one mesh dimension (or, after
its merging pass, a flattened group of mesh dimensions) going from one
placement to another. Each transform is replayed with DTensor's data
semantics (``Shard._to_replicate_tensor`` = all-gather along the tensor
dimension in group order, ``Shard._replicate_to_shard`` = local chunk,
``Shard._to_new_shard_dim`` = all-to-all) on an array whose elements carry
their global index; the observations become our IR in
:mod:`verishard.crosscheck.trace` and are judged by the verified checker.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..mesh import Mesh
from ..sharding import ArrayType
from .result import PlannerResult, judge
from .trace import Event, global_values, held_sets, local_arrays

__all__ = ["dtensor_plan", "dtensor_transforms", "replay", "chunk"]


def _groups(mesh: Mesh, dims: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """For every rank: its group id and its index in the group over mesh dims
    ``dims`` (row-major over ``dims`` in the given order)."""
    n = mesh.num_devices
    coords = np.array([mesh.coords(r) for r in range(n)]).reshape(n, len(mesh.axis_sizes))
    sizes = mesh.axis_sizes
    index = np.zeros(n, dtype=np.int64)
    for d in dims:
        index = index * sizes[d] + coords[:, d]
    rest = [d for d in range(len(sizes)) if d not in dims]
    key = np.zeros(n, dtype=np.int64)
    for d in rest:
        key = key * sizes[d] + coords[:, d]
    return key, index


def dtensor_transforms(mesh: Mesh, src: ArrayType, dst: ArrayType, min_cost: bool):
    """DTensor's (optimized) transform list for ``src -> dst`` and whether the
    graph-based (minimum-cost) planner produced it.

    >>> m = Mesh.parse("x=2,y=2")
    >>> infos, graph = dtensor_transforms(m, ArrayType.parse("[2{x}4, 4]", m), ArrayType.parse("[4, 2{y}4]", m), False)
    >>> [(i.mesh_dim, i.src_dst_placements) for i in infos], graph
    ([(1, (Replicate(), Shard(dim=1))), (0, (Shard(dim=0), Replicate()))], False)
    """
    from torch.distributed.tensor import _redistribute as R
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    from ..torch.dtensor import planning_mesh, to_spec
    dm = planning_mesh(mesh)
    s, d = to_spec(src, dm), to_spec(dst, dm)
    forced = not all(DTensorSpec.is_default_device_order(o) for o in (s.shard_order, d.shard_order))
    log = logging.getLogger(R.__name__)
    level = log.level
    log.setLevel(logging.ERROR)  # its "flatten mesh dimensions" advice, once per pattern
    try:
        with R.use_min_cost_redistribution_plan(min_cost):
            infos = R._gen_transform_infos_non_cached(s, d)
        optimized = R._optimize_transform_infos(infos, dm, s.placements, d.placements)
    finally:
        log.setLevel(level)
    return optimized, (min_cost or forced)


def chunk(x: np.ndarray, n: int, k: int, dim: int) -> np.ndarray:
    """Piece ``k`` of ``n`` of ``x`` along ``dim`` as DTensor cuts it
    (``torch.chunk``, then empty pieces up to ``n``): ``[k c, min(L, (k+1) c))``
    with ``c = ceil(L / n)``; the equal pieces of ``np.split`` when ``n``
    divides ``L``.

    >>> [chunk(np.arange(5), 4, k, 0).tolist() for k in range(4)]
    [[0, 1], [2, 3], [4], []]
    """
    L = x.shape[dim]
    c = -(-L // n)
    idx = [slice(None)] * x.ndim
    idx[dim] = slice(min(L, k * c), min(L, (k + 1) * c))
    return x[tuple(idx)]


def replay(mesh: Mesh, info: Any, xs: list[np.ndarray]):
    """One DTensor transform on every rank's local array, with DTensor's data
    semantics: ``(kind, new arrays, received per rank)``, ``None`` for a
    transform that does nothing, kind ``"unsupported"`` for one not modelled.

    Shard -> Replicate gathers in group order, Replicate -> Shard takes the
    rank's chunk (``torch.chunk``'s, :func:`chunk`: short or empty ones where
    the group does not divide the size), Shard -> Shard is an all-to-all;
    Partial("sum") -> Replicate sums the group (an all-reduce, counted as a
    ring: ``2 (s - s / n)`` received), Partial -> Shard sums and keeps the rank's chunk (a
    reduce-scatter, ``s - s / n``), and Replicate -> Partial("sum") is
    DTensor's ``Partial._partition_value``: the value divided by the group
    size on every rank (true division; the arrays should be floats).
    """
    from torch.distributed.tensor import Partial, Replicate, Shard

    a, b = info.src_dst_placements
    dims = tuple(getattr(info, "original_mesh_dims", None) or (info.mesh_dim,))
    key, index = _groups(mesh, dims)
    size = int(np.prod([mesh.axis_sizes[d] for d in dims]))
    n = mesh.num_devices
    if size == 1 or a == b:
        return None
    received = np.zeros(n, dtype=np.int64)
    members = [sorted((i for i in range(n) if key[i] == key[r]), key=lambda i: index[i]) for r in range(n)]
    summed = isinstance(a, Partial) and a.reduce_op == "sum"
    if type(a) is Shard and isinstance(b, Replicate):
        new = [np.concatenate([xs[m] for m in members[r]], axis=a.dim) for r in range(n)]
        received = np.array([y.size - x.size for x, y in zip(xs, new)], dtype=np.int64)
        return "all-gather", new, received
    if isinstance(a, Replicate) and type(b) is Shard:
        return "local", [chunk(xs[r], size, index[r], b.dim) for r in range(n)], received
    if type(a) is Shard and type(b) is Shard:
        new = []
        for r in range(n):
            got = [chunk(xs[m], size, index[r], b.dim) for m in members[r]]
            new.append(np.concatenate(got, axis=a.dim))
            received[r] = sum(g.size for m, g in zip(members[r], got) if m != r)
        return "all-to-all", new, received
    if summed and isinstance(b, Replicate):
        new = [sum(xs[m] for m in members[r]) for r in range(n)]
        return "all-reduce", new, np.array([2 * (x.size - x.size // size) for x in xs], dtype=np.int64)
    if summed and type(b) is Shard:
        new = [np.split(sum(xs[m] for m in members[r]), size, axis=b.dim)[index[r]] for r in range(n)]
        return "reduce-scatter", new, np.array([x.size - x.size // size for x in xs], dtype=np.int64)
    if isinstance(a, Replicate) and isinstance(b, Partial) and b.reduce_op == "sum":
        return "to-partial", [x / size for x in xs], received
    return "unsupported", xs, received


def dtensor_plan(mesh: Mesh, src: ArrayType, dst: ArrayType, *, min_cost: bool = False) -> PlannerResult:
    """DTensor's plan for ``src -> dst`` in our IR (or why it has none).

    >>> m = Mesh.parse("x=2,y=2")
    >>> r = dtensor_plan(m, ArrayType.parse("[2{x}4, 4]", m), ArrayType.parse("[4, 2{y}4]", m))
    >>> r.summary(), r.program
    ('dtensor-greedy: valid', ('mesh dim 1: R -> S(1)', 'mesh dim 0: S(0) -> R'))
    >>> r.plan.collectives
    (DynSlice(dim=1, axes=('y',)), AllGather(dim=0, axes=('x',)))
    >>> dtensor_plan(Mesh.parse("x=2*2"), ArrayType.parse("[1{x}4]", "x=2*2"), ArrayType.parse("[4]", "x=2*2")).summary()
    'dtensor-greedy: unsupported (DTensor mesh dimensions are whole axes; the mesh splits one)'
    """
    from ..torch.dtensor import describe_transform
    name = "dtensor-mincost" if min_cost else "dtensor-greedy"
    if len(mesh.parts) != len(mesh.axes):
        return PlannerResult(name, "unsupported", "DTensor mesh dimensions are whole axes; the mesh splits one")
    try:
        infos, graph = dtensor_transforms(mesh, src, dst, min_cost)
    except Exception as e:  # the planner refused
        return PlannerResult(name, "unsupported", f"DTensor's planner refused: {type(e).__name__}: {e}")
    extra = {"graph_planner": graph, "transforms": [describe_transform(i) for i in infos]}
    if not min_cost and graph:
        extra["note"] = "non-default shard order: torch always plans it with the graph search"
    n = mesh.num_devices
    G = global_values(src.global_shape)
    xs = local_arrays(src, G)
    events: list[Event] = []
    peak = src.size
    received_total, n_coll = 0, 0
    for info in infos:
        step = replay(mesh, info, xs)
        if step is None:
            continue
        kind, new, received = step
        if kind == "unsupported":
            return PlannerResult(name, "unsupported", f"transform {describe_transform(info)} is not modelled",
                                 program=tuple(extra["transforms"]), extra=extra)
        if kind != "local":
            n_coll += 1
        received_total += int(received.max())
        xs = new
        peak = max(peak, max(x.size for x in xs))
        events.append(Event(kind, held_sets(xs), None, describe_transform(info)))
    return judge(name, mesh, src, dst, events, xs, program=tuple(extra["transforms"]), n_collectives=n_coll,
                 peak_elements=peak, received_elements=received_total, extra=extra)
