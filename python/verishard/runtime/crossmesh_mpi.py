"""Cross-mesh redistribution over MPI: one world communicator, the verified
schedule (``verishard.crossmesh``) executed point to point with
``Isend``/``Irecv`` in rounds bounded by a byte budget.

Every rank of the world calls :func:`reshard` with the same plan; a source
rank passes its local block, a target rank gets its block back, a rank that is
both does both (the part it already holds is a local copy), and a rank that is
neither returns None at once. The rounds come from the verified core
(``Rounds.xrounds``, ``Roundsproof.xrounds_correct``): pieces larger than the
budget are cut along their first dimension with more than one index, and the
cuts are packed first fit into rounds in which each rank sends at most
``budget`` bytes and receives at most ``budget`` bytes, or moves a single cut
(a slice larger than the budget). All ranks compute the same rounds from the
same plan, and messages between a pair are matched in order (MPI's
non-overtaking rule), so no tags need agreeing.

Memory per rank: its source block, its target block, and at most ``budget``
bytes of send buffers and ``budget`` bytes of receive buffers at a time.

    from mpi4py import MPI
    from verishard.crossmesh import crossmesh_plan
    from verishard.runtime.crossmesh_mpi import reshard
    plan = crossmesh_plan("[4{x}8, 6{y}12]", "[3{u}8, 6{v}12]", src_mesh="x=2,y=2", dst_mesh="u=3,v=2")
    out = reshard(MPI.COMM_WORLD, plan, local if MPI.COMM_WORLD.rank < 4 else None)
"""

from __future__ import annotations

import numpy as np

from .. import core
from ..crossmesh import CrossMeshPlan
from ..errors import ShardingError
from ..limits import MAX_ELEMENTS

__all__ = ["reshard", "rounds"]

DEFAULT_BUDGET = 64 << 20


def rounds(plan: CrossMeshPlan, itemsize: int, budget: int = DEFAULT_BUDGET):
    """The rounds: lists of ``(sender, receiver, target index, global box)``,
    from the verified builder (``Rounds.xrounds``, theorem
    ``Roundsproof.xrounds_correct``): per round every rank sends at most
    ``budget`` bytes and receives at most ``budget`` bytes, or moves a single
    cut (a slice of its piece larger than the budget); every element a target
    does not hold arrives in exactly one cut, inside a piece of its schedule."""
    # (the core takes budgets up to 2**50 elements; rounds within a smaller budget keep the larger)
    per_round = min(max(1, budget // itemsize), MAX_ELEMENTS)
    rs = core.xrounds(plan.src, plan.src_ranks, plan.dst, plan.dst_ranks, per_round)
    if rs is None:  # a CrossMeshPlan comes from the same builder: never refused
        raise ShardingError(f"the verified core refuses the cross-mesh problem {plan.src} -> {plan.dst}")
    return [[(c.src, c.dst, c.target, c.box) for c in rd] for rd in rs]


def _slices(box, starts):
    return tuple(slice(s - o, s - o + l) for (s, l), o in zip(box, starts))


def reshard(comm, plan: CrossMeshPlan, local: np.ndarray | None, *, dtype=None,
            budget: int = DEFAULT_BUDGET) -> np.ndarray | None:
    """Run ``plan`` on the world communicator ``comm``: returns this rank's
    target block (None when it is not a target). ``dtype`` is needed on a
    rank that is a target but not a source (every source's dtype must be it)."""
    from mpi4py import MPI
    me = comm.Get_rank()
    for r in plan.src_ranks + plan.dst_ranks:
        if r >= comm.Get_size():
            raise ShardingError(f"rank {r} of the plan is not in the communicator (size {comm.Get_size()})")
    i, j = plan.src_index(me), plan.dst_index(me)
    if i is not None:
        if local is None:
            raise ShardingError(f"rank {me} is a source and has no local block")
        local = np.asarray(local)
        valid = plan.src.valid_shape(i)
        if local.ndim != len(valid) or any(a < v for a, v in zip(local.shape, valid)):
            raise ShardingError(f"rank {me}: local block of shape {local.shape}, expected {valid}")
        if dtype is not None and np.dtype(dtype) != local.dtype:
            raise ShardingError(f"rank {me}: local block of dtype {local.dtype}, expected {np.dtype(dtype)}")
        dtype = local.dtype
    if dtype is None:
        if j is not None:
            raise ShardingError(f"rank {me} is only a target: pass dtype=")
        return None
    dtype = np.dtype(dtype)
    out = np.empty(plan.dst.valid_shape(j), dtype=dtype) if j is not None else None
    if j is not None:  # what this rank already holds: a local copy
        for p in plan.pieces[j]:
            if p.src == me:
                out[plan.dst_local(j, p)] = local[plan.src_local(p)]
    if i is None and j is None:
        return None
    src_starts = plan.src.block_starts(i) if i is not None else None
    dst_starts = plan.dst.block_starts(j) if j is not None else None
    for cuts in rounds(plan, dtype.itemsize, budget):
        reqs, recvs, sends = [], [], []
        for a, b, _, box in cuts:
            if b == me:
                buf = np.empty(tuple(l for _, l in box), dtype=dtype)
                reqs.append(comm.Irecv([buf, MPI.BYTE], source=a, tag=7))
                recvs.append((buf, box))
        for a, b, _, box in cuts:
            if a == me:
                buf = np.ascontiguousarray(local[_slices(box, src_starts)])
                reqs.append(comm.Isend([buf, MPI.BYTE], dest=b, tag=7))
                sends.append(buf)
        if reqs:
            MPI.Request.Waitall(reqs)
        for buf, box in recvs:
            out[_slices(box, dst_starts)] = buf
        del recvs, sends
    return out
