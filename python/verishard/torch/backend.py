"""The torch.distributed backend: the collectives of
:mod:`verishard.runtime.backend` on a DTensor ``DeviceMesh``'s ranks, driven by
the shared executor (:func:`verishard.runtime.backend.execute`).

One process per device, as ``torchrun`` or ``torch.multiprocessing`` start
them; gloo for CPU tensors, NCCL for CUDA tensors (the same code: tensors stay
on the device of the input). Rank ``r`` of the plan (row-major over the mesh
coordinates, ``docs/model.md`` section 1) is the process at position ``r`` of
``device_mesh.mesh.flatten()``.

- ``AllGather``: ``all_gather_single`` (``all_gather_into_tensor`` before
  torch 2.13) over the group's process group, in rounds over dimension 0
  whose received blocks are written into the output in order of the
  verified group index (:func:`row_chunks` on what a round receives); with
  one round along dimension 0, straight into the output.
- ``AllToAll``: ``all_to_all_single``: the pieces along the target dimension
  (piece ``j`` for the member with group index ``j``) are exchanged and land
  along the source dimension in order of the sender's group index, in rounds
  over dimension 0 so that the send and receive buffers stay small
  (:func:`row_chunks`); with one round and the source dimension 0, straight
  into the output.
- ``AllPermute``: ``batch_isend_irecv`` over the plan's device map
  (``core.permute_sources``); ranks that keep their block send and receive
  nothing.
- ``DynSlice``: a local copy of the rank's piece.
- ``AllReduce``: ``all_reduce`` with ``ReduceOp.SUM``/``MAX``/``MIN``.
  ``ReduceScatter``: ``reduce_scatter_single`` (``reduce_scatter_tensor``
  before torch 2.13) on the pieces along the dimension, ordered by group rank
  (gloo in torch 2.13 has it for the three ops); where a process group refuses
  it, ``all_reduce`` then the rank's piece.
  ``ToPartial``: no communication.
- Uneven types (blocks of ``ceil(g / n)``): each step runs on padded buffers
  as the even collective between a local pad and cut (:meth:`TorchBackend.fit`,
  ``narrow`` / ``cat`` with zeros; the shared executor's ``run_step``);
  :func:`run_chunked` takes and returns ``torch.chunk``-style shards (the
  valid part only, as DTensor keeps them).

Process groups (:class:`MeshGroups`): one per set of mesh parts a plan's
collectives run over, created with ``dist.new_group`` with its members listed
in the order of the verified group index (``AxisGroup.members``) and cached
per ``DeviceMesh``; a group over one whole mesh dimension is the DeviceMesh's
own. On a mesh over some ranks of the world (a ``tp`` or ``dp`` sub-mesh),
whose other ranks do not call, each member makes only its own group, among
that group's members (``use_local_synchronization``, one per rank set).
Every group's rank order is read back from the process group and compared
with the verified group index; where they differ (a backend that sorts the
ranks), the backend reorders the blocks by that table.

Validation (:func:`agree`): before any data moves, every rank writes its
record (a fingerprint of what it will run: mesh and its rank layout, types,
collectives, dtype, the agreement policy; and the problems it found) into
the default group's key-value store under the agreement's number, waits for
the other ranks' records under a deadline (:func:`deadline`: 60 s unless
set) and reads them. The outcome is settled once in the store (the first
rank to write it decides, ``compare_set``), so every rank raises or returns
alike: if the ranks disagree or any rank found a problem, the same
:class:`RedistributionRefused`, naming every failing rank and the field
they differ on (the MPI backend's message, :mod:`verishard.runtime.mpi`);
if a rank does not arrive, :class:`RanksMissing` naming it. Rank 0, the
store's host, leaves a refusal only once every rank that arrived has read
it. A rank waiting in a collective on CPU reads the store every
:data:`POLL_S` and raises a :class:`RanksMissing` the others settled
naming it (:func:`_finish`).

Point to point (:func:`run_rounds`): cross-mesh schedules and transfers run
in rounds of ``batch_isend_irecv`` over the default group, round k+1 posted
before round k is waited for (at most two rounds' buffers alive;
:func:`counting_rounds` counts them).

The DTensor front end is :func:`verishard.torch.redistribute`.

Importing this module imports torch; it starts no process group.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .. import dtypes
from ..collectives import AllPermute, Exchange
from ..errors import VerishardError
from ..limits import check_seconds
from ..plan import Plan, box_text, pieces_table, ranks_text
from ..runtime.backend import AxisGroup, Backend, RedistributionError, RuntimeCheckError, execute, validate_plan
from ..runtime.agreement import agreement_verdict as _verdict, rank_list as _ranks

__all__ = ["free_port", "TorchBackend", "FuncolBackend", "tracing", "real_tensors", "MeshGroups", "mesh_groups",
           "run_plan", "run_chunked", "fit_to", "agree",
           "set_deadline", "deadline", "DEADLINE_S", "POLL_S", "abandoned", "RanksMissing", "fingerprint", "world",
           "RedistributionRefused", "NotSupportedYet", "row_chunks", "blocks_view", "ROUND_BYTES",
           "run_rounds", "counting_rounds", "RoundTraffic"]

# torch 2.13 renamed all_gather_into_tensor (now deprecated) to all_gather_single.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
# ... and reduce_scatter_tensor to reduce_scatter_single.
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class RedistributionRefused(RedistributionError, ValueError):
    """Raised on every rank when any rank's input or plan is bad, or the ranks
    disagree on the plan; no data has moved.

    >>> issubclass(RedistributionRefused, ValueError)
    True
    """


class NotSupportedYet(RedistributionRefused, NotImplementedError):
    """Raised on every rank when every problem found is a feature the verified
    core does not type yet (uneven layouts DTensor splits differently from
    verishard's blocks, Partial with shapes that do not divide, Partial
    reductions other than sum/max/min).

    >>> issubclass(NotSupportedYet, NotImplementedError), issubclass(NotSupportedYet, RedistributionRefused)
    (True, True)
    """


# ---------------------------------------------------------------------------
# layout helpers (pure tensor code, no communication)

# Temporary buffers: an all-to-all and an all-gather run in rounds over
# dimension 0 so that a round's send and receive buffers stay below
# max(size / 8, ROUND_BYTES) (size: the all-to-all's input, the gather's
# output); the output is written in place.
ROUND_BYTES = 1 << 20
MAX_ROUNDS = 8


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for ``MASTER_PORT``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def row_chunks(rows: int, nbytes: int) -> list[tuple[int, int]]:
    """The rounds ``[a, b)`` over ``rows`` for a local array of ``nbytes``:
    one round up to ``ROUND_BYTES``, at most ``MAX_ROUNDS``.

    >>> row_chunks(4, 1 << 20)
    [(0, 4)]
    >>> row_chunks(10, 64 << 20)
    [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]
    """
    budget = max(nbytes // MAX_ROUNDS, ROUND_BYTES, 1)
    r = max(1, min(rows, -(-nbytes // budget)))
    step = -(-rows // r)
    return [(a, min(rows, a + step)) for a in range(0, rows, step)]


def blocks_view(out: torch.Tensor, n: int, dim: int) -> torch.Tensor:
    """``out`` (``n`` blocks concatenated along ``dim``) as a view of shape
    ``(n, *block)``: ``[k]`` is block ``k``.

    >>> blocks_view(torch.arange(6).reshape(1, 6), 3, 1).tolist()
    [[[0, 1]], [[2, 3]], [[4, 5]]]
    """
    return out.unflatten(dim, (n, out.shape[dim] // n)).movedim(dim, 0)


# ---------------------------------------------------------------------------
# process groups


@dataclass(frozen=True)
class _Group:
    """This rank's process group over some mesh parts, with its order table."""

    pg: Any
    size: int
    rank_of_index: torch.Tensor | None   # group rank of the member with verified index k (None: identity)
    index_of_rank: torch.Tensor | None   # verified index of the member with group rank j (None: identity)


