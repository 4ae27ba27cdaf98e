"""Cross-mesh redistribution: from one placement (a mesh, its world ranks, a
type) to another, point to point, with the schedule of the verified builder
``Crossmesh.xplan`` (``Crossmeshproof.xplan_correct``: every target device
assembles exactly its block of any global array; every element of its block
arrives once, from a source device whose block holds it; it receives from
other ranks its block size less what it already holds).

:func:`crossmesh_rank_plan` gives one world rank's own part of such a
schedule (what it receives and what it sends, senders dealt over replicas)
from the two placements alone, without building any other rank's pieces
(``Perrankproof.rank_recv_restrict``, ``rank_send_restrict``: exactly its
entries of the world schedule ``Perrank.wplan``; ``wplan_correct``: that
schedule's guarantees are ``xplan_correct``'s).

Local blocks are the valid part of a device's block (``ArrayType.valid_shape``;
on even types the whole local block). A padded source buffer is accepted:
only its valid part is read (``Crossmeshproof.xplan_correct_valid``: whatever
a source's padding holds, every target's valid positions get the array's
elements).

>>> import numpy as np
>>> from verishard import Mesh, ArrayType
>>> src = ArrayType.parse("[2{x}4, 2{y}4]", Mesh.parse("x=2,y=2"))
>>> dst = ArrayType.parse("[2{u}4, 4]", Mesh.parse("u=2"))
>>> p = crossmesh_plan(src, dst)                 # source ranks 0-3, target ranks 4-5
>>> p.dst_ranks, p.volumes()
((4, 5), {(0, 4): 4, (1, 4): 4, (2, 5): 4, (3, 5): 4})
>>> A = np.arange(16.0).reshape(4, 4)
>>> out = p.simulate({r: A[src_box] for r, src_box in zip(p.src_ranks, p.src_slices())})
>>> all((out[r] == A[b]).all() for r, b in zip(p.dst_ranks, p.dst_slices()))
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import core
from .errors import PlanError, ShardingError
from .mesh import Mesh
from .sharding import ArrayType

__all__ = ["CrossMeshPlan", "crossmesh_plan", "RankPlan", "crossmesh_rank_plan", "as_type", "checked_ranks"]


def as_type(t: ArrayType | str, mesh: Mesh | str | None, what: str) -> ArrayType:
    """An :class:`ArrayType` from a type or its text on ``mesh``."""
    if isinstance(t, ArrayType):
        if mesh is not None and Mesh.coerce(mesh) != t.mesh:
            raise ShardingError(f"the {what} type is over {t.mesh}, not the given mesh {Mesh.coerce(mesh)}")
        return t
    if mesh is None:
        raise ShardingError(f"the {what} type {t!r} needs a mesh")
    return ArrayType.parse(t, Mesh.coerce(mesh))


def checked_ranks(ranks: Sequence[int] | None, default_start: int, n: int, what: str,
                  world_size: int | None) -> tuple[int, ...]:
    if isinstance(ranks, tuple):   # the same long lists come again with every tensor of a transfer: checked once
        try:
            return _ranks_checked(ranks, default_start, n, what, world_size)
        except TypeError:   # unhashable entries: checked (and refused) below
            pass
    return _check_ranks(ranks, default_start, n, what, world_size)


@lru_cache(maxsize=256)
def _ranks_checked(ranks: tuple, default_start: int, n: int, what: str, world_size: int | None) -> tuple[int, ...]:
    return _check_ranks(ranks, default_start, n, what, world_size)


def _check_ranks(ranks: Sequence[int] | None, default_start: int, n: int, what: str,
                 world_size: int | None) -> tuple[int, ...]:
    if ranks is None:
        ranks = range(default_start, default_start + n)
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
        raise ShardingError(f"{what} ranks must be a sequence of integers, not {type(ranks).__name__}")
    out = []
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise ShardingError(f"{what} rank {r!r} is not an integer")
        r = int(r)
        if r < 0 or (world_size is not None and r >= world_size):
            top = "" if world_size is None else f" 0..{world_size - 1}"
            raise ShardingError(f"{what} rank {r} is out of range{top}")
        out.append(r)
    if len(out) != n:
        raise ShardingError(f"{len(out)} {what} ranks for a mesh of {n} devices")
    if len(set(out)) != len(out):
        dup = next(r for r in out if out.count(r) > 1)
        raise ShardingError(f"{what} rank {dup} is listed twice")
    return tuple(out)


@dataclass(frozen=True)
class _Placements:
    """Two placements (types and world ranks) and what follows from them
    alone: where blocks and pieces sit, what a target lacks."""

    src: ArrayType
    dst: ArrayType
    src_ranks: tuple[int, ...]
    dst_ranks: tuple[int, ...]

    # geometry -------------------------------------------------------------
    def src_index(self, rank: int) -> int | None:
        """The source device of world rank ``rank`` (None when it is not a source)."""
        return _index(self.src_ranks).get(rank)

    def dst_index(self, rank: int) -> int | None:
        return _index(self.dst_ranks).get(rank)

    def src_starts(self, i: int) -> tuple[int, ...]:
        return self.src.block_starts(i)

    def dst_starts(self, j: int) -> tuple[int, ...]:
        return self.dst.block_starts(j)

    def src_slices(self) -> list[tuple[slice, ...]]:
        """The global box of every source device's valid block, as slices."""
        return [tuple(slice(s, s + l) for s, l in zip(self.src.block_starts(i), self.src.valid_shape(i)))
                for i in range(len(self.src_ranks))]

    def dst_slices(self) -> list[tuple[slice, ...]]:
        return [tuple(slice(s, s + l) for s, l in zip(self.dst.block_starts(j), self.dst.valid_shape(j)))
                for j in range(len(self.dst_ranks))]

    def src_local(self, piece: core.Piece) -> tuple[slice, ...]:
        """Where ``piece`` sits in its sender's local block."""
        i = self.src_index(piece.src)
        starts = self.src.block_starts(i)
        return tuple(slice(b - s, b - s + l) for (b, l), s in zip(piece.box, starts))

    def dst_local(self, j: int, piece: core.Piece) -> tuple[slice, ...]:
        """Where ``piece`` goes in target device ``j``'s local block."""
        starts = self.dst.block_starts(j)
        return tuple(slice(b - s, b - s + l) for (b, l), s in zip(piece.box, starts))


    def lower_bound(self, j: int) -> int:
        """Its block size less what it already holds (computed here from the
        types, independently of the schedule)."""
        size = int(np.prod(self.dst.valid_shape(j)))
        i = self.src_index(self.dst_ranks[j])
        if i is None:
            return size
        held = 1
        for (s1, l1), (s2, l2) in zip(_box(self.src, i), _box(self.dst, j)):
            held *= max(0, min(s1 + l1, s2 + l2) - max(s1, s2))
        return size - held

    def peak(self, rank: int) -> int:
        """Elements a world rank holds in the direct form: its source block and its target block."""
        i, j = self.src_index(rank), self.dst_index(rank)
        return ((int(np.prod(self.src.valid_shape(i))) if i is not None else 0)
                + (int(np.prod(self.dst.valid_shape(j))) if j is not None else 0))


