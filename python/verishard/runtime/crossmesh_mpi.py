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

import hashlib
import json
import math

import numpy as np

from .. import core, dtypes
from ..crossmesh import CrossMeshPlan
from ..errors import DtypeError, LimitError, ShardingError
from ..limits import MAX_ELEMENTS, MAX_ROUND_CUTS

__all__ = ["reshard", "rounds"]

DEFAULT_BUDGET = 64 << 20
DEFAULT_TIMEOUT = 60.0  # seconds every rank has to reach the agreement


def rounds(plan: CrossMeshPlan, itemsize: int, budget: int = DEFAULT_BUDGET):
    """The rounds: lists of ``(sender, receiver, target index, global box)``,
    from the verified builder (``Rounds.xrounds``, theorem
    ``Roundsproof.xrounds_correct``; ``Balanceproof.xrounds_bal_correct`` for a
    plan with dealt senders): per round every rank sends at most
    ``budget`` bytes and receives at most ``budget`` bytes, or moves a single
    cut (a slice of its piece larger than the budget); every element a target
    does not hold arrives in exactly one cut, inside a piece of its schedule."""
    # (the core takes budgets up to 2**50 elements; rounds within a smaller budget keep the larger)
    per_round = min(max(1, budget // itemsize), MAX_ELEMENTS)
    cuts, moved, pieces = _cuts(plan, per_round)
    if pieces > MAX_ROUND_CUTS:  # no budget helps: every moved piece is at least one cut
        raise LimitError(f"the layouts {plan.src} on {len(plan.src_ranks)} ranks -> {plan.dst} on "
                         f"{len(plan.dst_ranks)} ranks split this transfer into {pieces} pieces that move (each "
                         f"a target block's part of one source block); at most {MAX_ROUND_CUTS} "
                         "(verishard.limits.MAX_ROUND_CUTS) and no budget lowers the piece count: fewer pieces "
                         "need target blocks that meet fewer source blocks (the target sharded along the "
                         "source's sharded dimension, or the source sharded over fewer ranks)")
    if cuts > MAX_ROUND_CUTS:  # refused before the core packs them (each cut is one message)
        need = itemsize * -(-moved // MAX_ROUND_CUTS)
        raise LimitError(f"a round budget of {budget} bytes cuts this transfer into {cuts} slices; at most "
                         f"{MAX_ROUND_CUTS} (verishard.limits.MAX_ROUND_CUTS): give a budget of at least "
                         f"{need} bytes")
    rs = core.xrounds(plan.src, plan.src_ranks, plan.dst, plan.dst_ranks, per_round, plan.start)
    if rs is None:  # a CrossMeshPlan comes from the same builder: never refused
        raise ShardingError(f"the verified core refuses the cross-mesh problem {plan.src} -> {plan.dst}")
    return [[(c.src, c.dst, c.target, c.box) for c in rd] for rd in rs]


def _cuts(plan: CrossMeshPlan, per_round: int) -> tuple[int, int, int]:
    """How many cuts ``Rounds.xrounds`` makes of the pieces that move (each
    piece larger than ``per_round`` elements cut along its first dimension
    of more than one index, into slices of whole rows), the elements
    moved and the pieces that move."""
    cuts = moved = moving = 0
    for j, pieces in enumerate(plan.pieces):
        for p in pieces:
            if p.src == plan.dst_ranks[j]:
                continue  # held already: a local copy
            lengths = [l for _, l in p.box]
            vol = math.prod(lengths)
            moved += vol
            moving += 1
            if vol <= per_round:
                cuts += 1
                continue
            d = next(k for k, l in enumerate(lengths) if l > 1)
            row = math.prod(lengths[d + 1:])
            cuts += -(-lengths[d] // max(1, per_round // row))
    return cuts, moved, moving


def _slices(box, starts):
    return tuple(slice(s - o, s - o + l) for (s, l), o in zip(box, starts))


def _fingerprint(plan: CrossMeshPlan) -> str:
    obj = [str(plan.src.mesh), str(plan.src), list(plan.src_ranks), str(plan.dst.mesh), str(plan.dst),
           list(plan.dst_ranks)]
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()[:16]


def _local_check(comm, plan: CrossMeshPlan, local, dtype, budget) -> tuple[dict, np.dtype | None]:
    """This rank's validation record (problems found, and what the ranks must
    agree on: plan, dtype, budget) and the dtype it moves."""
    me, errors = comm.Get_rank(), []
    rec: dict = {"errors": errors}
    if not isinstance(plan, CrossMeshPlan):
        errors.append(f"the plan is a {type(plan).__name__}, not a CrossMeshPlan")
        return rec, None
    rec["plan"] = _fingerprint(plan)
    desc = (f"{plan.src} on {plan.src.mesh} ranks {_span(plan.src_ranks)} -> {plan.dst} on {plan.dst.mesh} "
            f"ranks {_span(plan.dst_ranks)}")
    rec["desc"] = desc if len(desc) <= 300 else desc[:300] + "..."
    rec["budget"] = repr(budget)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        errors.append(f"budget {budget!r} is not a positive number of bytes")
    for r in plan.src_ranks + plan.dst_ranks:
        if r >= comm.Get_size():
            errors.append(f"rank {r} of the plan is not in the communicator (size {comm.Get_size()})")
            break
    i, j = plan.src_index(me), plan.dst_index(me)
    try:   # a name of verishard.dtypes (bfloat16, float8: ml_dtypes) or anything numpy reads
        dtype = None if dtype is None else dtypes.numpy_dtype(dtype) if isinstance(dtype, str) and \
            dtype in dtypes.NAMES else np.dtype(dtype)
    except (TypeError, DtypeError) as e:
        errors.append(f"dtype {dtype!r} is not a numpy dtype ({e})")
        dtype = None
    if i is not None:
        if not isinstance(local, np.ndarray):
            errors.append(f"a source, and its local block is a {type(local).__name__}, not a numpy array")
        else:
            valid = plan.src.valid_shape(i)
            if tuple(local.shape) != tuple(valid):   # larger too: a whole array would be read as a block
                errors.append(f"its local block has shape {tuple(local.shape)}, the source layout gives it the "
                              f"block shape {tuple(valid)}: pass its block (CrossMeshPlan.src_slices()), not the "
                              "whole array")
            if dtype is not None and dtype != local.dtype:
                errors.append(f"local block of dtype {local.dtype}, but dtype={dtype} was passed")
            dtype = local.dtype
    elif j is not None and dtype is None:
        errors.append("only a target: pass dtype=")
    if dtype is not None:
        if dtype.hasobject or dtype.itemsize == 0:
            errors.append(f"dtype {dtype} cannot be sent as bytes")
        if i is not None or j is not None:  # ranks that neither send nor receive move no dtype
            # numpy's text and name: ml_dtypes' float8 types share one text ("<V1")
            rec["dtype"], rec["dtype_name"] = f"{dtype.str} {dtype.name}", str(dtype)
    return rec, dtype


def _span(ranks) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if list(ranks) == list(range(ranks[0], ranks[-1] + 1)) else \
        ",".join(map(str, ranks))


def reshard(comm, plan: CrossMeshPlan, local: np.ndarray | None, *, dtype=None,
            budget: int = DEFAULT_BUDGET, timeout: float | None = DEFAULT_TIMEOUT) -> np.ndarray | None:
    """Run ``plan`` on the world communicator ``comm``: returns this rank's
    target block (None when it is not a target). ``dtype`` is needed on a
    rank that is a target but not a source (every source's dtype must be it).

    Before any data moves, every rank checks its part (a source's block has
    exactly its layout's shape) and the ranks agree
    (:func:`verishard.runtime.mpi.agree`, within ``timeout`` seconds: a
    number greater than 0, or None to wait forever) on
    the plan (types, meshes and both rank lists, in order), the dtype and
    the budget: any problem or disagreement raises the same
    :class:`~verishard.runtime.mpi.RedistributionRefused` on every rank, and
    a rank that does not arrive is named as the others abort the job. Each
    message received is checked against the size its cut should have."""
    from .mpi import RedistributionRefused, _abort, agree
    from mpi4py import MPI
    me = comm.Get_rank()
    try:
        rec, dtype = _local_check(comm, plan, local, dtype, budget)
    except Exception as e:  # never skip the agreement: the other ranks are waiting in it
        rec, dtype = {"errors": [f"validation failed: {type(e).__name__}: {e}"]}, None
    agree(comm, rec, timeout, "reshard")
    i, j = plan.src_index(me), plan.dst_index(me)
    if i is None and j is None:
        return None
    if dtype is None:  # agreed above: a rank with no dtype neither sends nor receives
        raise RedistributionRefused(f"rank {me}: no dtype")  # pragma: no cover
    out = np.empty(plan.dst.valid_shape(j), dtype=dtype) if j is not None else None
    if j is not None:  # what this rank already holds: a local copy
        for p in plan.pieces[j]:
            if p.src == me:
                out[plan.dst_local(j, p)] = local[plan.src_local(p)]
    src_starts = plan.src.block_starts(i) if i is not None else None
    dst_starts = plan.dst.block_starts(j) if j is not None else None
    for n, cuts in enumerate(rounds(plan, dtype.itemsize, budget)):
        reqs, recvs, sends = [], [], []
        for a, b, _, box in cuts:
            if b == me:
                buf = np.empty(tuple(l for _, l in box), dtype=dtype)
                reqs.append(comm.Irecv([buf, MPI.BYTE], source=a, tag=7))
                recvs.append((buf, box, a))
        for a, b, _, box in cuts:
            if a == me:
                buf = np.ascontiguousarray(local[_slices(box, src_starts)])
                reqs.append(comm.Isend([buf, MPI.BYTE], dest=b, tag=7))
                sends.append(buf)
        if reqs:
            statuses = [MPI.Status() for _ in reqs]
            MPI.Request.Waitall(reqs, statuses)
            for (buf, box, a), st in zip(recvs, statuses):
                if st.Get_count(MPI.BYTE) != buf.nbytes:  # the agreement makes this impossible; never write it
                    _abort(comm, f"verishard.crossmesh_mpi: round {n}: received {st.Get_count(MPI.BYTE)} B from "
                                 f"rank {a}, the cut {box} has {buf.nbytes} B; aborting the job")
        for buf, box, _ in recvs:
            out[_slices(box, dst_starts)] = buf
        del recvs, sends
    return out