def _identity_or(perm: list[int]) -> torch.Tensor | None:
    return None if perm == list(range(len(perm))) else torch.tensor(perm, dtype=torch.int64)


def _new_group(ranks: list[int]):
    # The members in the order given (group rank = position); a backend that
    # cannot keep it (torchcomms) sorts them, and the order table absorbs that.
    try:
        return dist.new_group(ranks, sort_ranks=False)
    except (TypeError, NotImplementedError):
        return dist.new_group(ranks)


_LOCAL_GROUPS: dict[Any, Any] = {}   # (default group, sorted world ranks) -> process group made among its members


def _local_group(ranks: list[int]):
    """A process group over ``ranks`` made by its members only
    (``use_local_synchronization``: the sub-meshes of a 2-D or 3-D model, whose
    other ranks do not call). One per rank set and default group: torch names
    such groups by their ranks, so a set is made once (the order table of
    :meth:`MeshGroups.group` absorbs a different member order)."""
    key = (world(), tuple(sorted(ranks)))
    pg = _LOCAL_GROUPS.get(key)
    if pg is None:
        if len(_LOCAL_GROUPS) > 256:  # groups of default groups destroyed since
            for k in [k for k in _LOCAL_GROUPS if k[0] is not key[0]]:
                del _LOCAL_GROUPS[k]
        try:
            pg = dist.new_group(ranks, use_local_synchronization=True, sort_ranks=False)
        except TypeError:
            pg = dist.new_group(ranks, use_local_synchronization=True)
        _LOCAL_GROUPS[key] = pg
    return pg


class MeshGroups:
    """The process groups of one ``DeviceMesh`` for the plans run on it.

    ``global_ranks[r]`` is the process of plan rank ``r``; ``rank`` is this
    process's plan rank. :meth:`ensure` creates (collectively, on every rank
    in the same order) the groups a plan needs; :meth:`group` returns one.
    """

    def __init__(self, device_mesh: Any):
        self.device_mesh = device_mesh
        self.global_ranks = tuple(int(r) for r in device_mesh.mesh.flatten().tolist())
        self.plan_rank = {g: r for r, g in enumerate(self.global_ranks)}
        me = dist.get_rank()
        if me not in self.plan_rank:
            raise RedistributionRefused(f"rank {me} is not in the DeviceMesh {device_mesh}")
        self.rank = self.plan_rank[me]
        self.dim_names = tuple(device_mesh.mesh_dim_names or ())
        self.groups: dict[tuple, _Group] = {}
        self.device = _device_of(device_mesh)

    def ensure(self, plan: Plan) -> None:
        """Create every group ``plan`` runs a collective over (collective on
        first use: every rank must call it with the same plan)."""
        for c in plan.collectives:
            if isinstance(c, Exchange):   # one all-to-all over the whole mesh
                self.group(AxisGroup.of(plan.mesh, tuple(range(len(plan.mesh.part_sizes)))))
            elif not isinstance(c, AllPermute):
                g = AxisGroup.of(plan.mesh, c.parts(plan.mesh))
                if g.size > 1:
                    self.group(g)

    def _whole_dim(self, g: AxisGroup) -> int | None:
        # The DeviceMesh dimension whose parts are exactly g's, if any.
        for i, (name, _) in enumerate(g.mesh.axes):
            if g.mesh.resolve(name) == g.parts and i < self.device_mesh.ndim:
                return i
        return None

    def group(self, g: AxisGroup) -> _Group:
        key = (g.mesh, g.parts)
        out = self.groups.get(key)
        if out is not None:
            return out
        with real_tensors():   # made once, used by every later call: never a traced value
            return self._make(key, g)

    def _make(self, key: tuple, g: AxisGroup) -> _Group:
        if tuple(int(s) for s in self.device_mesh.mesh.shape) != g.mesh.axis_sizes:
            raise RuntimeCheckError(f"DeviceMesh of shape {tuple(self.device_mesh.mesh.shape)} "
                                    f"runs a plan over {g.mesh}")
        members = g.members
        mine = int(g.key[self.rank])
        dim = self._whole_dim(g)
        if dim is not None:
            pg = self.device_mesh.get_group(dim)
        elif len(self.global_ranks) != dist.get_world_size():
            # A sub-mesh: the ranks outside it do not call, so each member
            # makes only its own group, synchronised among that group's members.
            pg = _local_group([self.global_ranks[int(r)] for r in members[mine]])
        else:
            pg = None
            for k, row in enumerate(members):
                made = _new_group([self.global_ranks[int(r)] for r in row])
                if k == mine:
                    pg = made
        # Read the group's rank order back and compare it with the verified index.
        order = [self.plan_rank[int(q)] for q in dist.get_process_group_ranks(pg)]
        if sorted(order) != sorted(int(r) for r in members[mine]):
            raise RuntimeCheckError(f"process group over {g.names}: members {order} (plan ranks), the verified "
                                    f"group has {sorted(int(r) for r in members[mine])}")
        index_of_rank = [int(g.index[r]) for r in order]
        rank_of_index = [0] * len(order)
        for j, k in enumerate(index_of_rank):
            rank_of_index[k] = j
        out = _Group(pg, g.size, _identity_or(rank_of_index), _identity_or(index_of_rank))
        if out.rank_of_index is not None:
            out = _Group(pg, g.size, out.rank_of_index.to(self.device), out.index_of_rank.to(self.device))
        self.groups[key] = out
        return out


def _device_of(device_mesh: Any) -> torch.device:
    kind = device_mesh.device_type
    if kind == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(kind)


_MESH_GROUPS: dict[Any, MeshGroups] = {}


def world() -> Any:
    """The default process group: caches are kept per default group, so that
    a process group destroyed and initialized again starts them afresh."""
    return dist.group.WORLD


def mesh_groups(device_mesh: Any) -> MeshGroups:
    """The cached :class:`MeshGroups` of ``device_mesh`` (equal meshes share
    one, within one default process group)."""
    key = (world(), device_mesh)
    mg = _MESH_GROUPS.get(key)
    if mg is None:
        if len(_MESH_GROUPS) > 64:  # meshes of process groups destroyed since
            live = world()
            for k in [k for k in _MESH_GROUPS if k[0] is not live]:
                del _MESH_GROUPS[k]
        mg = _MESH_GROUPS[key] = MeshGroups(device_mesh)
    return mg


# ---------------------------------------------------------------------------
# the backend


_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
# Process groups whose reduce_scatter_single refused (see TorchBackend.reduce_scatter).
_NO_REDUCE_SCATTER: set[Any] = set()


def _identity(dtype: torch.dtype, op: str):
    """The unit of reduction ``op`` for ``dtype``: 0, the lowest or the highest value
    (:func:`verishard.dtypes.reduction_unit`: the finite extremes of the float8 types without infinities).

    >>> _identity(torch.int32, "max"), _identity(torch.bfloat16, "min"), _identity(torch.float8_e4m3fn, "max")
    (-2147483648, inf, -448.0)
    """
    return dtypes.reduction_unit(dtypes.name_of(dtype), op)


# Dtypes gloo and NCCL both move in their collectives: gloo lacks int16, uint16-64 and the float8 types
# (all_gather, all_to_all: "Invalid scalar type"). The others move as their bytes (:func:`as_moved`),
# which is bit-exact and costs no copy.
_MOVED_AS_IS = frozenset({torch.bool, torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16,
                          torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128})
# What gloo reduces (all_reduce, reduce_scatter): sum, max and min of these; complex: sum only.
_GLOO_REDUCES = frozenset({torch.bool, torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16,
                           torch.bfloat16, torch.float32, torch.float64})