@dataclass(frozen=True)
class CrossMeshPlan(_Placements):
    """A verified cross-mesh schedule: ``pieces[j]`` are the pieces of target
    device ``j`` (world rank ``dst_ranks[j]``), each a :class:`core.Piece`
    (sending world rank, source block, global box). ``start``: None for
    ``Crossmesh.xplan``'s senders, else the rotation of ``Balance.xplan_bal``'s
    (each source block's moved pieces dealt over its holders)."""

    pieces: tuple[tuple[core.Piece, ...], ...]
    start: int | None = None

    # figures --------------------------------------------------------------
    def volumes(self) -> dict[tuple[int, int], int]:
        """Elements each (sender, receiver) pair of distinct world ranks moves."""
        out: dict[tuple[int, int], int] = {}
        for j, ps in enumerate(self.pieces):
            r = self.dst_ranks[j]
            for p in ps:
                if p.src != r:
                    out[(p.src, r)] = out.get((p.src, r), 0) + _vol(p.box)
        return dict(sorted(out.items()))

    def received(self, j: int) -> int:
        """Elements target device ``j`` receives from other ranks."""
        r = self.dst_ranks[j]
        return sum(_vol(p.box) for p in self.pieces[j] if p.src != r)

    # in-process execution (tests, offline tools) ----------------------------
    def simulate(self, locals_: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Run the schedule in one process: ``locals_`` maps every source world
        rank to its local block (exactly its layout's shape: a
        :class:`~verishard.errors.ShardingError` names the rank, the block
        shape and the shape given); returns every target world rank's block."""
        for i, r in enumerate(self.src_ranks):
            want = tuple(self.src.valid_shape(i))
            got = tuple(np.shape(locals_[r])) if r in locals_ else None
            if got != want:
                raise ShardingError(f"source rank {r}: " + ("no local block given" if got is None else
                                    f"its local block has shape {got}, the source layout gives it {want}"))
        out = {}
        dtype = np.result_type(*[np.asarray(a).dtype for a in locals_.values()])
        for j, ps in enumerate(self.pieces):
            buf = np.empty(self.dst.valid_shape(j), dtype=dtype)
            for p in ps:
                buf[self.dst_local(j, p)] = np.asarray(locals_[p.src])[self.src_local(p)]
            out[self.dst_ranks[j]] = buf
        return out

    def describe(self) -> str:
        """A printout: the placements, per-pair volumes, per-target traffic against the bound."""
        lines = [f"cross-mesh plan: {self.src} on {self.src.mesh} ranks {_show_ranks(self.src_ranks)}",
                 f"             to {self.dst} on {self.dst.mesh} ranks {_show_ranks(self.dst_ranks)}",
                 "  sender -> receiver  elements"]
        for (a, b), v in self.volumes().items():
            lines.append(f"  {a:>6} -> {b:<8}  {v:>8}")
        lines.append("  target  block  received  lower bound")
        for j, r in enumerate(self.dst_ranks):
            size = int(np.prod(self.dst.valid_shape(j)))
            lines.append(f"  {r:>6}  {size:>5}  {self.received(j):>8}  {self.lower_bound(j):>11}")
        lines.append("every target gets exactly its block; traffic = block - held "
                     "(guaranteed by Crossmeshproof.xplan_correct)")
        return "\n".join(lines)


def _index(ranks: tuple[int, ...]) -> dict[int, int]:
    return _index_cached(ranks)


@lru_cache(maxsize=256)
def _index_cached(ranks: tuple[int, ...]) -> dict[int, int]:
    return {r: i for i, r in enumerate(ranks)}


def _vol(box) -> int:
    n = 1
    for _, l in box:
        n *= l
    return n


def _box(t: ArrayType, i: int):
    return list(zip(t.block_starts(i), t.valid_shape(i)))


def _show_ranks(ranks: tuple[int, ...]) -> str:
    if ranks and list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else str(ranks[0])
    return ",".join(map(str, ranks))


def crossmesh_plan(src: ArrayType | str, dst: ArrayType | str, src_ranks: Sequence[int] | None = None,
                   dst_ranks: Sequence[int] | None = None, *, src_mesh: Mesh | str | None = None,
                   dst_mesh: Mesh | str | None = None, world_size: int | None = None,
                   allow_overlap: bool = True, start: int | None = None) -> CrossMeshPlan:
    """Plan moving ``src`` (on its mesh, device ``i`` being world rank
    ``src_ranks[i]``; default ``0..N-1``) to ``dst`` (default ranks right
    after the source's). Everything is validated before any communication:
    both types plain (no pending axes), the same global shape, each rank list
    one distinct world rank per device within ``world_size``, and, when
    ``allow_overlap`` is false, no rank in both lists.

    Where a source block is held by several ranks (replicas), ``start=None``
    takes ``Crossmesh.xplan``'s sender (holder ``j mod |holders|`` for target
    ``j``); an integer ``start`` deals each block's moved pieces over its
    holders in turn from holder ``start`` (``Balance.xplan_bal``; theorem
    ``Balanceproof.xplan_bal_balanced``: no rank sends more than its share
    rounded up to one piece; ``xplan_bal_correct``: every guarantee of
    ``xplan_correct`` kept).

    >>> crossmesh_plan("[2{x}4]", "[2{u}6]", src_mesh="x=2", dst_mesh="u=3")
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: global shapes differ: source (4,), target (6,)
    """
    s, d, r1, r2 = _placements(src, dst, src_ranks, dst_ranks, src_mesh, dst_mesh, world_size, allow_overlap)
    return _plan(s, d, r1, r2, start)


def _placements(src, dst, src_ranks, dst_ranks, src_mesh, dst_mesh, world_size, allow_overlap):
    """Both types and rank lists, checked (see :func:`crossmesh_plan`)."""
    s = as_type(src, src_mesh, "source")
    d = as_type(dst, dst_mesh, "target")
    for t, what in ((s, "source"), (d, "target")):
        if t.partial:
            raise ShardingError(f"the {what} type {t} has pending axes; cross-mesh moves plain types")
    if s.global_shape != d.global_shape:
        raise ShardingError(f"global shapes differ: source {s.global_shape}, target {d.global_shape}")
    n1, n2 = s.mesh.num_devices, d.mesh.num_devices
    r1 = checked_ranks(src_ranks, 0, n1, "source", world_size)
    r2 = checked_ranks(dst_ranks, n1 if src_ranks is None else max(r1) + 1, n2, "target", world_size)
    if not allow_overlap and set(r1) & set(r2):
        raise ShardingError(f"rank {min(set(r1) & set(r2))} is both a source and a target")
    return s, d, r1, r2


@lru_cache(maxsize=256)
def _plan(s: ArrayType, d: ArrayType, r1: tuple[int, ...], r2: tuple[int, ...], start: int | None) -> CrossMeshPlan:
    out = core.xplan(s, r1, d, r2, start)
    if out is None:
        raise PlanError(f"the verified cross-mesh builder refuses {s} on {s.mesh} -> {d} on {d.mesh}")
    return CrossMeshPlan(s, d, r1, r2, tuple(tuple(ps) for ps in out), start)


@dataclass(frozen=True)
class RankPlan(_Placements):
    """One world rank's own part of a verified cross-mesh schedule
    (``Perrank.rank_recv`` and ``rank_send``, built from the two placements
    alone; ``Perrankproof.rank_recv_restrict`` and ``rank_send_restrict``:
    exactly its entries of the world schedule ``Perrank.wplan``, whose
    guarantees are ``xplan_correct``'s, ``Perrankproof.wplan_correct``).
    ``recv``: the pieces of its target block (empty when it is no target),
    each with the cuts it arrives in; ``send``: ``(target device, receiving
    rank, piece, cuts)`` for every piece it sends to another rank. Cuts are
    ``Rounds.cut_box``'s, of at most ``per_cut`` elements (a slice larger
    than that alone), the same on both sides of a piece."""

    rank: int
    start: int
    per_cut: int
    recv: tuple[tuple[core.Piece, tuple], ...]
    send: tuple[tuple[int, int, core.Piece, tuple], ...]

    @property
    def pieces(self) -> dict[int, tuple[core.Piece, ...]]:
        """``{j: pieces}`` for this rank's target device ``j`` (as
        :attr:`CrossMeshPlan.pieces` reads for that device)."""
        j = self.dst_index(self.rank)
        return {} if j is None else {j: tuple(p for p, _ in self.recv)}

    def received(self) -> int:
        """Elements this rank receives from other ranks."""
        return sum(_vol(p.box) for p, _ in self.recv if p.src != self.rank)

    def sent(self) -> int:
        """Elements this rank sends to other ranks."""
        return sum(_vol(p.box) for _, _, p, _ in self.send)


def crossmesh_rank_plan(src: ArrayType | str, dst: ArrayType | str, rank: int,
                        src_ranks: Sequence[int] | None = None, dst_ranks: Sequence[int] | None = None, *,
                        src_mesh: Mesh | str | None = None, dst_mesh: Mesh | str | None = None,
                        world_size: int | None = None, start: int = 0, per_cut: int = 2**50) -> RankPlan:
    """World rank ``rank``'s own part of the cross-mesh schedule (arguments
    checked as :func:`crossmesh_plan` checks them): the pieces it receives
    and sends, each cut into pieces of at most ``per_cut`` elements, in
    time linear in the two meshes' devices plus its own pieces (no other
    rank's pieces are built). Each source block's moved pieces are dealt
    over its holders from holder ``start`` (``Perrankproof.rank_send_balanced``:
    no holder sends more than its share of the block's readers rounded up
    to one piece). Placements of the same types, ranks, rotation and cut
    size share one plan.

    >>> p = crossmesh_rank_plan("[3{x}6]", "[2{u}6]", 3, src_mesh="x=2", dst_mesh="u=3")
    >>> [(q.src, q.box) for q, _ in p.recv], p.send
    ([(0, ((2, 1),)), (1, ((3, 1),))], ())
    """
    s, d, r1, r2 = _placements(src, dst, src_ranks, dst_ranks, src_mesh, dst_mesh, world_size, True)
    return _rank_plan(s, d, r1, r2, int(rank), int(start), int(per_cut))


@lru_cache(maxsize=4096)
def _rank_plan(s: ArrayType, d: ArrayType, r1: tuple[int, ...], r2: tuple[int, ...], rank: int, start: int,
               per_cut: int) -> RankPlan:
    target, source = _index(r2).get(rank), _index(r1).get(rank)
    part = core.xrank(s, r1, d, r2, start, target, source, per_cut)
    if part is None:
        raise PlanError(f"the verified cross-mesh builder refuses {s} on {s.mesh} -> {d} on {d.mesh}")
    return RankPlan(s, d, r1, r2, rank, start, per_cut, part.recv or (), part.send)
