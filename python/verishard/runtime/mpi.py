"""The MPI backend: one rank per device (mpi4py over Open MPI).

Run under ``mpirun -n N`` with ``N`` the number of devices of the plan's
mesh; every rank calls :func:`redistribute` with the same plan and its own
local array (a numpy array of any non-object dtype)::

    from verishard.runtime import mpi, local_block
    out = mpi.redistribute(plan, local)          # out.output: this rank's result
    # or, to let the runtime free the source array as soon as possible:
    out = mpi.redistribute(plan, Donated(local))

How it runs:

- Communicators: a Cartesian communicator over the plan mesh's parts
  (``reorder=False``, so its ranks are the communicator's ranks, row-major),
  with sub-communicators per part and per whole axis, created once per
  (communicator, mesh) and cached (:func:`mesh_comm`). A group over several
  parts in mesh order is a Cartesian sub-communicator; in another order it is
  a split keyed by the verified group index. Every sub-communicator's rank
  order is checked against the verified group index when it is created.
- ``AllGather``: ``MPI_Allgather``; the receive datatype places block ``k``
  at offset ``k * l`` of the gathered dimension, so the reorder into the
  type's layout happens inside MPI with no extra buffer.
- ``AllToAll``: ``MPI_Alltoall`` with a send datatype that cuts the pieces
  along the target dimension and a receive datatype that stacks them along
  the source dimension (again no packing buffers).
- ``AllPermute``: one ``MPI_Sendrecv`` per moving rank, driven by the
  verified bijection (``core.permute_sources``); ranks that keep their block
  send and receive nothing.
- ``DynSlice``: a local copy of the rank's piece.
- ``AllReduce`` / ``ReduceScatter`` (partial types): ``MPI_Allreduce`` and
  ``MPI_Reduce_scatter_block`` with ``MPI_SUM``/``MPI_MAX``/``MPI_MIN`` on the
  element's MPI datatype, or a numpy user operation where MPI has none for the
  dtype (bool, float16, bfloat16, the float8 types: ml_dtypes' ufuncs); a scatter along a dimension other than the
  first (under a leading extent) packs the pieces first, since a reduction
  cannot use the layout datatypes. ``ToPartial``: no communication.
- Uneven types (blocks of ``ceil(g / n)``): the local array is the rank's
  padded buffer (``t.local_shape``; ``runtime.uneven.distribute_padded``),
  and each step is the even collective between a local pad and cut
  (``backend.run_step``), whole (no chunked schedule).

Data goes straight from and into numpy memory (buffer protocol with
explicit MPI datatypes), never pickled. Movement uses datatypes of the
element's bytes, so every dtype moves bit for bit, bfloat16 and the float8
types of ``ml_dtypes`` included (``tests/test_dtypes.py``).

Validation: every rank re-checks the plan with the verified checker and
checks its input (shape, dtype, communicator size) before anything is sent;
then the ranks exchange a small fixed-size record (plan fingerprint, dtype,
problems found). If any rank found a problem, or ranks disagree on the plan
or the dtype, every rank raises the same :class:`RedistributionRefused`
naming every failing rank (the ranks also agree on ``budget_bytes`` and
``chunks``). The exchange has a deadline (``timeout``, 60 s by default): a
rank that crashed, exited or never called ``redistribute`` is named in the
message with which the others abort the job, instead of hanging (:func:`agree`).
An exception while data moves (after validation) prints the error with its
rank and calls ``MPI_Abort``, since the other ranks could otherwise wait
forever.

Scripts should run their main function through :func:`guarded`, which turns
an exception on any rank into a clear message and a prompt end of the job.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from ..collectives import AllPermute, Collective
from ..errors import VerishardError
from ..limits import check_seconds
from ..mesh import Mesh
from ..plan import Plan, Step
from ..sharding import ArrayType
from .backend import (NUMPY_REDUCE, AxisGroup, Backend, Donated, RedistributionError, RuntimeCheckError, execute,
                      numpy_fit, reduction_identity, validate_plan)
from .agreement import AGREED, agreement_verdict, rank_list  # noqa: F401  (AGREED: named in this module's docs)
from .chunked import MPIArrayOps, execute_chunked, lazy_empty



class _LazyMPI:
    """``mpi4py.MPI``, imported (which initialises MPI) on first use, so that
    importing this module (e.g. for doctests) starts nothing."""

    def __getattr__(self, name: str):
        if name.startswith("__"):  # introspection (doctest, inspect) must not start MPI
            raise AttributeError(name)
        from mpi4py import MPI as real
        globals()["MPI"] = real
        return getattr(real, name)


MPI: Any = _LazyMPI()

MAX_COUNT = 2**31 - 1
RECORD = 4096  # bytes per rank in the validation exchange


class RedistributionRefused(RedistributionError):
    """Raised on every rank when any rank's plan or input is bad (nothing was sent).

    Run as a singleton (one rank, no ``mpirun``), with an input of the wrong shape:

    >>> from verishard import plan
    >>> redistribute(plan("x=1", "[4]", "[4]"), np.zeros(3))
    Traceback (most recent call last):
    ...
    verishard.runtime.mpi.RedistributionRefused: redistribution refused before any data moved:
      rank 0: the local input has shape (3,), but the source type [4] has local shape (4,)
    """


# ---------------------------------------------------------------------------
# communicators


class MeshComm:
    """A Cartesian communicator over a mesh's parts and its group sub-communicators.

    On a one-rank run (no ``mpirun``) with a one-device mesh; most code uses
    the cached :func:`mesh_comm` instead of building one:

    >>> mc = MeshComm(MPI.COMM_WORLD, Mesh.parse("x=1"))
    >>> mc.cart.Get_topo(), sorted(mc.groups)
    (([1], [0], [0]), [(0,)])
    >>> mc.free()
    """

    def __init__(self, comm: MPI.Comm, mesh: Mesh):
        self.comm, self.mesh = comm, mesh
        sizes = list(mesh.part_sizes)
        self.cart = comm.Create_cart(dims=sizes, periods=[False] * len(sizes), reorder=False)
        if self.cart.Get_rank() != comm.Get_rank():  # pragma: no cover - excluded by reorder=False
            raise RuntimeCheckError(f"Cartesian rank {self.cart.Get_rank()} != rank {comm.Get_rank()}")
        self.groups: dict[tuple[int, ...], MPI.Comm] = {}
        self.types: dict[tuple, MPI.Datatype] = {}
        for p in range(len(sizes)):  # every part (sub-axis) ...
            self.group_comm((p,))
        for name in mesh.axis_names:  # ... and every whole axis made of several parts
            parts = mesh.resolve(name)
            if len(parts) > 1:
                self.group_comm(parts)

    def group_comm(self, parts: tuple[int, ...]) -> MPI.Comm:
        """The communicator of this rank's group over ``parts`` (cached; collective on first use).

        >>> mc = MeshComm(MPI.COMM_WORLD, Mesh.parse("x=1,y=1"))
        >>> sub = mc.group_comm((1, 0))
        >>> sub.Get_size(), sub.Get_rank(), mc.group_comm((1, 0)) is sub
        (1, 0, True)
        >>> mc.free()
        """
        parts = tuple(parts)
        sub = self.groups.get(parts)
        if sub is not None:
            return sub
        g = AxisGroup.of(self.mesh, parts)
        r = self.cart.Get_rank()
        if list(parts) == sorted(parts):
            sub = self.cart.Sub([p in parts for p in range(len(self.mesh.part_sizes))])
        else:
            sub = self.cart.Split(color=int(g.key[r]), key=int(g.index[r]))
        if sub.Get_size() != g.size or sub.Get_rank() != int(g.index[r]):
            raise RuntimeCheckError(f"sub-communicator over {g.names}: rank {sub.Get_rank()} of "
                                    f"{sub.Get_size()}, the verified group index is {int(g.index[r])} of {g.size}")
        self.groups[parts] = sub
        return sub

    def datatype(self, key: tuple, make: Callable[[], MPI.Datatype]) -> MPI.Datatype:
        """The MPI datatype cached under ``key``, built with ``make()`` (committed) the first time.

        >>> mc = MeshComm(MPI.COMM_WORLD, Mesh.parse("x=1"))
        >>> dt = mc.datatype(("pair", 8), lambda: MPI.BYTE.Create_contiguous(8).Commit())
        >>> dt.Get_size(), mc.datatype(("pair", 8), lambda: None) is dt
        (8, True)
        >>> mc.free()
        """
        dt = self.types.get(key)
        if dt is None:
            dt = self.types[key] = make()
        return dt

    def free(self) -> None:
        """Free the cached datatypes, the sub-communicators and the Cartesian communicator.

        >>> mc = MeshComm(MPI.COMM_WORLD, Mesh.parse("x=1"))
        >>> mc.free()
        >>> mc.groups, mc.types
        ({}, {})
        """
        for dt in self.types.values():
            dt.Free()
        for sub in self.groups.values():
            sub.Free()
        self.cart.Free()
        self.types.clear()
        self.groups.clear()


_MESH_COMMS: dict[tuple[int, Mesh], MeshComm] = {}


def mesh_comm(comm: MPI.Comm, mesh: Mesh) -> MeshComm:
    """The cached :class:`MeshComm` of ``mesh`` over ``comm`` (collective when first created).

    >>> mc = mesh_comm(MPI.COMM_WORLD, Mesh.parse("x=1"))
    >>> mc.cart.Get_size(), mesh_comm(MPI.COMM_WORLD, Mesh.parse("x=1")) is mc
    (1, True)
    """
    key = (comm.py2f(), mesh)
    mc = _MESH_COMMS.get(key)
    if mc is None:
        mc = _MESH_COMMS[key] = MeshComm(comm, mesh)
    return mc


def free_mesh_comms() -> None:
    """Free every cached communicator and datatype (collective over their ranks).

    >>> mc = mesh_comm(MPI.COMM_WORLD, Mesh.parse("x=1"))
    >>> free_mesh_comms()
    >>> mc.groups, mesh_comm(MPI.COMM_WORLD, Mesh.parse("x=1")) is mc
    ({}, False)
    """
    for mc in _MESH_COMMS.values():
        mc.free()
    _MESH_COMMS.clear()


_UNITS: dict[int, MPI.Datatype] = {}


def _unit(itemsize: int) -> MPI.Datatype:
    """An MPI datatype of one array element (``itemsize`` contiguous bytes)."""
    if itemsize == 1:
        return MPI.BYTE
    dt = _UNITS.get(itemsize)
    if dt is None:
        dt = _UNITS[itemsize] = MPI.BYTE.Create_contiguous(itemsize).Commit()
    return dt


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


_USER_OPS: dict[tuple[str, str, str], MPI.Op] = {}


def _reduction(dtype: np.dtype, op: str) -> tuple[MPI.Datatype, MPI.Op]:
    """The MPI datatype of one element and the MPI operation reducing ``dtype`` by ``op``."""
    basic = MPI._typedict.get(dtype.char) if dtype.isnative else None
    if basic is not None and (dtype.kind in "iu" or (dtype.kind == "f" and dtype.char != "e")
                              or (dtype.kind == "c" and op == "sum")):
        return basic, {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    # MPI has no predefined operation for this dtype (bool, float16, bfloat16,
    # byte-swapped, complex max/min): reduce with numpy in a user operation.
    key = (dtype.str, dtype.name, op)   # (ml_dtypes' float8 types share the text "<V1")
    user = _USER_OPS.get(key)
    if user is None:
        ufunc = NUMPY_REDUCE[op]

        def combine(a, b, _datatype):
            acc = np.frombuffer(b, dtype=dtype)
            ufunc(np.frombuffer(a, dtype=dtype), acc, out=acc)

        user = _USER_OPS[key] = MPI.Op.Create(combine, commute=True)
    return _unit(dtype.itemsize), user


def _block_type(unit: MPI.Datatype, shape: tuple[int, ...], sub: tuple[int, ...], dim: int,
                itemsize: int) -> MPI.Datatype:
    """The elements of a ``sub``-shaped corner box of a C-order ``shape`` array,
    resized so that the ``k``-th such box along ``dim`` starts at ``k`` extents."""
    box = unit.Create_subarray(list(shape), list(sub), [0] * len(shape), order=MPI.ORDER_C)
    extent = sub[dim] * prod(shape[dim + 1:]) * itemsize
    out = box.Create_resized(0, extent).Commit()
    box.Free()
    return out


# ---------------------------------------------------------------------------
# the backend


@dataclass(frozen=True)
class StepStats:
    """This rank's figures for one step (bytes).

    >>> from verishard import AllToAll, check
    >>> p = check("x=1", "[4{x}4, 2]", "[4, 2{x}2]", [AllToAll(0, 1, "x")])
    >>> redistribute(p, np.zeros((4, 2))).steps
    (StepStats(index=1, collective=AllToAll(src_dim=0, dst_dim=1, axes=('x',)), type=[4, 2{x}2], sent=0, received=0, held=64, peak=64),)
    """

    index: int
    collective: Collective
    type: ArrayType
    sent: int
    received: int
    held: int   # after the step
    peak: int   # while it runs: input and output at once


class MPIBackend(Backend):
    """The collectives over one rank's numpy array.

    ``sent`` and ``received`` are the bytes of the last call. On a one-rank
    run with a one-device mesh every group has size 1:

    >>> m = Mesh.parse("x=1")
    >>> b = MPIBackend(mesh_comm(MPI.COMM_WORLD, m))
    >>> b.rank, b.all_gather(np.arange(3), 0, AxisGroup.of(m, (0,))).tolist(), b.received
    (0, [0, 1, 2], 0)
    """

    name = "mpi"

    def __init__(self, mc: MeshComm):
        self.mc = mc
        self.rank = mc.cart.Get_rank()
        self.sent = self.received = 0

    def fit(self, x, dim, n):
        """The buffer cut or zero-padded to ``n`` along ``dim`` (uneven types); nothing moves
        (the step's traffic counts stay the collective's)."""
        return numpy_fit(x, dim, n)

    @staticmethod
    def unit(itemsize: int) -> MPI.Datatype:
        """The MPI datatype of one element of ``itemsize`` bytes (what the
        chunked executor's :class:`~verishard.runtime.chunked.MPIArrayOps` builds its views of)."""
        return _unit(itemsize)

    def all_gather(self, x, dim, group):
        """``MPI_Allgather`` over the group, concatenating along ``dim``.

        >>> m = Mesh.parse("x=1")
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, m)).all_gather(np.arange(4).reshape(2, 2), 1, AxisGroup.of(m, (0,)))
        array([[0, 1],
               [2, 3]])
        """
        n, it = group.size, x.dtype.itemsize
        shape = x.shape
        out_shape = shape[:dim] + (shape[dim] * n,) + shape[dim + 1:]
        out = lazy_empty(out_shape, x.dtype, huge=True)
        unit = _unit(it)
        sub = self.mc.group_comm(group.parts)
        if prod(shape[:dim]) == 1:  # blocks are contiguous in the result
            sub.Allgather([_bytes(x), x.size, unit], [_bytes(out), x.size, unit])
        else:
            rtype = self.mc.datatype(("gather", it, shape, dim, n),
                                     lambda: _block_type(unit, out_shape, shape, dim, it))
            sub.Allgather([_bytes(x), x.size, unit], [_bytes(out), 1, rtype])
        self.sent = self.received = (n - 1) * x.nbytes
        return out

    def dyn_slice(self, x, dim, group):
        """A copy of this rank's piece along ``dim``; nothing is sent.

        >>> m = Mesh.parse("x=1")
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, m)).dyn_slice(np.arange(3), 0, AxisGroup.of(m, (0,)))
        array([0, 1, 2])
        """
        l = x.shape[dim] // group.size
        k = int(group.index[self.rank])
        idx = [slice(None)] * x.ndim
        idx[dim] = slice(k * l, k * l + l)
        self.sent = self.received = 0
        return np.array(x[tuple(idx)], order="C", copy=True)

    def all_to_all(self, x, src_dim, dst_dim, group):
        """``MPI_Alltoall`` over the group: split along ``dst_dim``, stack along ``src_dim``.

        >>> m = Mesh.parse("x=1")
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, m)).all_to_all(np.arange(6).reshape(2, 3), 0, 1, AxisGroup.of(m, (0,)))
        array([[0, 1, 2],
               [3, 4, 5]])
        """
        n, it = group.size, x.dtype.itemsize
        d, e, shape = src_dim, dst_dim, x.shape
        piece = list(shape)
        piece[e] //= n
        piece = tuple(piece)
        out_shape = list(piece)
        out_shape[d] *= n
        out_shape = tuple(out_shape)
        out = lazy_empty(out_shape, x.dtype, huge=True)
        unit = _unit(it)
        count = prod(piece)
        if prod(shape[:e]) == 1:
            send = [_bytes(x), count, unit]
        else:
            stype = self.mc.datatype(("a2a-send", it, shape, e, n), lambda: _block_type(unit, shape, piece, e, it))
            send = [_bytes(x), 1, stype]
        if prod(out_shape[:d]) == 1:
            recv = [_bytes(out), count, unit]
        else:
            rtype = self.mc.datatype(("a2a-recv", it, out_shape, d, n),
                                     lambda: _block_type(unit, out_shape, piece, d, it))
            recv = [_bytes(out), 1, rtype]
        self.mc.group_comm(group.parts).Alltoall(send, recv)
        self.sent = self.received = (n - 1) * count * it
        return out

    def all_reduce(self, x, group, op):
        """``MPI_Allreduce`` by ``op`` over the group (same shape as ``x``).

        >>> m = Mesh.parse("x=1")
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, m)).all_reduce(np.arange(3), AxisGroup.of(m, (0,)), "max")
        array([0, 1, 2])
        """
        x = np.ascontiguousarray(x)
        out = lazy_empty(x.shape, x.dtype, huge=True)
        dt, mop = _reduction(x.dtype, op)
        self.mc.group_comm(group.parts).Allreduce([_bytes(x), x.size, dt], [_bytes(out), x.size, dt], mop)
        # the spec's figure (Partial.precv): a reduce-scatter then an all-gather
        self.sent = self.received = 2 * (x.size - x.size // group.size) * x.dtype.itemsize
        return out

    def reduce_scatter(self, x, dim, group, op):
        """``MPI_Reduce_scatter_block`` by ``op``: the rank with group index ``k``
        keeps the ``k``-th piece along ``dim`` of the reduction.

        >>> m = Mesh.parse("x=1")
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, m)).reduce_scatter(np.arange(4).reshape(2, 2), 1,
        ...                                                        AxisGroup.of(m, (0,)), "sum")
        array([[0, 1],
               [2, 3]])
        """
        n = group.size
        x = np.ascontiguousarray(x)
        piece = x.shape[:dim] + (x.shape[dim] // n,) + x.shape[dim + 1:]
        # A reduction needs one elementary datatype on both sides, so pieces that
        # are not contiguous (dim > 0 under leading extents) are packed first.
        send = x if prod(x.shape[:dim]) == 1 else np.ascontiguousarray(np.moveaxis(
            x.reshape(x.shape[:dim] + (n, piece[dim]) + x.shape[dim + 1:]), dim, 0))
        out = lazy_empty(piece, x.dtype, huge=True)
        dt, mop = _reduction(x.dtype, op)
        self.mc.group_comm(group.parts).Reduce_scatter_block([_bytes(send), dt], [_bytes(out), out.size, dt], mop)
        self.sent = self.received = (n - 1) * out.nbytes
        return out

    def to_partial(self, x, group, op):
        """Group index 0 keeps ``x``, the others hold the unit of ``op``; nothing is sent.

        >>> m = Mesh.parse("x=1")
        >>> x = np.arange(3)
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, m)).to_partial(x, AxisGroup.of(m, (0,)), "sum") is x
        True
        """
        self.sent = self.received = 0
        if int(group.index[self.rank]) == 0:
            return x
        return np.full(x.shape, reduction_identity(x.dtype, op), dtype=x.dtype)

    def exchange(self, x, schedule, out=None):
        """``MPI_Alltoallw`` over the whole mesh with the verified schedule:
        each piece travels as a subarray datatype straight from this rank's
        block to the receiver's (no packing buffers); what this rank already
        holds is copied locally. Padding positions of the output are zero.
        ``out``: a C-contiguous array of the output shape to receive into.

        >>> from verishard.runtime.backend import ExchangeSchedule
        >>> m = Mesh.parse("x=1")
        >>> s = ExchangeSchedule.of(ArrayType.parse("[4]", m), ArrayType.parse("[4]", m))
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, m)).exchange(np.arange(4), s)
        array([0, 1, 2, 3])
        """
        me, n = self.rank, len(schedule.pieces)
        x = np.ascontiguousarray(x)   # a slab along dimension 0 already is
        if out is None:
            out = (np.zeros if schedule.padded else np.empty)(schedule.out_shape, dtype=x.dtype)
        elif schedule.padded:
            out[...] = 0
        unit = _unit(x.dtype.itemsize)
        made = []

        def box_type(shape, box):
            t = unit.Create_subarray(list(shape), [b.stop - b.start for b in box], [b.start for b in box]).Commit()
            made.append(t)
            return t

        stypes, scounts = [unit] * n, [0] * n
        rtypes, rcounts = [unit] * n, [0] * n
        sent = received = 0
        for j, a in schedule.sends[me]:   # one piece per receiver: a sender holds one block
            if scounts[j]:
                raise RuntimeCheckError(f"exchange {schedule.src} -> {schedule.dst}: rank {me} has two pieces for {j}")
            stypes[j], scounts[j] = box_type(x.shape, a), 1
            sent += prod(b.stop - b.start for b in a)
        for r, a, b in schedule.pieces[me]:
            if r == me:
                out[b] = x[a]
            else:
                rtypes[r], rcounts[r] = box_type(out.shape, b), 1
                received += prod(c.stop - c.start for c in b)
        zeros = [0] * n
        try:
            self.mc.cart.Alltoallw([_bytes(x), (scounts, zeros), stypes], [_bytes(out), (rcounts, zeros), rtypes])
        finally:
            for t in made:
                t.Free()
        it = x.dtype.itemsize
        self.sent, self.received = sent * it, received * it
        return out

    def all_permute(self, x, sources):
        """Receive the array of rank ``sources[rank]`` (``MPI_Sendrecv``); a fixed rank keeps ``x``.

        >>> x = np.arange(3)
        >>> MPIBackend(mesh_comm(MPI.COMM_WORLD, Mesh.parse("x=1"))).all_permute(x, np.array([0])) is x
        True
        """
        r = self.rank
        src = int(sources[r])
        if src == r:
            self.sent = self.received = 0
            return x
        dest = int(np.flatnonzero(sources == r)[0])
        out = lazy_empty(x.shape, x.dtype, huge=True)
        unit = _unit(x.dtype.itemsize)
        self.mc.cart.Sendrecv([_bytes(x), x.size, unit], dest, 7, [_bytes(out), x.size, unit], src, 7)
        self.sent = self.received = x.nbytes
        return out


# ---------------------------------------------------------------------------
# validation


def _fingerprint(plan: Plan) -> str:
    obj = {"mesh": str(plan.mesh), "src": str(plan.src), "dst": str(plan.dst),
           "steps": [c.to_json() for c in plan.collectives]}
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _local_check(plan: Any, local: Any, comm: MPI.Comm) -> tuple[Plan | None, dict]:
    """Check this rank's plan and input; return the checked plan and the record to exchange."""
    rec: dict[str, Any] = {"errors": []}
    checked = None
    try:
        checked = validate_plan(plan)
    except VerishardError as e:
        rec["errors"].append(f"the plan is invalid: {e}")
    except Exception as e:  # a broken Plan object
        rec["errors"].append(f"the plan is invalid: {type(e).__name__}: {e}")
    if checked is not None:
        rec["plan"] = _fingerprint(checked)
        rec["desc"] = f"{checked.mesh}: {checked.src} -> {checked.dst}, {len(checked.steps)} steps"
        n = checked.mesh.num_devices
        if comm.Get_size() != n:
            rec["errors"].append(f"the plan's mesh {checked.mesh} has {n} devices but the communicator "
                                 f"has {comm.Get_size()} ranks (run with mpirun -n {n})")
        big = max(t.size for t in checked.types)
        if big > MAX_COUNT:
            rec["errors"].append(f"a local array of {big} elements exceeds the MPI count limit 2**31-1")
    if not isinstance(local, np.ndarray):
        rec["errors"].append(f"the local input is a {type(local).__name__}, not a numpy array")
    else:
        # numpy's text and name: ml_dtypes' float8 types share one text ("<V1")
        rec["dtype"] = (f"{local.dtype.str} {local.dtype.name}" if local.dtype.fields is None
                        else repr(local.dtype.descr))
        rec["dtype_name"] = str(local.dtype)
        if local.dtype.hasobject:
            rec["errors"].append(f"dtype {local.dtype} holds Python objects, which cannot be sent without pickling")
        elif local.dtype.itemsize == 0:
            rec["errors"].append(f"dtype {local.dtype} has item size 0")
        if checked is not None and local.shape != checked.src.local_shape:
            rec["errors"].append(f"the local input has shape {local.shape}, but the source type "
                                 f"{checked.src} has local shape {checked.src.local_shape}")
    return checked, rec


def _encode_record(rec: dict) -> np.ndarray:
    errors = [e if len(e) <= 600 else e[:600] + "..." for e in rec["errors"]][:4]
    for cut in range(len(errors) + 1):
        data = json.dumps({**rec, "errors": errors[:len(errors) - cut] +
                           ([f"(and {cut} more)"] if cut else [])}).encode()
        if len(data) <= RECORD:
            break
    buf = np.zeros(RECORD, dtype=np.uint8)
    buf[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    return buf


def _decode_record(buf: np.ndarray) -> dict:
    raw = bytes(buf).rstrip(b"\0")
    try:
        return json.loads(raw.decode())
    except (ValueError, UnicodeDecodeError):
        return {"errors": ["sent an unreadable validation record"]}


def _abort(comm: MPI.Comm, message: str, code: int = 1) -> None:
    rank = MPI.COMM_WORLD.Get_rank()
    sys.stdout.flush()
    sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in message.splitlines()))
    sys.stderr.flush()
    comm.Abort(code)


AGREE_TAG = 31_337  # point-to-point tag of the agreement (records to rank 0, its verdict back)
VERDICT = 16_384  # bytes of the verdict rank 0 sends back
GRACE = 2.0  # seconds the other ranks wait beyond the deadline for rank 0's verdict


def _wait(reqs: list, deadline: float) -> list[int]:
    """Wait for ``reqs`` until ``deadline`` (time.monotonic); the indices of
    those still pending then. Yields the core at first (ranks may share
    cores), then backs off up to 2 ms."""
    start, pause = time.monotonic(), 0.0
    pending = list(range(len(reqs)))
    while pending:
        pending = [i for i in pending if not reqs[i].Test()]
        now = time.monotonic()
        if not pending or now > deadline:
            break
        time.sleep(pause)
        if now - start > 2e-3:
            pause = min(max(pause * 2, 1e-5), 2e-3)
    return pending


def agree(comm: MPI.Comm, rec: dict, timeout: float | None, what: str = "redistribute") -> None:
    """Exchange this rank's validation record with every rank before any data
    moves; raise :class:`RedistributionRefused` on every rank when any rank
    reported a problem or the ranks disagree on a key of :data:`AGREED`.

    Rank 0 gathers the records point to point and sends its verdict back, so
    that a rank that does not arrive within ``timeout`` seconds (it failed,
    exited or never called ``what``) is named: every rank that did arrive
    prints the message naming it and the job is aborted (a missing rank
    cannot be waited for, nor left behind). ``timeout=None``: wait forever.
    A ``timeout`` that is not a number greater than 0 (at most
    ``verishard.limits.MAX_SECONDS``; ``verishard.limits.check_seconds``) is
    this rank's problem, reported on every rank like any other: the exchange
    then waits :data:`DEFAULT_TIMEOUT`.
    """
    n, me = comm.Get_size(), comm.Get_rank()
    if timeout is not None:
        try:
            timeout = check_seconds(timeout, "timeout")
        except VerishardError as e:
            rec, timeout = {**rec, "errors": list(rec.get("errors", ())) + [str(e)]}, DEFAULT_TIMEOUT
    deadline = float("inf") if timeout is None else time.monotonic() + timeout
    late = (f"did not reach {what} within {timeout:g} s (it failed or exited before it, or does not call it); "
            f"aborting the job") if timeout is not None else ""
    if me == 0:
        records = np.zeros(n * RECORD, dtype=np.uint8)
        records[:RECORD] = _encode_record(rec)
        reqs = [comm.Irecv(records[r * RECORD:(r + 1) * RECORD], source=r, tag=AGREE_TAG) for r in range(1, n)]
        missing = [i + 1 for i in _wait(reqs, deadline)]
        if missing:
            for i in missing:
                reqs[i - 1].Cancel()
            message = f"verishard.mpi: {rank_list(missing)} {late}"
            verdict = message
        else:
            verdict = agreement_verdict([_decode_record(records[r * RECORD:(r + 1) * RECORD]) for r in range(n)])
        data = np.zeros(VERDICT, dtype=np.uint8)
        text = ("" if verdict is None else verdict).encode()[:VERDICT - 1]
        data[0] = 1 if missing else 0
        data[1:1 + len(text)] = np.frombuffer(text, dtype=np.uint8)
        sends = [comm.Isend(data, dest=r, tag=AGREE_TAG + 1) for r in range(1, n) if r not in missing]
        if missing:  # let the others hear it (and print it) before the abort ends them
            _wait(sends, time.monotonic() + GRACE)
            _abort(comm, verdict, 2)
        _wait(sends, float("inf"))
    else:
        data = np.zeros(VERDICT, dtype=np.uint8)
        send = comm.Isend(_encode_record(rec), dest=0, tag=AGREE_TAG)
        recv = comm.Irecv(data, source=0, tag=AGREE_TAG + 1)
        if _wait([recv], deadline + GRACE):
            _abort(comm, f"verishard.mpi: rank 0 (which collects the agreement) {late}", 2)
        send.Wait()
        verdict = bytes(data[1:]).rstrip(b"\0").decode(errors="replace") or None
        if data[0]:
            _abort(comm, verdict or "verishard.mpi: a rank did not arrive", 2)
    if verdict is not None:
        raise RedistributionRefused(verdict)


# ---------------------------------------------------------------------------
# redistribute


@dataclass(frozen=True)
class MPIResult:
    """This rank's result of :func:`redistribute`.

    >>> from verishard import AllToAll, check
    >>> p = check("x=1", "[4{x}4, 2]", "[4, 2{x}2]", [AllToAll(0, 1, "x")])
    >>> r = redistribute(p, np.arange(8).reshape(4, 2))
    >>> r.output.tolist(), r.itemsize, len(r.steps)
    ([[0, 1], [2, 3], [4, 5], [6, 7]], 8, 1)
    """

    plan: Plan
    output: np.ndarray
    steps: tuple[StepStats, ...]
    itemsize: int
    chunking: Any = None  # the ChunkReport (runtime/chunked.py): bound, budget, k and refined bound per step

    @property
    def source_bytes(self) -> int:
        """Bytes of this rank's source array.

        >>> from verishard import plan
        >>> redistribute(plan("x=1", "[4]", "[4]"), np.zeros(4, np.float32)).source_bytes
        16
        """
        return self.plan.src.size * self.itemsize

    @property
    def peak_bytes(self) -> int:
        """Most bytes this rank's runtime held at once (input and output of a step together).

        With one rank an all-to-all moves nothing and keeps the array's size:

        >>> from verishard import AllToAll, check
        >>> p = check("x=1", "[4{x}4, 2]", "[4, 2{x}2]", [AllToAll(0, 1, "x")])
        >>> redistribute(p, np.zeros((4, 2), np.int16)).peak_bytes
        16
        """
        return max([self.source_bytes] + [s.peak for s in self.steps])

    @property
    def received_bytes(self) -> int:
        """Bytes this rank received over all steps (0 on a one-device mesh).

        >>> from verishard import AllToAll, check
        >>> p = check("x=1", "[4{x}4, 2]", "[4, 2{x}2]", [AllToAll(0, 1, "x")])
        >>> redistribute(p, np.zeros((4, 2))).received_bytes
        0
        """
        return sum(s.received for s in self.steps)

    @property
    def sent_bytes(self) -> int:
        """Bytes this rank sent over all steps (0 on a one-device mesh).

        >>> from verishard import AllToAll, check
        >>> p = check("x=1", "[4{x}4, 2]", "[4, 2{x}2]", [AllToAll(0, 1, "x")])
        >>> redistribute(p, np.zeros((4, 2))).sent_bytes
        0
        """
        return sum(s.sent for s in self.steps)


def _expected_received(mesh: Mesh, t: ArrayType, c: Collective, rank: int) -> int:
    from .simulator import expected_received
    return int(expected_received(t, c, mesh)[rank])


DEFAULT_TIMEOUT = 60.0  # seconds every rank has to reach the agreement (redistribute's timeout=)


def _owns_memory(x: np.ndarray) -> bool:
    """Whether ``x`` is all of its memory: its own buffer, or the whole of an
    anonymous mapping (what ``lazy_empty`` and earlier results hand out), so
    that releasing its pages frees nothing anyone else reads.

    >>> _owns_memory(np.zeros(4)), _owns_memory(np.zeros(4)[1:]), _owns_memory(lazy_empty((1024, 512), np.float32))
    (True, False, True)
    """
    if x.flags.owndata:
        return True
    base = x
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer's view of the mapping
        base = base.obj
    return isinstance(base, mmap.mmap) and x.flags.c_contiguous and x.nbytes == len(base)


def redistribute(plan: Plan, local: np.ndarray | Donated, comm: MPI.Comm | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT, abort_on_error: bool = True,
                 budget_bytes: int | None = None, chunks: int | None = None) -> MPIResult:
    """Redistribute this rank's ``local`` array (its ``plan.src`` block) with ``plan``.

    Collective over ``comm`` (default ``MPI.COMM_WORLD``), whose size must be
    the plan mesh's number of devices; rank ``r`` is device ``r``. Raises
    :class:`RedistributionRefused` on every rank if any rank's plan or input
    is bad (see the module docstring); nothing has been sent then, and the
    communicator can be used again.

    ``timeout``: seconds every rank has to reach the validation exchange
    (default 60); past it, the ranks that did arrive abort the job with a
    message naming the ranks that did not (:func:`agree`; None: wait
    forever).
    ``abort_on_error``: an exception after validation (while data moves)
    prints the error and calls ``MPI_Abort`` (else it propagates, and the
    other ranks may wait forever).

    ``budget_bytes``: memory per rank the run may hold at once; every step
    runs in as many pieces as it needs for its refined bound to fit
    (:mod:`verishard.runtime.chunked`; default: the plan's bound plus an
    eighth, at least 1 MiB). ``chunks``: a fixed number of pieces per step
    instead (1: unchunked). Must be the same on every rank (checked with the plan and dtype). With the source
    donated (and owning its memory) each input piece is released once used;
    ``result.chunking`` reports the bound that applied.

    Without ``mpirun`` mpi4py runs as a singleton (one rank), so a
    one-device mesh is the only one that fits here; the source array may be
    handed over with :class:`~verishard.runtime.backend.Donated`:

    >>> from verishard import AllToAll, check
    >>> p = check("x=1", "[4{x}4, 2]", "[4, 2{x}2]", [AllToAll(0, 1, "x")])
    >>> r = redistribute(p, Donated(np.arange(8).reshape(4, 2)))
    >>> r.output.tolist(), r.received_bytes
    ([[0, 1], [2, 3], [4, 5], [6, 7]], 0)
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    donated = isinstance(local, Donated)
    value = local.value if donated else local
    try:
        checked, rec = _local_check(plan, value, comm)
    except Exception as e:  # never skip the exchange: the other ranks are waiting in it
        checked, rec = None, {"errors": [f"validation failed: {type(e).__name__}: {e}"]}
    rec["chunking"] = f"budget_bytes={budget_bytes}, chunks={chunks}"  # each rank cuts its steps by these
    del value
    agree(comm, rec, timeout)
    assert checked is not None
    x = local.take() if donated else local
    del local
    step_index = [0]
    phase = ["creating the communicators"]
    try:
        mc = mesh_comm(comm, checked.mesh)
        for c in checked.collectives:  # create every group's communicator before any data moves
            if not isinstance(c, AllPermute):
                ps = c.parts(checked.mesh)
                if AxisGroup.of(checked.mesh, ps).size > 1:
                    mc.group_comm(ps)
        x = np.ascontiguousarray(x)
        itemsize = x.dtype.itemsize
        backend = MPIBackend(mc)
        rank = comm.Get_rank()
        stats: list[StepStats] = []
        prev = {"x": x, "bytes": x.nbytes}

        def on_step(i: int, step: Step, t: ArrayType, y: np.ndarray, info=None) -> None:
            step_index[0] = i
            moved = y is not prev["x"]
            sent, recv = (backend.sent, backend.received) if moved else (0, 0)
            backend.sent = backend.received = 0
            if y.shape != step.type.local_shape:
                raise RuntimeCheckError(f"step {i} ({step.collective}): result has shape {y.shape}, the verified "
                                        f"type {step.type} has local shape {step.type.local_shape}")
            want = _expected_received(checked.mesh, t, step.collective, rank) * itemsize
            if recv != want:
                raise RuntimeCheckError(f"step {i} ({step.collective}): received {recv} B, the spec's figure "
                                        f"for rank {rank} is {want} B")
            peak = prev["bytes"] + y.nbytes if moved else prev["bytes"]
            if info is not None and (info.k > 1 or not moved or y.base is not None):
                peak = info.held  # chunked, or a slice kept as a view
            stats.append(StepStats(i, step.collective, step.type, sent, recv, y.nbytes, peak))
            prev["x"], prev["bytes"] = y, y.nbytes

        del x
        phase[0] = "moving data"
        x0 = prev["x"]
        owned = donated and _owns_memory(x0)
        del x0
        if checked.uneven and not (checked.exchange and len(checked.steps) == 1):  # padded buffers, each
            # collective whole (no chunked schedule for uneven collectives; a lone exchange cuts along its
            # free dimension, which is not padded)
            out, report = execute(checked, Donated(prev["x"]), backend, on_step), None
        else:
            out, report = execute_chunked(checked, Donated(prev["x"]), backend, MPIArrayOps(backend), budget_bytes,
                                          chunks, itemsize, owned=owned, on_step=on_step)
        prev.clear()
        return MPIResult(checked, out, tuple(stats), itemsize, report)
    except BaseException as e:
        if not abort_on_error:
            raise
        if phase[0] == "moving data":
            where = (f"step {step_index[0] + 1} of {len(checked.steps)}" if step_index[0] < len(checked.steps)
                     else "after the last step")
        else:
            where = phase[0]
        _abort(comm, f"verishard.mpi: error after validation ({where}): "
                     f"{type(e).__name__}: {e}\n" + traceback.format_exc())
        raise  # pragma: no cover - Abort does not return


# ---------------------------------------------------------------------------
# running SPMD mains


def guarded(main: Callable[[], Any], comm: MPI.Comm | None = None, barrier_timeout: float = 30.0) -> int:
    """Run ``main()`` on every rank; return its exit code (0), or end the job
    cleanly on an error.

    - :class:`RedistributionRefused` (raised on every rank at once): every rank
      prints the message prefixed with its rank, waits (up to
      ``barrier_timeout`` s: a number greater than 0, at most
      ``verishard.limits.MAX_SECONDS``) until all ranks have printed, and
      exits with 1.
    - Any other exception: the rank prints it with its traceback and calls
      ``MPI_Abort``, so the other ranks do not wait forever.

    >>> guarded(lambda: print("hello from every rank"))
    hello from every rank
    0
    """
    barrier_timeout = check_seconds(barrier_timeout, "barrier_timeout")   # before main(): a clear error at the call
    comm = MPI.COMM_WORLD if comm is None else comm
    rank = comm.Get_rank()
    try:
        main()
        return 0
    except RedistributionRefused as e:
        sys.stdout.flush()
        sys.stderr.write("".join(f"[rank {rank}] error: {line}\n" for line in str(e).splitlines()))
        sys.stderr.flush()
        req = comm.Ibarrier()
        deadline = time.monotonic() + barrier_timeout
        while not req.Test() and time.monotonic() < deadline:
            time.sleep(0.001)
        os._exit(1)  # skip MPI_Finalize: the ranks agreed to stop
    except SystemExit as e:
        if e.code in (0, None):
            return 0
        _abort(comm, f"exited with status {e.code}", e.code if isinstance(e.code, int) else 1)
    except BaseException as e:
        _abort(comm, f"error: {type(e).__name__}: {e}\n" + traceback.format_exc())
    return 1  # pragma: no cover


__all__ = ["redistribute", "agree", "MPIResult", "StepStats", "MPIBackend", "MeshComm", "mesh_comm", "free_mesh_comms",
           "RedistributionRefused", "guarded"]