def as_moved(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a tensor every backend's collectives move: ``x`` itself, or for
    the dtypes some lack its bytes, a view with a trailing dimension of
    ``itemsize`` uint8 (the leading dimensions, which the collectives cut,
    unchanged). :func:`moved_back` restores the dtype.

    >>> y = as_moved(torch.zeros(2, 3, dtype=torch.float8_e4m3fn)); y.shape, y.dtype
    (torch.Size([2, 3, 1]), torch.uint8)
    """
    if x.dtype in _MOVED_AS_IS:
        return x
    return x.unsqueeze(-1).view(torch.uint8)   # a view of x, whatever its strides (writes land in x)


def moved_back(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The inverse of :func:`as_moved` (a view)."""
    return y if y.dtype == dtype else y.view(dtype).squeeze(-1)


def reduction_problem(dtype: torch.dtype, op: str, reduced: bool, device_type: str) -> str | None:
    """Why ``dtype`` cannot be pending ``op`` (no unit: float8_e8m0fnu has no
    zero) or, where a pending ``op`` is ``reduced`` by a collective, why the
    default group's backend for ``device_type`` cannot run it (gloo, the
    CPU backend: int16, uint16-64 and the float8 types, and the max or min of
    complex numbers; DTensor's own redistribution fails there too); None when
    it can. No reduction is run in a wider type: DTensor does not. Local: no
    process group is created or joined."""
    try:
        _identity(dtype, op)
    except VerishardError as e:
        return str(e)
    if not reduced:
        return None
    try:
        backend = str(dist.get_backend())
    except (RuntimeError, ValueError):
        return None
    gloo = backend == "gloo" or ("gloo" in backend and device_type == "cpu")
    if gloo and not (dtype in _GLOO_REDUCES or dtype in (torch.complex64, torch.complex128) and op == "sum"):
        return (f"a Partial({op}) of dtype {dtype}: the gloo backend does not reduce {dtype} by {op} (neither does "
                f"DTensor's redistribute on it); reduce it in a wider dtype (e.g. .to(torch.float32)) first")
    return None


class TorchBackend(Backend):
    """The collectives on ``torch.Tensor`` local arrays over the process
    groups of a :class:`MeshGroups` (see the module docstring)."""

    name = "torch"

    def __init__(self, groups: MeshGroups):
        self.groups = groups
        self.rank = groups.rank

    def all_gather(self, x: torch.Tensor, dim: int, group: AxisGroup) -> torch.Tensor:
        if x.dtype not in _MOVED_AS_IS:
            return moved_back(self.all_gather(as_moved(x), dim, group), x.dtype)
        g = self.groups.group(group)
        n = g.size
        x = x.contiguous()
        shape = list(x.shape)
        shape[dim] *= n
        out = x.new_empty(shape)
        if out.numel() == 0:   # (every member's block is empty too: one type)
            return out
        # rounds over dimension 0 sized by what a round receives (n pieces);
        # gloo gathers into a flat buffer of its own and copies it out, so a
        # gather straight into a large output would hold it twice
        chunks = row_chunks(x.shape[0], n * x.nbytes)
        if dim == 0 and g.rank_of_index is None and len(chunks) == 1:  # the blocks land in place
            _finish(_all_gather_single(out, x, group=g.pg, async_op=True), out)
            return out
        blocks = blocks_view(out, n, dim)  # blocks[k]: the block of group index k
        for a, b in chunks:
            part = x[a:b]
            buf = part.new_empty((n * part.shape[0],) + tuple(part.shape[1:]))
            _finish(_all_gather_single(buf, part, group=g.pg, async_op=True), buf)
            got = buf.unflatten(0, (n, part.shape[0]))  # in group-rank order
            if g.rank_of_index is not None:
                got = got.index_select(0, g.rank_of_index)
            blocks[:, a:b].copy_(got)
            del buf, got
        return out

    def dyn_slice(self, x: torch.Tensor, dim: int, group: AxisGroup) -> torch.Tensor:
        k = int(group.index[self.rank])
        length = x.shape[dim] // group.size
        return x.narrow(dim, k * length, length).clone(memory_format=torch.contiguous_format)

    def all_to_all(self, x: torch.Tensor, src_dim: int, dst_dim: int, group: AxisGroup) -> torch.Tensor:
        if x.dtype not in _MOVED_AS_IS:
            return moved_back(self.all_to_all(as_moved(x), src_dim, dst_dim, group), x.dtype)
        g = self.groups.group(group)
        n = g.size
        x = x.contiguous()
        shape = list(x.shape)
        shape[dst_dim] //= n
        shape[src_dim] *= n
        out = x.new_empty(shape)
        pieces = blocks_view(x, n, dst_dim)   # pieces[j]: what goes to group index j
        landed = blocks_view(out, n, src_dim)  # landed[k]: what comes from group index k
        chunks = row_chunks(pieces.shape[1], x.nbytes)
        whole = len(chunks) == 1
        for a, b in chunks:
            send = pieces[:, a:b]
            if g.index_of_rank is not None:
                send = send.index_select(0, g.index_of_rank)  # position j: the piece for group rank j
            send = send.contiguous()  # no copy when the pieces are slabs (dst_dim 0, one round)
            if whole and src_dim == 0 and g.rank_of_index is None:  # receive in place
                _finish(dist.all_to_all_single(out, send, group=g.pg, async_op=True), out)
                return out
            recv = torch.empty_like(send)
            _finish(dist.all_to_all_single(recv, send, group=g.pg, async_op=True), recv)
            del send
            if g.rank_of_index is not None:
                recv = recv.index_select(0, g.rank_of_index)
            landed[:, a:b].copy_(recv)
            del recv
        return out

    def all_reduce(self, x: torch.Tensor, group: AxisGroup, op: str) -> torch.Tensor:
        y = x.clone(memory_format=torch.contiguous_format)  # all_reduce works in place
        _finish(dist.all_reduce(y, op=_REDUCE_OPS[op], group=self.groups.group(group).pg, async_op=True), y)
        return y

    def reduce_scatter(self, x: torch.Tensor, dim: int, group: AxisGroup, op: str) -> torch.Tensor:
        g = self.groups.group(group)
        n = g.size
        if g.pg not in _NO_REDUCE_SCATTER:
            pieces = blocks_view(x, n, dim)  # pieces[k]: the piece of group index k
            if g.index_of_rank is not None:
                pieces = pieces.index_select(0, g.index_of_rank)  # position j: the piece for group rank j
            send = pieces.contiguous()  # no copy for dim 0 in index order
            out = x.new_empty(send.shape[1:])
            try:
                work = _reduce_scatter_single(out, send.flatten(0, 1), op=_REDUCE_OPS[op], group=g.pg,
                                              async_op=True)
            except (NotImplementedError, RuntimeError) as e:
                # A process group without reduce_scatter for this op or dtype
                # (gloo in older torch releases) refuses on every rank before sending
                # anything; any other error is real.
                if not any(w in str(e).lower() for w in ("support", "implement")):
                    raise
                _NO_REDUCE_SCATTER.add(g.pg)
            else:
                _finish(work, out)
                return out
        # Fallback: the whole reduction on every member, then its own piece
        # (twice the traffic of a reduce-scatter, same result).
        return self.dyn_slice(self.all_reduce(x, group, op), dim, group)

    def to_partial(self, x: torch.Tensor, group: AxisGroup, op: str) -> torch.Tensor:
        if int(group.index[self.rank]) == 0:
            return x
        return torch.full_like(x, _identity(x.dtype, op))

    def fit(self, x: torch.Tensor, dim: int, n: int) -> torch.Tensor:
        """``x`` cut to its first ``n`` positions along ``dim``, or extended
        to ``n`` with zeros (uneven types; any padding value is correct,
        ``Ucheckerproof.ucheck_correct``). No communication; out-of-place
        torch operations (``narrow``, ``cat``), so the result is a new
        contiguous tensor or a contiguous view of ``x``, never ``x`` changed.

        >>> b = TorchBackend.__new__(TorchBackend)
        >>> b.fit(torch.arange(6).reshape(2, 3), 1, 2).tolist(), b.fit(torch.tensor([1, 2]), 0, 4).tolist()
        ([[0, 1], [3, 4]], [1, 2, 0, 0])
        """
        have = x.shape[dim]
        if have >= n:
            return x.narrow(dim, 0, n).contiguous()
        shape = list(x.shape)
        shape[dim] = n - have
        return torch.cat([x, x.new_zeros(shape)], dim=dim)

    def all_permute(self, x: torch.Tensor, sources: np.ndarray) -> torch.Tensor:
        r = self.rank
        src = int(sources[r])
        if src == r:
            return x
        dest = int(np.flatnonzero(sources == r)[0])
        x = x.contiguous()
        out = torch.empty_like(x)
        ranks = self.groups.global_ranks
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, as_moved(x), ranks[dest]),
                                        dist.P2POp(dist.irecv, as_moved(out), ranks[src])])
        for w in works:   # point to point: gloo ends a send or receive whose wait times out
            w.wait()
        return out


    def exchange(self, x: torch.Tensor, schedule, out: torch.Tensor | None = None) -> torch.Tensor:
        """One ``all_to_all_single`` with split sizes over the whole mesh: the
        verified schedule's pieces for each receiver packed in its order,
        unpacked into this rank's block; what it holds is copied locally."""
        if x.dtype not in _MOVED_AS_IS:
            if out is None:
                out = (torch.zeros if schedule.padded else torch.empty)(schedule.out_shape, dtype=x.dtype,
                                                                        device=x.device)
            return moved_back(self.exchange(as_moved(x), schedule, as_moved(out)), x.dtype)
        mesh = schedule.src.mesh
        g = self.groups.group(AxisGroup.of(mesh, tuple(range(len(mesh.part_sizes)))))
        pg_rank = (lambda r: r) if g.rank_of_index is None else (lambda r: int(g.rank_of_index[r]))
        me, n = self.rank, len(schedule.pieces)
        x = x.contiguous()
        if out is None:
            out = (torch.zeros if schedule.padded else torch.empty)(schedule.out_shape, dtype=x.dtype, device=x.device)
        elif schedule.padded:
            out.zero_()
        sends: list[torch.Tensor | None] = [None] * n
        for j, a in schedule.sends[me]:   # one piece per receiver: a sender holds one block
            sends[pg_rank(j)] = x[a].reshape(-1)
        boxes: list[Any] = [None] * n
        for r, a, b in schedule.pieces[me]:
            if r == me:
                out[b] = x[a]
            else:
                boxes[pg_rank(r)] = b
        in_splits = [0 if v is None else v.numel() for v in sends]
        unit = int(np.prod(x.shape[len(schedule.out_shape):]))   # the bytes of an element moved as bytes, else 1
        out_splits = [0 if b is None else int(np.prod([s.stop - s.start for s in b])) * unit for b in boxes]
        send = torch.cat([v for v in sends if v is not None]) if any(in_splits) else x.new_empty(0)
        recv = self._all_to_all_splits(send, out_splits, in_splits, g.pg)
        pos = 0
        for b, k in zip(boxes, out_splits):
            if b is not None:
                out[b] = recv[pos:pos + k].reshape(out[b].shape)
                pos += k
        return out

    def _all_to_all_splits(self, send: torch.Tensor, out_splits: list[int], in_splits: list[int], pg: Any):
        recv = send.new_empty(sum(out_splits))
        _finish(dist.all_to_all_single(recv, send, out_splits, in_splits, group=pg, async_op=True), recv)
        return recv


class FuncolBackend(TorchBackend):
    """The collectives as torch's functional collectives
    (``torch.distributed._functional_collectives``: out of place, traceable):
    what :func:`run_plan` uses while ``torch.compile`` traces a
    redistribution, so that the compiled graph holds the plan's collectives.
    The same groups, order tables and block layout as :class:`TorchBackend`;
    an ``AllPermute`` is an all-to-all with split sizes over the whole mesh
    (every member takes part; one that keeps its block sends it to itself).
    ``mesh`` is the plan's mesh (its whole-mesh group)."""

    name = "torch-functional"

    def __init__(self, groups: MeshGroups, mesh: Any):
        super().__init__(groups)
        self.mesh = mesh

    @staticmethod
    def _in_index_order(got: torch.Tensor, g: _Group, n: int, dim: int) -> torch.Tensor:
        # got: n blocks along dimension 0 in group-rank order -> along ``dim`` in verified index order
        got = got.unflatten(0, (n, got.shape[0] // n))
        if g.rank_of_index is not None:
            got = got.index_select(0, g.rank_of_index)
        return got.movedim(0, dim).flatten(dim, dim + 1)

    @staticmethod
    def _by_group_rank(x: torch.Tensor, g: _Group, n: int, dim: int) -> torch.Tensor:
        # the n pieces of x along ``dim`` (piece k for verified index k) along dimension 0, piece j for group rank j
        pieces = blocks_view(x, n, dim)
        if g.index_of_rank is not None:
            pieces = pieces.index_select(0, g.index_of_rank)
        return pieces.contiguous().flatten(0, 1)

    def all_gather(self, x: torch.Tensor, dim: int, group: AxisGroup) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol
        g = self.groups.group(group)
        gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor   # renamed in torch 2.13
        return self._in_index_order(gather(x.contiguous(), 0, g.pg), g, g.size, dim)

    def all_to_all(self, x: torch.Tensor, src_dim: int, dst_dim: int, group: AxisGroup) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol
        g = self.groups.group(group)
        recv = funcol.all_to_all_single(self._by_group_rank(x, g, g.size, dst_dim), None, None, g.pg)
        return self._in_index_order(recv, g, g.size, src_dim)

    def all_reduce(self, x: torch.Tensor, group: AxisGroup, op: str) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol
        return funcol.all_reduce(x, op, self.groups.group(group).pg)

    def reduce_scatter(self, x: torch.Tensor, dim: int, group: AxisGroup, op: str) -> torch.Tensor:
        from torch.distributed import _functional_collectives as funcol
        g = self.groups.group(group)
        piece = list(x.shape)
        piece[dim] //= g.size
        scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor   # renamed in 2.13
        out = scatter(self._by_group_rank(x, g, g.size, dim), op, 0, g.pg)
        return out.reshape(piece)

    def all_permute(self, x: torch.Tensor, sources: np.ndarray) -> torch.Tensor:
        whole = self.groups.group(AxisGroup.of(self.mesh, tuple(range(len(self.mesh.part_sizes)))))
        pg_rank = (lambda r: r) if whole.rank_of_index is None else (lambda r: int(whole.rank_of_index[r]))
        r = self.rank
        dest = int(np.flatnonzero(sources == r)[0])
        in_splits, out_splits = [0] * whole.size, [0] * whole.size
        in_splits[pg_rank(dest)] = out_splits[pg_rank(int(sources[r]))] = x.numel()
        x = x.contiguous()
        return self._all_to_all_splits(x.reshape(-1), out_splits, in_splits, whole.pg).reshape(x.shape)

    def _all_to_all_splits(self, send: torch.Tensor, out_splits: list[int], in_splits: list[int], pg: Any):
        from torch.distributed import _functional_collectives as funcol
        return funcol.all_to_all_single(send, out_splits, in_splits, pg)


def tracing() -> bool:
    """Whether torch is tracing (``torch.compile``, ``make_fx``): the
    collectives must then be functional ones (:class:`FuncolBackend`)."""
    from torch.distributed._functional_collectives import _are_we_tracing
    return _are_we_tracing()


def real_tensors():
    """A context in which tensor operations run on real tensors even while
    torch.compile traces (its dispatch modes, fake tensors, functionalization
    and proxies, set aside): planning reads a DeviceMesh's
    rank tensor, and the process groups cache their order tables, which must
    not become fake tensors of one trace."""
    from torch._ops import _len_torch_dispatch_stack_pre_dispatch
    if not torch._C._len_torch_dispatch_stack() and not _len_torch_dispatch_stack_pre_dispatch():
        return contextlib.nullcontext()   # eager: nothing to set aside
    from torch.utils._python_dispatch import _disable_current_modes
    return _disable_current_modes()


def _backend(plan: Plan, groups: MeshGroups) -> TorchBackend:
    return FuncolBackend(groups, plan.mesh) if tracing() else TorchBackend(groups)


def run_plan(plan: Plan, x: torch.Tensor, groups: MeshGroups) -> torch.Tensor:
    """Run a validated ``plan`` on this rank's ``x`` (its ``plan.src`` block);
    collective over the mesh. Creates the process groups first (so that every
    rank has them before any data moves), then runs the shared executor and
    checks the result's shape against the verified type."""
    _require_usable()
    groups.ensure(plan)
    y = execute(plan, x, _backend(plan, groups))
    if tuple(y.shape) != plan.dst.local_shape:  # pragma: no cover - a backend bug
        raise RuntimeCheckError(f"result has shape {tuple(y.shape)}, the verified type {plan.dst} has "
                                f"local shape {plan.dst.local_shape}")
    return y


def fit_to(backend: Backend, x: Any, shape: tuple[int, ...]) -> Any:
    """``x`` cut or padded to ``shape`` along every dimension where its size
    differs (``backend.fit``, no communication); ``x`` itself when none does.

    >>> b = TorchBackend.__new__(TorchBackend)
    >>> fit_to(b, torch.ones(1, 3), (2, 2)).tolist()
    [[1.0, 1.0], [0.0, 0.0]]
    """
    for d, n in enumerate(shape):
        if x.shape[d] != n:
            x = backend.fit(x, d, n)
    return x


def run_chunked(plan: Plan, x: torch.Tensor, groups: MeshGroups) -> torch.Tensor:
    """Run ``plan`` on this rank's ``torch.chunk``-style shard ``x`` (shape
    ``plan.src.valid_shape(rank)``, which DTensor keeps for uneven layouts):
    pad it to the padded buffer ``plan.src.local_shape``, run the plan
    (:func:`run_plan`), and keep the valid part of the result,
    ``plan.dst.valid_shape(rank)`` (``Ucheckerproof.ucheck_correct_chunked``:
    padding never reaches a valid position). On even types this is
    :func:`run_plan` (valid and padded shapes are equal)."""
    rank = groups.rank
    want = plan.src.valid_shape(rank)
    if tuple(x.shape) != want:  # pragma: no cover - the front end checks the shape first
        raise RuntimeCheckError(f"rank {rank}'s shard has shape {tuple(x.shape)}, {plan.src} gives it {want}")
    backend = _backend(plan, groups)
    y = run_plan(plan, fit_to(backend, x, plan.src.local_shape), groups)
    return fit_to(backend, y, plan.dst.valid_shape(rank))


# ---------------------------------------------------------------------------
# agreement


def fingerprint(plan: Plan | None, extra: str = "") -> int:
    """A 60-bit fingerprint of a plan (mesh, types, collectives; None: "keep
    the local tensor") and ``extra`` (e.g. the dtype and the placements);
    never 0 (0 stands for "no plan, a problem").

    >>> from verishard import plan
    >>> p = plan("x=2", "[2{x}4]", "[4]")
    >>> fingerprint(p, "float32") == fingerprint(p, "float32") != fingerprint(p, "int64")
    True
    >>> fingerprint(None, "float32") != fingerprint(p, "float32")
    True
    """
    if plan is None:
        obj: dict[str, Any] = {"keep": True, "extra": extra}
    else:
        validate_plan(plan)
        obj = {"mesh": str(plan.mesh), "src": str(plan.src), "dst": str(plan.dst),
               "steps": [c.to_json() for c in plan.collectives], "extra": extra}
    h = int(hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:15], 16)
    return h or 1


# How long a rank waits for the others in :func:`agree` before it fails,
# naming the ranks that did not arrive: :func:`set_deadline`'s setting, else
# ``VERISHARD_DEADLINE_S`` in the environment (read and checked by each call
# that waits, never at import: a bad value fails that call, naming it), else
# this default.
DEADLINE_S = 60.0
_DEADLINE_SET: list[float | None] = [None]


def deadline() -> float:
    """The agreement deadline (seconds) of a call without ``deadline_s``:
    :func:`set_deadline`'s, else ``VERISHARD_DEADLINE_S``, else
    :data:`DEADLINE_S`. A value that is not a number greater than 0 (at most
    ``verishard.limits.MAX_SECONDS``) raises :class:`RedistributionRefused`
    naming it.

    >>> deadline() > 0
    True
    """
    if _DEADLINE_SET[0] is not None:
        return _DEADLINE_SET[0]
    text = os.environ.get("VERISHARD_DEADLINE_S")
    if text is None:
        return DEADLINE_S
    return check_seconds(text, "the agreement deadline VERISHARD_DEADLINE_S (in the environment)",
                         error=RedistributionRefused, text=True)


def set_deadline(seconds: float | None) -> float | None:
    """Set the agreement deadline of every later call (seconds: a number
    greater than 0, at most ``verishard.limits.MAX_SECONDS``; None: back to
    ``VERISHARD_DEADLINE_S`` or :data:`DEADLINE_S`); returns the previous
    setting (None: there was none).

    >>> old = set_deadline(5); set_deadline(old)
    5.0
    """
    value = None if seconds is None else check_seconds(seconds, "the agreement deadline (set_deadline)",
                                                        error=RedistributionRefused)
    old, _DEADLINE_SET[0] = _DEADLINE_SET[0], value
    return old


class RanksMissing(RedistributionRefused):
    """Raised on every rank that arrived when some rank did not reach the
    agreement within the deadline (it failed before it, does not call, or
    runs a cached plan the others are agreeing on); ``missing`` lists them.
    No data has moved.

    >>> RanksMissing("rank 1 did not arrive", missing=(1,)).missing
    (1,)
    """

    def __init__(self, message: str, missing: tuple[int, ...] = ()):
        super().__init__(message)
        self.missing = tuple(missing)


# How often (seconds) a rank waiting in a collective on CPU looks for a
# refusal the others settled without it (:func:`_finish`).
POLL_S = 1.0

_SEQ: dict[Any, dict] = {}   # default group -> {rank set: [its prefix store, the last agreement's number, acked]}
_ABANDONED: dict[Any, str] = {}   # default group -> why this rank left a collective unfinished


def _agreement_store(ranks: tuple[int, ...] | None) -> list:
    w = world()
    per_set = _SEQ.get(w)
    if per_set is None:
        _SEQ.clear()   # stores of process groups destroyed since
        _ABANDONED.clear()
        per_set = _SEQ[w] = {}
    entry = per_set.get(ranks)
    if entry is None:
        from torch.distributed.distributed_c10d import _get_default_store
        label = "all" if ranks is None else hashlib.sha256(repr(ranks).encode()).hexdigest()[:16]
        entry = per_set[ranks] = [dist.PrefixStore(f"verishard/agree/{label}/", _get_default_store()), 0, False]
    return entry


def _judge(records: list[dict], members: tuple[int, ...], fp: int) -> dict:
    """The outcome of an agreement every member arrived at: ``{"ok": True}``,
    or the refusal (its class name and message), the same from any rank's
    copy of the records. A record with a ``group`` (the world ranks its
    plan involves) must match the records of that group's ranks, which must
    name the same group; one without must match every member's."""
    at = {r: k for k, r in enumerate(members)}
    fps = [int(rec["fp"]) for rec in records]
    odd: set[int] = set()
    for r, rec in zip(members, records):
        for q in rec.get("group", members):
            k = at.get(q)
            if k is None or records[k].get("group") != rec.get("group") or fps[k] != fps[at[r]]:
                odd |= {r} | ({q} if k is not None else set())
    if not odd and not any(rec.get("errors") for rec in records):
        return {"ok": True}
    shown = [r for r, rec in zip(members, records) if r in odd or rec.get("errors")]
    by_rank: list[dict] = [{} for _ in range(max(members) + 1)]   # the message names world ranks
    for r, rec in zip(members, records):
        if r in shown:
            by_rank[r] = rec
    verdict = _verdict(by_rank)
    if verdict is None:  # fingerprints or groups differ while the records agree: report both
        verdict = ("redistribution refused before any data moved:\n  the ranks disagree on the plan "
                   f"(fingerprints {', '.join(f'{f:x}' for f in sorted(set(fps)))}; ranks involved: "
                   + "; ".join(f"rank {r}: {rec.get('group', 'all')}" for r, rec in zip(members, records)
                               if r in shown) + ")")
    with_errors = [rec for rec in records if rec.get("errors")]
    only_unsupported = bool(with_errors) and all(rec.get("unsupported") for rec in with_errors) \
        and len(set(fps)) == 1
    return {"error": "NotSupportedYet" if only_unsupported else "RedistributionRefused", "message": verdict,
            "arrived": list(members)}


def _missing(store, keys: list[str], members: tuple[int, ...], me: int, timeout: float) -> dict | None:
    """The outcome of an agreement some member did not reach in time (None: they all have now)."""
    missing = [r for r, k in zip(members, keys) if not store.check([k])]
    if not missing:
        return None
    n = len(members)
    return {"error": "RanksMissing", "missing": missing, "arrived": [r for r in members if r not in missing],
            "message": f"redistribution refused before any data moved: {_ranks(missing)} did not arrive within "
                       f"{timeout:g} s (rank {me} waited; {n - len(missing)} of {n} ranks arrived). A rank that "
                       "fails before redistribute, does not call it, or runs a plan it cached while the others "
                       "agree on theirs (cache_clear(), enable() or check_agreement on some ranks only) stops "
                       "every rank here; the deadline is verishard.torch.backend.set_deadline (or "
                       "VERISHARD_DEADLINE_S)"}


def _raise(outcome: dict) -> None:
    if outcome["error"] == "RanksMissing":
        raise RanksMissing(outcome["message"], tuple(outcome.get("missing", ())))
    raise (NotSupportedYet if outcome["error"] == "NotSupportedYet" else RedistributionRefused)(outcome["message"])


def agree(fp: int, record: dict, device: torch.device | str | None = None, *,
          deadline_s: float | None = None, ranks: tuple[int, ...] | None = None,
          group: tuple[int, ...] | None = None) -> None:
    """Collective over every process of the default group (or the world
    ranks ``ranks``): return when every rank has the same fingerprint ``fp``
    and no rank's ``record["errors"]`` is non-empty; else raise the same
    :class:`RedistributionRefused` (or :class:`NotSupportedYet` when every
    problem is of that kind) on every rank. A rank that does not arrive
    within ``deadline_s`` (default :func:`deadline`: 60 s unless set) fails
    every rank with :class:`RanksMissing` naming it.

    It runs over the default group's key-value store (the one
    ``init_process_group`` made), not a collective: each rank writes its
    record under this agreement's number, waits for the others' keys with the
    deadline, and reads them (``device`` is not used). ``group``: the world
    ranks this rank's plan involves, where ranks of the agreement run
    separate plans (sub-meshes): its fingerprint must then be that of every
    rank of its group, which must give the same group. The outcome is then
    settled once for all ranks: the first rank to write it into the store
    (an atomic ``compare_set``) decides, and every rank raises or returns by
    what is stored there, so a rank that arrives after another gave up gets
    that rank's :class:`RanksMissing`, not a plan of its own. On a refusal
    every rank that arrived marks that it read it, and rank 0, which hosts
    the store under ``init_process_group``'s rendezvous (``env://``,
    ``tcp://``, torchrun), waits (up to the deadline) until all of them have
    before it raises, so that it cannot leave while another is still reading. Agreements are numbered in
    call order per rank set, so the ranks of a set must make the same
    sequence of them (as they make the same sequence of collectives).

    ``record`` is the MPI backend's validation record: ``errors`` (strings),
    and where known ``plan`` (a fingerprint in hex), ``desc``, ``dtype`` and
    ``dtype_name``, and the fields of :data:`verishard.runtime.mpi.AGREED`
    (``mesh_ranks``, ``src_ranks``, ``dst_ranks``, ``check_agreement``)
    that are named when they differ; ``unsupported`` (bool): every error is
    a feature not supported yet.
    """
    timeout = deadline() if deadline_s is None else check_seconds(deadline_s, "deadline_s",
                                                                   error=RedistributionRefused)
    members = tuple(range(dist.get_world_size())) if ranks is None else tuple(ranks)
    me = dist.get_rank()
    entry = _agreement_store(ranks)
    entry[1] += 1
    store, seq, acked = entry[0], entry[1], entry[2]
    if _ABANDONED.get(world()):
        record = {**record, "errors": list(record.get("errors", ())) + [
            "it left a collective unfinished after an earlier refusal (RanksMissing): destroy the process group "
            "and initialize it again"]}
    keys = [f"{seq}/{r}" for r in members]
    settled_key = f"{seq}/outcome"
    until = time.monotonic() + timeout
    try:
        mine = {**record, "fp": int(fp)}
        if group is not None:
            mine["group"] = [int(r) for r in group]
        store.set(f"{seq}/{me}", json.dumps(mine))
        try:   # in one piece: each time-out of a store wait prints a warning of c10d's
            store.wait(keys, timedelta(seconds=max(until - time.monotonic(), 1e-3)))
            arrived = True
        except Exception:  # noqa: BLE001 - the store's timeout (DistStoreError, RuntimeError by release)
            arrived = False
        outcome = json.loads(store.get(settled_key)) if store.check([settled_key]) else None
        if outcome is None:
            proposal = None if arrived else _missing(store, keys, members, me, timeout)
            if proposal is None:   # every member arrived (the last ones, maybe, while this rank looked)
                proposal = _judge([json.loads(v) for v in store.multi_get(keys)], members, fp)
            outcome = json.loads(store.compare_set(settled_key, "", json.dumps(proposal, sort_keys=True)))
        if seq > 1:  # every rank has read the previous agreement's keys by now (it wrote this one after)
            store.delete_key(f"{seq - 1}/{me}")
            if acked:
                store.delete_key(f"{seq - 1}/read/{me}")
                entry[2] = False
            if outcome.get("ok") and me == members[0]:   # every member has read it (they all wrote this one)
                store.delete_key(f"{seq - 1}/outcome")
        if outcome.get("ok"):
            return
        store.set(f"{seq}/read/{me}", "1")
        entry[2] = True
    except Exception as e:  # noqa: BLE001 - the store itself is gone (its host rank exited)
        raise RanksMissing(
            f"redistribution refused before any data moved: a rank (the store could not say which: its host is "
            f"gone) did not take part in agreement {seq} (rank {me} waited; {type(e).__name__}: {e}). A rank "
            "that fails before redistribute, or does not call it, stops every rank here") from e
    if me == 0:   # the store's host (init_process_group's rendezvous) stays until every rank that arrived read it
        try:
            store.wait([f"{seq}/read/{r}" for r in outcome.get("arrived", ())], timedelta(seconds=timeout))
        except Exception:  # noqa: BLE001 - one that arrived and then failed: the refusal stands
            pass
    _raise(outcome)


def _gloo_timeout() -> float:
    """The default group's own timeout on CPU (seconds), which bounds a wait in :func:`_finish`."""
    try:
        return world()._get_backend(torch.device("cpu")).options._timeout.total_seconds()
    except Exception:  # noqa: BLE001 - another backend or release: torch's default
        from torch.distributed.constants import default_pg_timeout
        return default_pg_timeout.total_seconds()


def _left_behind() -> None:
    """Raise the :class:`RanksMissing` another rank settled for an agreement
    this rank did not make (its next one in a rank set it has used): it is
    running a plan the others are not, and they gave up waiting for it."""
    me = dist.get_rank()
    for entry in list(_SEQ.get(world(), {}).values()):
        key = f"{entry[1] + 1}/outcome"
        if entry[0].check([key]):
            outcome = json.loads(entry[0].get(key))
            if me in outcome.get("missing", ()):
                _ABANDONED[world()] = outcome["message"]
                entry[1] += 1   # that agreement is over for this rank too: the next one is numbered alike
                _raise(outcome)


def _finish(work: Any, like: torch.Tensor) -> None:
    """Wait for a collective's work. On CPU (gloo) the wait runs in slices
    of :data:`POLL_S`, between which a refusal naming this rank is raised
    (:func:`_left_behind`): a rank whose cached plans differ from the
    others' (``cache_clear()`` on one rank) would otherwise sit in a
    collective the others never join until gloo's own timeout. This rank's
    part of the collective is then abandoned, and the default group with it
    (:func:`_require_usable`). The group's own timeout still bounds the whole
    wait. Point-to-point works (``batch_isend_irecv``: AllPermute, box
    schedules, transfers) are waited for whole: gloo fails a send or a
    receive whose wait times out."""
    if work is None:
        return
    if like.device.type != "cpu":
        work.wait()
        return
    start, limit = time.monotonic(), None
    while True:
        try:
            work.wait(timeout=timedelta(seconds=POLL_S))
            return
        except RuntimeError:
            if work.is_completed():
                raise
            limit = _gloo_timeout() if limit is None else limit
            if time.monotonic() - start >= limit:
                raise
        _left_behind()


def abandoned() -> str | None:
    """Why this rank left a collective of the default group unfinished
    (:func:`_finish`), or None: such a rank agrees on every later call, so
    that the others are refused at once rather than wait for it."""
    return _ABANDONED.get(world())


def _require_usable() -> None:
    """Refuse to move data on a default group this rank left a collective of unfinished."""
    why = _ABANDONED.get(world())
    if why is not None:
        raise RanksMissing(f"no data moved: rank {dist.get_rank()} left a collective unfinished after this refusal, "
                           f"so its process group cannot run another: {why}", (dist.get_rank(),))


# ---------------------------------------------------------------------------
# point to point: cross-mesh schedules and transfers


def _box_slices(box, starts) -> tuple[slice, ...]:
    return tuple(slice(s - o, s - o + length) for (s, length), o in zip(box, starts))


@dataclass
class RoundTraffic:
    """What :func:`run_rounds` handed to point-to-point sends and receives
    on this rank while :func:`counting_rounds` was active, counted at the
    API (the bytes of the tensors given to ``isend`` / ``irecv``): bytes
    sent, bytes received, rounds posted, and the most bytes of round
    buffers (a round's send and receive tensors, from its posting until its
    received pieces are copied into place) alive at once."""

    sent: int = 0
    received: int = 0
    rounds: int = 0
    peak_buffer_bytes: int = 0


_COUNTING: list[RoundTraffic] = []


@contextlib.contextmanager
def counting_rounds():
    """Count what :func:`run_rounds` moves on this rank in the block
    (:class:`RoundTraffic`): ``with counting_rounds() as t: transfer(...)``."""
    t = RoundTraffic()
    _COUNTING.append(t)
    try:
        yield t
    finally:
        _COUNTING.remove(t)


def _post_round(cuts: list, parity: int, me: int, sources: dict, targets: dict) -> tuple[list, list, int, int]:
    """Post one round's cuts on this rank (one ``batch_isend_irecv``): its
    works, the receive buffers to copy into place, and its bytes sent and
    received. A cut's tag is its position in the round, doubled, plus the
    round's parity: the two rounds in flight never share a tag."""
    ops, landed, sent, received = [], [], 0, 0
    for position, (key, a, b, box) in enumerate(cuts):
        tag = 2 * position + parity
        if b == me and a != me:
            out, starts = targets[key]
            buf = out.new_empty(tuple(length for _, length in box))
            ops.append(dist.P2POp(dist.irecv, as_moved(buf), a, tag=tag))
            landed.append((out, _box_slices(box, starts), buf))
            received += buf.nbytes
        elif a == me and b != me:
            local, starts = sources[key]
            piece = local[_box_slices(box, starts)].contiguous()
            ops.append(dist.P2POp(dist.isend, as_moved(piece), b, tag=tag))
            sent += piece.nbytes
    works = dist.batch_isend_irecv(ops) if ops else []
    return works, landed, sent, received


def run_rounds(rounds: list[list[tuple[Any, int, int, tuple]]], sources: dict[Any, tuple[torch.Tensor, tuple]],
               targets: dict[Any, tuple[torch.Tensor, tuple]], ids: Sequence[int] | None = None) -> None:
    """Run staged point-to-point rounds on this rank; collective over the
    ranks the rounds name (world ranks of the default group).

    A round is a list of cuts ``(key, sender, receiver, global box)``;
    ``sources[key]`` is this rank's source block of tensor ``key`` and its
    global start, ``targets[key]`` its target block (written in place) and
    start. Per round every cut this rank sends is copied out of its block
    (``contiguous``: the cut's bytes, never the whole block), every cut it
    receives lands in a buffer of its size, all of them posted in one
    ``batch_isend_irecv``. Rounds overlap by one: round k+1 is posted
    before round k is waited for, then round k's pieces are copied into
    place and its buffers dropped before round k+2 is posted, so a rank
    holds at most two consecutive rounds' send and receive buffers at a
    time (:class:`RoundTraffic` counts them). Every rank posts its rounds in
    the schedule's order, so a round waits only for rounds every rank has
    posted (gloo and NCCL alike); the waits are whole, as before (gloo fails
    a send or receive whose wait times out, :func:`_finish`). Cuts are
    tagged by their position in the round and the round's parity, which
    every rank computes alike, so no message can be matched with another.
    ``ids`` number the rounds alike on every rank where each rank lists only
    its own rounds (the weight sync's per-rank schedule); without them a
    round's number is its place in ``rounds``."""
    _require_usable()
    me = dist.get_rank()
    counters = list(_COUNTING)
    in_flight: list[tuple[list, list, int]] = []   # (works, landed, buffer bytes) of rounds posted, not yet waited
    for k, cuts in zip(range(len(rounds)) if ids is None else ids, rounds):
        works, landed, sent, received = _post_round(cuts, k % 2, me, sources, targets)
        in_flight.append((works, landed, sent + received))
        for t in counters:
            t.sent += sent
            t.received += received
            t.rounds += 1
            t.peak_buffer_bytes = max(t.peak_buffer_bytes, sum(n for _, _, n in in_flight))
        if len(in_flight) == 2:
            _complete(*in_flight.pop(0)[:2])
    for works, landed, _ in in_flight:
        _complete(works, landed)


def _complete(works: list, landed: list) -> None:
    """Wait for a posted round (point to point: whole, not in slices, see
    :func:`_finish`) and copy its received pieces into place."""
    for w in works:
        w.wait()
    for out, where, buf in landed:
        out[where] = buf


# ---------------------------------------------------------------------------
# layouts as explicit boxes: the verified box schedule, point to point


def _box_origin(box, local) -> tuple[int, ...]:
    """The global index of local position 0 of a holding (its box, where the box starts locally)."""
    return tuple(g - k for (g, _), k in zip(box, local))


def _inside(small, big) -> bool:
    return all(b <= s and s + n <= b + m for (s, n), (b, m) in zip(small, big))


@dataclass(frozen=True)
class BoxPlan:
    """A redistribution between two layouts given as explicit boxes
    (:func:`verishard.torch.dtensor.layout_boxes`: ``(world rank, global box,
    local start)`` per holding), planned by the verified core
    (``core.bplan``: ``Boxes.bplan`` and ``Boxes.brounds``, theorem
    ``Boxesworldproof.brounds_correct``). ``pieces[j]`` are target holding
    ``j``'s pieces, ``rounds`` the cuts other ranks send, within the budget.
    :meth:`run` moves a rank's local tensor with :func:`run_rounds`."""

    src: tuple
    dst: tuple
    pieces: tuple
    rounds: tuple           # per round: (key, sender, receiver, global box), key = (source holding, target holding)
    itemsize: int = 1       # bytes per element, for the figures it prints

    def ranks(self) -> tuple[int, ...]:
        """Every world rank that holds a source or a target box."""
        return tuple(sorted({r for r, _, _ in self.src} | {r for r, _, _ in self.dst}))

    def __str__(self) -> str:
        """A table as the type plans print: round, sender -> receiver, global
        box, bytes, one row per piece sent (the first
        :data:`~verishard.plan.MAX_SHOWN_PIECES`, then a count), and what each
        rank receives against what it lacks."""
        ranks = self.ranks()
        cuts = [(i, None, a, b, box, _vol(box) * self.itemsize)
                for i, rd in enumerate(self.rounds, 1) for _, a, b, box in rd if a != b]
        kept = sum(1 for (r, _, _), ps in zip(self.dst, self.pieces) for p in ps if p.src == r)
        lines = [f"box schedule on ranks {ranks_text(ranks)}: {len(self.src)} source boxes -> {len(self.dst)} "
                 f"target boxes; {len(cuts)} pieces sent in {len(self.rounds)} round"
                 f"{'s' if len(self.rounds) != 1 else ''}, {kept} kept in place ({self.itemsize} bytes per "
                 f"element; Boxesworldproof.brounds_correct)"]
        lines += pieces_table(cuts)
        recv = {r: self.received(r) * self.itemsize for r in ranks}
        lack = {r: self.lower_bound(r) * self.itemsize for r in ranks}
        worst = max(ranks, key=lambda r: (recv[r], -r)) if ranks else None
        if worst is not None:
            lines.append(f"received: at most {recv[worst]} bytes per rank (rank {worst}); lower bound "
                         f"{max(lack.values())} bytes" + ("; every rank receives exactly what it lacks"
                                                          if recv == lack else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:   # the fields are long tuples of boxes: str() has the table
        pieces = sum(1 for rd in self.rounds for _, a, b, _ in rd if a != b)
        return (f"<BoxPlan: {len(self.src)} source boxes -> {len(self.dst)} target boxes on ranks "
                f"{ranks_text(self.ranks())}, {pieces} pieces in {len(self.rounds)} rounds, itemsize {self.itemsize}>")

    def to_json(self) -> dict[str, Any]:
        """Plain data: the two layouts' boxes (rank, global box, where it starts
        locally), every piece sent (its round, 1 first) and the per-rank figures (bytes)."""
        def holdings(side):
            return [{"rank": r, "box": [list(b) for b in box], "local_start": list(at)} for r, box, at in side]
        return {
            "kind": "boxes", "itemsize": self.itemsize, "src_boxes": holdings(self.src),
            "dst_boxes": holdings(self.dst), "rounds": len(self.rounds),
            "pieces": [{"round": i, "sender": a, "receiver": b, "box": [list(x) for x in box],
                        "bytes": _vol(box) * self.itemsize}
                       for i, rd in enumerate(self.rounds, 1) for _, a, b, box in rd if a != b],
            "ranks": [{"rank": r, "received": self.received(r) * self.itemsize,
                       "lower_bound": self.lower_bound(r) * self.itemsize} for r in self.ranks()],
        }

    @classmethod
    def build(cls, shape: tuple, src: tuple, dst: tuple, itemsize: int, budget_bytes: int) -> "BoxPlan":
        """The schedule between the layouts ``src`` and ``dst`` of an array of
        shape ``shape``; refused unless the source boxes cover the array and
        every target box lies in it (``core.bcovers``, the precondition of
        ``Coverproof.brounds_complete``: then every target rank gets every
        element of its box)."""
        from .. import core
        from ..errors import LimitError, PlanError
        from ..limits import MAX_ELEMENTS, MAX_ROUND_CUTS
        per_round = min(max(1, budget_bytes // itemsize), MAX_ELEMENTS)
        src_boxes, dst_boxes = [h[:2] for h in src], [h[:2] for h in dst]
        if not core.bcovers(shape, src_boxes, dst_boxes):
            raise PlanError(f"the source layout does not hold every element of the {tuple(shape)} array, or a "
                            f"target box lies outside it (Cover.bcovers): no schedule can give every target rank "
                            f"its whole box")
        pieces, rounds = core.bplan(src_boxes, dst_boxes, per_round)
        if sum(map(len, rounds)) > MAX_ROUND_CUTS:
            raise LimitError(f"the box schedule has more than {MAX_ROUND_CUTS} cuts (verishard.limits.MAX_ROUND_CUTS)")
        keyed = tuple(tuple(((next(i for i, (r, b, _) in enumerate(src) if r == c.src and _inside(c.box, b)),
                              c.target), c.src, c.dst, c.box) for c in rd) for rd in rounds)
        return cls(src, dst, tuple(map(tuple, pieces)), keyed, int(itemsize))

    def received(self, rank: int) -> int:
        """Elements world rank ``rank`` receives from other ranks."""
        return sum(_vol(box) for rd in self.rounds for _, a, b, box in rd if b == rank and a != rank)

    def lower_bound(self, rank: int) -> int:
        """Elements of its target boxes that none of its source boxes holds
        (from the layouts, independently of the schedule; holdings of one
        layout are disjoint, as DTensor's are)."""
        mine = [b for r, b, _ in self.src if r == rank]
        out = 0
        for r, box, _ in self.dst:
            if r == rank:
                out += _vol(box) - sum(_vol(tuple((max(s, t), max(0, min(s + n, t + m) - max(s, t)))
                                                  for (s, n), (t, m) in zip(box, b))) for b in mine)
        return out

    def copy_held(self, local: torch.Tensor, out: torch.Tensor) -> None:
        """Write into this rank's target tensor ``out`` what its source tensor ``local`` holds already."""
        me = dist.get_rank()
        for j, (r, box, at) in enumerate(self.dst):
            if r != me:
                continue
            origin = _box_origin(box, at)
            for p in self.pieces[j]:
                if p.src == me:
                    i = next(i for i, (q, b, _) in enumerate(self.src) if q == me and _inside(p.box, b))
                    out[_box_slices(p.box, origin)] = local[_box_slices(p.box, _box_origin(*self.src[i][1:]))]

    def endpoints(self, local: torch.Tensor | None, out: torch.Tensor | None) -> tuple[dict, dict]:
        """:func:`run_rounds`'s ``sources`` and ``targets`` on this rank, by cut key."""
        me = dist.get_rank()
        sources = {key: (local, _box_origin(*self.src[key[0]][1:])) for rd in self.rounds for key, a, _, _ in rd
                   if a == me}
        targets = {key: (out, _box_origin(*self.dst[key[1]][1:])) for rd in self.rounds for key, _, b, _ in rd
                   if b == me}
        return sources, targets

    def run(self, local: torch.Tensor, out_shape: tuple[int, ...]) -> torch.Tensor:
        """This rank's target local tensor (collective over the ranks the schedule names)."""
        out = local.new_empty(out_shape)
        self.copy_held(local, out)
        run_rounds([list(rd) for rd in self.rounds], *self.endpoints(local, out))
        return out


def _vol(box) -> int:
    n = 1
    for _, length in box:
        n *= length
    return n
