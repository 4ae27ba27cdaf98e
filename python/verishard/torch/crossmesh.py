"""Moving DTensors between meshes point to point: ``verishard.torch.transfer``
(a whole state dict in one schedule) and ``verishard.torch.redistribute(x,
placements, device_mesh=other)`` (one tensor), both on the verified
cross-mesh schedule.

Each rank plans only its own part, from the layouts alone: per tensor the
pieces it receives and the pieces it sends (``crossmesh.crossmesh_rank_plan``:
``Perrank.rank_recv`` and ``rank_send``; ``Perrankproof.rank_recv_restrict``
and ``rank_send_restrict``: exactly its entries of one world schedule,
``Perrank.wplan``, which no rank builds; ``Perrankproof.wplan_correct``: in
that schedule every target rank assembles exactly its block, every element
of it arrives once, from a rank whose block holds it, and it receives its
block size less what it already holds; ``rank_send_balanced``: each source
block's moved pieces are dealt over the ranks holding it, from a replica
that turns with the tensor's position among the names, so that no rank
sends more than its share rounded up to one piece), each moved piece cut
into slices within the byte budget (``Rounds.cut_box``, the same on both
sides of a piece). The rank then numbers the rounds of its own cuts by a
rule every rank evaluates alike (:func:`rank_rounds`: per sender and
receiver, chunks within the budget in a shift pattern over the ranks; one
partner per round; ``Rankrounds.rank_rounds`` in the core): both sides of
a cut place it in the same round, so no schedule is exchanged
(``Rankroundsproof.rank_rounds_agree``; one partner per round:
``rank_rounds_partner``; at most the budget per pair and round, or one
cut: ``rank_rounds_budget``; every cut once: ``rank_rounds_perm``). Each round
runs as one ``batch_isend_irecv`` over the default process group
(:func:`verishard.torch.backend.run_rounds`), gloo or NCCL.

The tensors of one shape and layouts (and rotation of the deal) share one
rank plan, and a repeated sync of the same layouts, dtypes and budget
reuses its whole schedule (:data:`MAX_CACHED_SCHEDULES` kept, without the
tensors).

A rank holds its source blocks, its target blocks (allocated once, written in
place) and at most two consecutive rounds' send and receive buffers (round
k+1 is posted before round k is waited for, :func:`~verishard.torch.backend.run_rounds`);
no tensor is ever gathered or staged whole anywhere. Before any data moves every rank of the
default group agrees on a fingerprint of every tensor's types, rank lists,
dtype and the budget, and on the fields it names where they differ
(``src_ranks``, every mesh's rank layout, the ``check_agreement`` policy),
under the agreement deadline (:func:`verishard.torch.backend.agree`).

Sources are DTensors (Shard, Replicate, _StridedShard, Partial; on any DeviceMesh of
the world, sub-meshes included: every rank of the world holds the DTensor
object, those outside its mesh with DTensor's empty local tensor) or plain
tensors replicated on the world ranks ``src_ranks`` (ranks outside pass any
tensor of that shape and dtype, e.g. on the ``meta`` device). Targets are a
DeviceMesh and placements per name. A layout our types cannot describe (a
dimension split unevenly by several mesh dimensions: DTensor's nested
``torch.chunk``, uneven ``_StridedShard``), on either side, moves as explicit
boxes of world ranks by the verified box schedule
(:class:`~verishard.torch.backend.BoxPlan`, ``Boxesworldproof.brounds_correct``:
every target rank gets each element of its box once, from a rank holding
it, receiving exactly what it does not hold), whose rounds are packed with
the others. A Partial source (sum, max or min) is first reduced on its own mesh,
after the agreement: the partial types' ``AllReduce`` step over each pending
mesh dimension, which keeps the local shape; the schedule moves the reduced
blocks, planned as the same placements with Replicate for Partial. Partial
targets are refused. Targets laid out as inference engines hold them
(:func:`verishard.torch.targets.fused`, and ``(mesh, placements,
block_fp8())``) are explicit target boxes too, moved by the same box
schedule (:class:`~verishard.torch.targets.BoxTarget`).

Importing this module imports torch; see ``docs/torch.md``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import FrozenInstanceError, dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

from . import dtensor as _conv
from ..crossmesh import RankPlan, crossmesh_rank_plan
from ..crossmesh import checked_ranks as _check_ranks
from ..errors import VerishardError
from ..mesh import Mesh
from ..plan import MAX_SHOWN_PIECES, pieces_table, ranks_text
from .backend import (_REDUCE_OPS, BoxPlan, NotSupportedYet, RedistributionRefused, _device_of, agree,
                      reduction_problem, run_rounds)
from .specs import (INVALID, UNSUPPORTED, planning_mesh, agreement_policy as _policy, holdings as _holdings,
                    mesh_ranks as _mesh_ranks, normalise_placements as _normalise,
                    require_initialized as _require_initialized, spec_types as _types)
from .targets import BoxTarget, Fused, finish as _finish_targets, per_source

__all__ = ["transfer", "plan_transfer", "plan_transfer_world", "TransferSchedule", "rank_rounds", "DEFAULT_BUDGET"]

DEFAULT_BUDGET = 64 << 20


@dataclass(frozen=True)
class _Layout:
    """What a tensor's move shares with every tensor of the same layouts
    (and rotation of the deal): its verified cross-mesh plan and what the
    front end needs around it. One object per layout, referenced by each
    such tensor's :class:`_Move` (a state dict's tens of thousands of
    experts have a handful)."""

    plan: RankPlan | BoxPlan   # a BoxPlan where our types cannot describe a layout (DTensor's nested chunks)
    dtype: torch.dtype
    meta: TensorMeta
    dst_placements: tuple
    ranks: tuple[int, ...] = ()    # both sides' world ranks
    out_shape: tuple[int, ...] | None = None   # with a BoxPlan: this rank's target local shape (None: not a target)
    into: BoxTarget | None = None  # a fused or block_fp8 target (torch/targets.py): its boxes, buffer and result


class _Move:
    """One tensor of a transfer: its name, its layout's shared part
    (:class:`_Layout`, whose fields it reads through) and its own objects.
    Immutable; :func:`_with` makes a changed copy."""

    __slots__ = ("name", "layout", "local", "pending", "dst_mesh")
    name: str
    layout: _Layout
    local: torch.Tensor | None     # this rank's source block (None: not a source)
    pending: Any                   # a Partial source DTensor, reduced on its own mesh before the schedule runs
    dst_mesh: DeviceMesh

    def __init__(self, name: str, layout: _Layout, local: torch.Tensor | None, pending: Any,
                 dst_mesh: DeviceMesh) -> None:
        put = object.__setattr__
        put(self, "name", name)
        put(self, "layout", layout)
        put(self, "local", local)
        put(self, "pending", pending)
        put(self, "dst_mesh", dst_mesh)

    def __setattr__(self, field: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {field!r}")

    plan = property(lambda self: self.layout.plan)
    dtype = property(lambda self: self.layout.dtype)
    meta = property(lambda self: self.layout.meta)
    dst_placements = property(lambda self: self.layout.dst_placements)
    ranks = property(lambda self: self.layout.ranks)
    out_shape = property(lambda self: self.layout.out_shape)
    into = property(lambda self: self.layout.into)

    def __repr__(self) -> str:
        return f"<_Move {self.name}: {self.layout.plan!r}>"


@dataclass(frozen=True)
class TransferSchedule:
    """A transfer planned on one rank (local, no communication): the
    tensors' plans (each this rank's own part, :class:`RankPlan`), the
    rounds ``(name, sender, receiver, global box)`` it takes part in, in
    order, with their round numbers (which every rank derives alike:
    :func:`rank_rounds`), and the budget. ``rank``: the rank whose part
    this is, or None for a world view (:func:`plan_transfer_world`: every
    rank's rounds). :meth:`sent`, :meth:`received` and :meth:`lower_bound`
    are per world rank, in bytes (sent and received: over the cuts of this
    schedule); :meth:`loads` gives the bytes sent and received of the rank
    (of every rank, in a world view)."""

    moves: tuple[_Move, ...]
    rounds: tuple[tuple[tuple[str, int, int, tuple], ...], ...]
    budget_bytes: int
    rank: int | None = None
    round_ids: tuple[int, ...] = ()

    def _bytes(self, rank: int, side: int) -> int:
        size = {m.name: m.dtype.itemsize for m in self.moves}
        return sum(size[_name(c[0])] * _volume(c[3]) for rd in self.rounds for c in rd
                   if c[side] == rank and c[1] != c[2])

    def sent(self, rank: int) -> int:
        """Bytes world rank ``rank`` sends."""
        return self._bytes(rank, 1)

    def loads(self) -> dict[int, tuple[int, int]]:
        """``{rank: (bytes sent, bytes received)}`` for the schedule's rank
        (every rank of either side in a world view), in one pass."""
        size = {m.name: m.dtype.itemsize for m in self.moves}
        out = {r: [0, 0] for r in (self.ranks() if self.rank is None else (self.rank,))}
        for rd in self.rounds:
            for key, a, b, box in rd:
                if a != b:
                    n = size[_name(key)] * _volume(box)
                    if a in out:
                        out[a][0] += n
                    if b in out:
                        out[b][1] += n
        return {r: (v[0], v[1]) for r, v in out.items()}

    def received(self, rank: int) -> int:
        """Bytes world rank ``rank`` receives."""
        return self._bytes(rank, 2)

    def lower_bound(self, rank: int) -> int:
        """Bytes it must receive: its target blocks less what its source blocks
        already hold (``CrossMeshPlan.lower_bound``, from the types)."""
        out = 0
        for m in self.moves:
            if isinstance(m.plan, BoxPlan):
                out += m.plan.lower_bound(rank) * m.dtype.itemsize
                continue
            j = m.plan.dst_index(rank)
            if j is not None:
                out += m.plan.lower_bound(j) * m.dtype.itemsize
        return out

    def target_bytes(self, rank: int) -> int:
        """Bytes of its target blocks."""
        out = 0
        for m in self.moves:
            if isinstance(m.plan, BoxPlan):
                out += sum(_volume(box) for r, box, _ in m.plan.dst if r == rank) * m.dtype.itemsize
                continue
            j = m.plan.dst_index(rank)
            if j is not None:
                out += _volume(tuple((0, n) for n in m.plan.dst.valid_shape(j))) * m.dtype.itemsize
        return out

    def round_loads(self, rank: int) -> list[tuple[int, int]]:
        """(bytes sent, bytes received) by ``rank`` in each round."""
        size = {m.name: m.dtype.itemsize for m in self.moves}
        return [(sum(size[_name(c[0])] * _volume(c[3]) for c in rd if c[1] == rank and c[2] != rank),
                 sum(size[_name(c[0])] * _volume(c[3]) for c in rd if c[2] == rank and c[1] != rank))
                for rd in self.rounds]

    def ranks(self) -> tuple[int, ...]:
        """Every world rank on either side."""
        return tuple(sorted({r for m in self.moves for r in m.ranks}))

    def _pieces(self) -> list[tuple[int, str, int, int, tuple, int]]:
        """Every piece sent: (round number, tensor, sender, receiver, global box, bytes)."""
        size = {m.name: m.dtype.itemsize for m in self.moves}
        ids = self.round_ids or range(1, len(self.rounds) + 1)
        return [(i, _name(c[0]), c[1], c[2], c[3], size[_name(c[0])] * _volume(c[3]))
                for i, rd in zip(ids, self.rounds) for c in rd if c[1] != c[2]]

    def __str__(self) -> str:
        """The tensors, then a table as the type plans print (round, tensor,
        sender -> receiver, global box, bytes; the first
        :data:`~verishard.plan.MAX_SHOWN_PIECES` pieces, then a count), then
        what each rank receives against what it lacks."""
        pieces, ranks = self._pieces(), self.ranks()
        n = len(self.rounds)
        whose = "" if self.rank is None else f", rank {self.rank}'s part"
        lines = [f"transfer schedule over ranks {ranks_text(ranks)}{whose}: {len(self.moves)} tensor"
                 f"{'s' if len(self.moves) != 1 else ''}; {len(pieces)} pieces sent in {n} round{'s' if n != 1 else ''}"
                 f" within {self.budget_bytes} bytes per round"]
        for m in self.moves[:MAX_SHOWN_PIECES]:
            dtype = str(m.dtype).removeprefix("torch.")
            if isinstance(m.plan, BoxPlan):
                how = m.into.describe() if m.into is not None else "DTensor's layouts"
                what = (f"as boxes ({how}): {len(m.plan.src)} source boxes -> {len(m.plan.dst)} target boxes "
                        "(Boxesworldproof.brounds_correct)")
            else:
                what = (f"{m.plan.src} on ranks {ranks_text(m.plan.src_ranks)} -> {m.plan.dst} on ranks "
                        f"{ranks_text(m.plan.dst_ranks)}")
            lines.append(f"  {m.name}: {dtype}, {what}")
        if len(self.moves) > MAX_SHOWN_PIECES:
            lines.append(f"  ... {len(self.moves) - MAX_SHOWN_PIECES} more tensors")
        lines += pieces_table(pieces)
        loads = self.loads()
        if loads:
            shown = tuple(loads)
            worst = max(shown, key=lambda r: (loads[r][1], -r))
            lack = max(self.lower_bound(r) for r in shown)
            senders = [r for r in shown if loads[r][0]]
            if senders:
                busiest = max(senders, key=lambda r: (loads[r][0], -r))
                mean = sum(loads[r][0] for r in senders) / len(senders)
                lines.append(f"sent: at most {loads[busiest][0]} bytes per rank (rank {busiest}); "
                             f"{mean:.0f} on average over the {len(senders)} sending ranks")
            lines.append(f"received: at most {loads[worst][1]} bytes per rank (rank {worst}); lower bound {lack} bytes")
        return "\n".join(lines)

    def __repr__(self) -> str:   # the fields hold tensors and long tuples of boxes: str() has the table
        return (f"<TransferSchedule: {len(self.moves)} tensors over ranks {ranks_text(self.ranks())}, "
                f"{len(self._pieces())} pieces in {len(self.rounds)} rounds, budget {self.budget_bytes} bytes>")

    def to_json(self) -> dict[str, Any]:
        """Plain data: the tensors, every piece sent (its round, 1 first) and the per-rank figures (bytes)."""
        moves = []
        for m in self.moves:
            entry = {"name": m.name, "dtype": str(m.dtype).removeprefix("torch.")}
            if isinstance(m.plan, BoxPlan):
                entry |= {"boxes": m.plan.to_json()}
            else:
                entry |= {"src": str(m.plan.src), "src_mesh": str(m.plan.src.mesh), "src_ranks": list(m.plan.src_ranks),
                          "dst": str(m.plan.dst), "dst_mesh": str(m.plan.dst.mesh), "dst_ranks": list(m.plan.dst_ranks)}
            moves.append(entry)
        pieces = [{"round": i, "tensor": name, "sender": a, "receiver": b, "box": [list(x) for x in box],
                   "bytes": nbytes} for i, name, a, b, box, nbytes in self._pieces()]
        return {"kind": "transfer", "rank": self.rank, "budget_bytes": self.budget_bytes, "tensors": moves,
                "rounds": len(self.rounds),
                "pieces": pieces,
                "ranks": [{"rank": r, "sent": sent, "received": received, "lower_bound": self.lower_bound(r)}
                          for r, (sent, received) in self.loads().items()]}

    def fingerprint(self, fields: dict | None = None) -> int:
        """A 60-bit fingerprint of the schedule (every tensor's types, both rank
        lists, dtype, pending reduction, target conversion; the budget) and ``fields``."""
        import hashlib
        obj = [([m.name, str(m.plan.src), str(m.plan.dst), str(m.dtype)] if isinstance(m.plan, BoxPlan) else
                [m.name, str(m.plan.src), str(m.plan.src.mesh), list(m.plan.src_ranks), str(m.plan.dst),
                 str(m.plan.dst.mesh), list(m.plan.dst_ranks), str(m.dtype)])
               + [str(tuple(m.pending.placements)) if m.pending is not None else None]
               + [m.into.describe() if m.into is not None else None] for m in self.moves]
        text = json.dumps([obj, self.budget_bytes, fields or {}], sort_keys=True)
        return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16) or 1


def _name(key: Any) -> str:
    """The tensor a packed cut belongs to: its key, or the key's first part (a box schedule's cuts)."""
    return key if isinstance(key, str) else key[0]


def _volume(box) -> int:
    n = 1
    for _, length in box:
        n *= length
    return n


def rank_rounds(cuts: Sequence[tuple[Any, int, int, tuple, int]], world_size: int,
                budget_bytes: int) -> tuple[list[int], list[list[tuple[Any, int, int, tuple]]]]:
    """The rounds of one rank's cuts ``(key, sender, receiver, global box,
    bytes)``, by a rule every rank evaluates alike from its own cuts: the
    cuts of each (sender, receiver) pair, in the order given (the transfer's
    names, then each tensor's own order: the same on both sides of the pair),
    go in chunks of at most ``budget_bytes`` (a cut larger than the budget
    alone); chunk ``k`` of the pair ``a -> b`` is round ``(k W + s) 2 + c``,
    ``W`` the least power of two of at least ``world_size`` (and 2), ``s =
    (b - a) mod W`` and ``c`` bit ``v`` of ``a``, ``2^v`` the largest power
    of two dividing ``s``. In round ``(k, s, c)`` a rank ``x`` could only send
    to ``x + s`` (with colour bit ``v`` of ``x``) or receive from ``x - s``
    (whose bit ``v`` differs from ``x``'s, as ``s`` is an odd multiple of
    ``2^v`` and ``W`` a multiple of ``2^(v+1)``): so every round holds one
    pair's chunk per rank, both sides place it in the same round and in the
    same order, and a rank sends or receives at most the budget per round
    (or one cut larger than it). Returns the round numbers and the rounds,
    in increasing order: ranks run them in that order, each waiting only on
    the one partner of its round (the least unfinished round number always
    has both its ranks at it). The verified core computes it
    (``Rankrounds.rank_rounds``; theorems ``Rankroundsproof.rank_rounds_agree``,
    ``rank_rounds_partner``, ``rank_rounds_budget``, ``rank_rounds_perm``);
    this function only converts.

    >>> ids, rounds = rank_rounds([("w", 0, 1, ((0, 4),), 16), ("v", 0, 1, ((0, 4),), 16),
    ...                            ("w", 2, 0, ((4, 4),), 16)], 4, 16)
    >>> [(t, [(k, a, b) for k, a, b, _ in rd]) for t, rd in zip(ids, rounds)]
    [(2, [('w', 0, 1)]), (5, [('w', 2, 0)]), (10, [('v', 0, 1)])]
    """
    from .. import core   # the numbering is the verified core's (Rankrounds.rank_rounds); here only conversion
    numbered = core.rank_rounds([(a, b, nbytes) for _, a, b, _, nbytes in cuts], world_size, budget_bytes)
    return [t for t, _ in numbered], [[cuts[i][:4] for i in rd] for _, rd in numbered]


def _own_cuts(moves: Sequence[_Move], me: int) -> list[tuple[Any, int, int, tuple, int]]:
    """The cuts rank ``me`` sends or receives, in the order of the moves
    and, within a move, in an order both sides of a cut read alike: a
    plan's pieces (at most one per sender and receiver), each cut as
    ``Rounds.cut_box`` cuts it; a box schedule's rounds."""
    shared: dict[int, tuple] = {}   # per plan object (the tensors of one layout share theirs)
    out: list[tuple[Any, int, int, tuple, int]] = []
    for m in moves:
        plan, size = m.plan, m.dtype.itemsize
        if isinstance(plan, BoxPlan):
            out += [((m.name, key), a, b, box, size * _volume(box)) for rd in plan.rounds
                    for key, a, b, box in rd if a != b and me in (a, b)]
            continue
        cuts = shared.get(id(plan))
        if cuts is None:
            cuts = shared[id(plan)] = _plan_cuts(plan)
        out += [(m.name, a, b, box, size * n) for a, b, box, n in cuts]
    return out


def _plan_cuts(plan: RankPlan) -> tuple[tuple[int, int, tuple, int], ...]:
    """A rank plan's cuts ``(sender, receiver, box, elements)``: what it
    receives, then what it sends."""
    return (tuple((p.src, plan.rank, box, _volume(box)) for p, cuts in plan.recv for box in cuts)
            + tuple((plan.rank, r, box, _volume(box)) for _, r, _, cuts in plan.send for box in cuts))


def _contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(tuple(shape)):
        out.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(out))


def _ranks_of(mesh: DeviceMesh) -> tuple[int, ...]:
    """The world ranks of a DeviceMesh, row-major."""
    return _mesh_key(mesh)[1]


_MESH_KEYS: dict[int, tuple[DeviceMesh, tuple, int]] = {}   # id(mesh): (mesh, key, number)
_MESH_NUMBERS: dict[tuple, int] = {}                           # key: number
_NEXT_MESH_NUMBER = itertools.count()


def _mesh_entry(mesh: DeviceMesh) -> tuple[DeviceMesh, tuple, int]:
    """What planning reads of a DeviceMesh (device type, world ranks
    row-major, shape, dimension names) and a number for that key, read once
    per mesh object: ``DeviceMesh.mesh`` rebuilds its rank tensor at every
    access, and a state dict asks for it with every tensor. Kept by identity
    with the mesh itself (so the id is not reused), for at most 256 meshes.
    A number never stands for another key (numbers are not reused after
    the table is cleared; equal keys get one number until then, after it at
    worst a plan is not shared), so layout keys compare a mesh by its
    number, not its rank list."""
    hit = _MESH_KEYS.get(id(mesh))
    if hit is not None and hit[0] is mesh:
        return hit
    ranks = mesh.mesh
    key = (mesh.device_type, tuple(int(r) for r in ranks.flatten().tolist()), tuple(ranks.shape), mesh.mesh_dim_names)
    if len(_MESH_KEYS) >= 256:
        _MESH_KEYS.clear()
    if len(_MESH_NUMBERS) >= 4096:
        _MESH_NUMBERS.clear()
    number = _MESH_NUMBERS.get(key)
    if number is None:
        number = _MESH_NUMBERS[key] = next(_NEXT_MESH_NUMBER)
    out = _MESH_KEYS[id(mesh)] = (mesh, key, number)
    return out


def _mesh_key(mesh: DeviceMesh) -> tuple:
    """What planning reads of a DeviceMesh (:func:`_mesh_entry`)."""
    return _mesh_entry(mesh)[1]


def _move(name: str, x: Any, target: Any, src_ranks: Sequence[int] | None, world: int,
          me: int, budget_bytes: int, position: int = 0, holds: bool = True) -> tuple[_Move | None, list]:
    """The move of one tensor on rank ``me``, or its problems (local, no
    communication): ``me``'s own part of its plan. ``position``: the
    tensor's place among the transfer's names, which rotates the dealing of
    its replicated blocks' pieces over their holders (``Perrank.rank_send``),
    so that tensors whose blocks have more holders than moved pieces load
    different replicas. ``holds``: whether this process holds ``me``'s
    source blocks (false when planning another rank's part)."""
    into = target if isinstance(target, BoxTarget) else None
    if into is not None:
        target = (into.mesh, into.placements)
    if not (isinstance(target, (tuple, list)) and len(target) == 2 and isinstance(target[0], DeviceMesh)):
        return None, [(INVALID, f"{name}: the target must be (DeviceMesh, placements), not {target!r}")]
    dst_mesh, placements = target
    if isinstance(x, DTensor):
        spec, src_mesh = x._spec, x.device_mesh
        meta = spec.tensor_meta
        r1 = _ranks_of(src_mesh)
        local = x._local_tensor if holds and me in r1 else None
    elif isinstance(x, torch.Tensor):
        if src_ranks is None:
            return None, [(INVALID, f"{name}: a plain tensor needs src_ranks= (the world ranks that hold it whole)")]
        r1 = tuple(int(r) for r in src_ranks)
        src_mesh = None
        meta = TensorMeta(tuple(x.shape), _contiguous_stride(x.shape), x.dtype)
        local = x if holds and me in r1 else None
        if local is not None and local.is_meta:
            return None, [(INVALID, f"{name}: rank {me} is a source (src_ranks) but passes a meta tensor")]
    else:
        return None, [(INVALID, f"{name}: a DTensor or a torch.Tensor, not {type(x).__name__}")]
    pl, problems = _normalise(placements, x if isinstance(x, DTensor) else _Shape(meta.shape), dst_mesh)
    if problems:
        return None, [(k, f"{name}: {t}") for k, t in problems]
    dst_spec = DTensorSpec(dst_mesh, pl, tensor_meta=meta)
    if any(p.is_partial() for p in pl):
        return None, [(UNSUPPORTED, f"{name}: a Partial target placement: a cross-mesh move delivers plain "
                                    "layouts; make it pending on the target mesh afterwards")]
    pending = None
    if src_mesh is not None and any(p.is_partial() for p in spec.placements):
        ops = {p.reduce_op for p in spec.placements if p.is_partial()}
        if len(ops) > 1 or not ops <= set(_REDUCE_OPS):
            return None, [(UNSUPPORTED, f"{name}: a Partial source reduced by {', '.join(sorted(ops))}: a cross-mesh "
                                        "move reduces one of sum, max, min; reduce it on its own mesh first")]
        why = reduction_problem(meta.dtype, next(iter(ops)), True, src_mesh.device_type)
        if why:
            return None, [(UNSUPPORTED, f"{name}: {why}")]
        # planned as the reduced layout; the reduction itself runs after the agreement (transfer)
        pending, spec = x, DTensorSpec(src_mesh, tuple(Replicate() if p.is_partial() else p for p in spec.placements),
                                       tensor_meta=meta)
    if into is not None:   # explicit target boxes (torch/targets.py): the verified box schedule
        m, p = _box_move(name, spec if src_mesh is not None else None, r1, meta, dst_spec, local, world, me,
                         budget_bytes, into)
        return (_with(m, pending=pending) if m is not None else None), p
    if src_mesh is not None:
        s, d, problems = _types_once(src_mesh, spec, dst_spec)
    else:
        try:
            s = _conv.from_placements(Mesh((("src", len(r1)),)), meta.shape, [Replicate()])
        except VerishardError as e:
            return None, [(INVALID, f"{name}: {e}")]
        _, d, problems = _types(planning_mesh(dst_mesh), dst_spec, dst_spec)
    if problems and all(k == UNSUPPORTED for k, _ in problems):
        m, p = _box_move(name, spec if src_mesh is not None else None, r1, meta, dst_spec, local, world, me,
                         budget_bytes)
        return (_with(m, pending=pending) if m is not None else None), p
    if problems:
        return None, [(k, f"{name}: {t}") for k, t in problems]
    try:
        plan = crossmesh_rank_plan(s, d, me, r1, _ranks_of(dst_mesh), world_size=world,
                                   start=position % _holders(s), per_cut=_per_cut(budget_bytes, meta.dtype.itemsize))
    except VerishardError as e:
        return None, [(INVALID, f"{name}: {e}")]
    if local is not None:
        want = plan.src.valid_shape(plan.src_index(me))
        if tuple(local.shape) != tuple(want):
            return None, [(INVALID, f"{name}: rank {me}'s source block has shape {tuple(local.shape)}, its layout "
                                    f"gives {tuple(want)}")]
    return _Move(name, _Layout(plan, meta.dtype, meta, pl, plan.src_ranks + plan.dst_ranks), local, pending,
                 dst_mesh), []


_TYPES: dict[tuple, tuple] = {}


def _types_once(src_mesh: DeviceMesh, spec: DTensorSpec, dst_spec: DTensorSpec) -> tuple[Any, Any, list]:
    """``verishard.torch._types`` of a source and a target spec, computed
    once per meshes, placements, shape and stride: the tensors of one
    layout (a model's layers, an MoE's experts) share the answer (for at most
    4096 layouts at a time)."""
    meta = spec.tensor_meta
    key = (_mesh_key(src_mesh), tuple(spec.placements), _mesh_key(dst_spec.mesh), tuple(dst_spec.placements),
           tuple(meta.shape), tuple(meta.stride))
    out = _TYPES.get(key)
    if out is None:
        if len(_TYPES) >= 4096:
            _TYPES.clear()
        out = _TYPES[key] = _types((planning_mesh(src_mesh), planning_mesh(dst_spec.mesh)), spec, dst_spec)
    return out


def _box_move(name: str, src_spec: DTensorSpec | None, r1: tuple[int, ...], meta: TensorMeta,
              dst_spec: DTensorSpec, local: Any, world: int, me: int, budget_bytes: int,
              into: BoxTarget | None = None) -> tuple[_Move | None, list]:
    """The move of a layout our types cannot describe (DTensor's nested
    uneven chunks, on either side) as explicit boxes of world ranks, by the
    verified box schedule (``Boxesworldproof.brounds_correct``); a plain
    tensor source is the whole box on every rank of ``r1``."""
    dst_mesh = dst_spec.mesh
    r2 = _ranks_of(dst_mesh)
    try:
        r1 = _check_ranks(r1, 0, len(r1), "source", world)
        if src_spec is not None:
            src, src_shapes = _holdings(src_spec, src_spec.mesh)
        else:
            whole = tuple((0, n) for n in meta.shape)
            src, src_shapes = tuple((r, whole, (0,) * len(whole)) for r in r1), (tuple(meta.shape),) * len(r1)
        dst, dst_shapes = _holdings(dst_spec, dst_mesh) if into is None else into.holdings(dst_spec)
        plan = BoxPlan.build(tuple(meta.shape), src, dst, meta.dtype.itemsize, budget_bytes)
    except VerishardError as e:
        return None, [(INVALID, f"{name}: {e}")]
    if local is not None and tuple(local.shape) != src_shapes[r1.index(me)]:
        return None, [(INVALID, f"{name}: rank {me}'s source block has shape {tuple(local.shape)}, its layout "
                                f"gives {src_shapes[r1.index(me)]}")]
    return _Move(name, _Layout(plan, meta.dtype, meta, tuple(dst_spec.placements), r1 + r2,
                               dst_shapes[r2.index(me)] if me in r2 else None, into), local, None, dst_mesh), []


def _per_cut(budget_bytes: int, itemsize: int) -> int:
    """The most elements of one cut: the budget's, at least one element (the
    core takes budgets up to 2**50 elements; a smaller cut is within any larger budget)."""
    return min(max(1, budget_bytes // itemsize), 2**50)


def _holders(t) -> int:
    """How many devices of an (even) type hold each of its blocks: the
    period of the dealing's rotation (every rotation is as verified, and
    tensors of one layout then share at most this many schedules)."""
    return max(1, t.mesh.num_devices // math.prod(t.mesh.part_sizes[p] for d in t.dims for p in d.parts))


class _Shape:
    """What :func:`verishard.torch._normalise` reads of a tensor: its rank and shape."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.ndim = len(self.shape)


def plan_transfer(tensors: Mapping[str, Any], targets: Mapping[str, Any], *, src_ranks: Sequence[int] | None = None,
                  budget_bytes: int = DEFAULT_BUDGET, rank: int | None = None) -> TransferSchedule:
    """The schedule :func:`transfer` runs on this rank (local, no
    communication): this rank's own part, planned from the layouts alone
    (no other rank's pieces are built); ``rank``: plan another world rank's
    part instead (its source blocks are not read). Raises
    :class:`~verishard.torch.backend.RedistributionRefused` naming every problem."""
    sched, problems = _plan(tensors, targets, src_ranks, budget_bytes, rank)
    if problems:
        raise _error(problems)
    return sched


def plan_transfer_world(tensors: Mapping[str, Any], targets: Mapping[str, Any], *,
                        src_ranks: Sequence[int] | None = None, budget_bytes: int = DEFAULT_BUDGET) -> TransferSchedule:
    """A world view, for tests and benchmarks: every rank's part planned
    here (:func:`plan_transfer` with ``rank=``) and their rounds merged by
    round number, each cut once (from its receiver's part); :meth:`TransferSchedule.loads`
    then gives every rank's bytes sent and received. Its size is the
    world's: a transfer never builds it."""
    first = plan_transfer(tensors, targets, src_ranks=src_ranks, budget_bytes=budget_bytes)
    merged: dict[int, list] = {}
    for r in first.ranks():
        part = first if r == first.rank else plan_transfer(tensors, targets, src_ranks=src_ranks,
                                                           budget_bytes=budget_bytes, rank=r)
        for t, rd in zip(part.round_ids, part.rounds):
            merged.setdefault(t, []).extend(c for c in rd if c[2] == r)
    ids = sorted(merged)
    return replace(first, rounds=tuple(tuple(merged[t]) for t in ids), round_ids=tuple(ids), rank=None)


def _error(problems: list) -> RedistributionRefused:
    cls = NotSupportedYet if all(k == UNSUPPORTED for k, _ in problems) else RedistributionRefused
    return cls("transfer refused before any data moved:\n  " + "\n  ".join(t for _, t in problems))


def _plan(tensors: Any, targets: Any, src_ranks: Any, budget_bytes: Any,
          rank: Any = None) -> tuple[TransferSchedule | None, list]:
    if not isinstance(tensors, Mapping) or not isinstance(targets, Mapping):
        return None, [(INVALID, "tensors and targets must be mappings from names to tensors and to "
                                "(DeviceMesh, placements)")]
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 1:
        return None, [(INVALID, f"budget_bytes must be a positive integer, not {budget_bytes!r}")]
    world = dist.get_world_size()
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world):
        return None, [(INVALID, f"rank must be a world rank 0..{world - 1}, not {rank!r}")]
    targets, fused_problems = per_source(targets, tensors)   # fused and block_fp8 targets, one per source
    if fused_problems:
        return None, [(INVALID, t) for t in fused_problems]
    missing = sorted(set(map(str, targets)) ^ set(map(str, tensors)))
    if missing:
        return None, [(INVALID, f"names in one of tensors and targets only: {', '.join(missing[:5])}"
                                + (" ..." if len(missing) > 5 else "") + " (every rank passes every name)")]
    own = dist.get_rank()
    me = own if rank is None else rank
    names = sorted(targets, key=str)
    index: dict[tuple, int] = {}      # each distinct layout key once: its (slow) hash computed once per tensor
    layouts = [_layout_index(index, _layout_key(tensors[n], targets[n])) for n in names]
    key = _schedule_key(names, layouts, tuple(index), src_ranks, world, me, budget_bytes)
    if key is not None and me == own and key in _SCHEDULES:
        _SCHEDULES.move_to_end(key)
        return _with_tensors(_SCHEDULES[key], names, tensors, targets), []
    moves, problems = [], []
    shared: dict[tuple[int, int], _Move] = {}   # (layouts, rotation): the first such tensor's move
    period: dict[int, int] = {}                 # layouts: the rotation's period (the blocks' holders)
    for position, (name, lk) in enumerate(zip(names, layouts)):
        m = None
        if lk in period and (lk, position % period[lk]) in shared:
            m = _like(shared[(lk, position % period[lk])], str(name), tensors[name], targets[name][0])
        if m is None:
            m, p = _move(str(name), tensors[name], targets[name], src_ranks, world, me, budget_bytes, position,
                         holds=me == own)
            problems += p
            if m is not None and lk is not None and isinstance(m.plan, RankPlan):
                period[lk] = _holders(m.plan.src)
                shared[(lk, m.plan.start)] = m
        if m is not None:
            moves.append(m)
    if problems:
        return None, problems
    ids, rounds = rank_rounds(_own_cuts(moves, me), world, budget_bytes)
    sched = TransferSchedule(tuple(moves), tuple(tuple(rd) for rd in rounds), budget_bytes, me, tuple(ids))
    if key is not None and me == own:   # kept without the tensors: a later sync of the same layouts brings its own
        _SCHEDULES[key] = _kept(sched)
        while len(_SCHEDULES) > MAX_CACHED_SCHEDULES:
            _SCHEDULES.popitem(last=False)
    return sched, []


MAX_CACHED_SCHEDULES = 2   # a rank's schedules: the last two (e.g. a policy's sync and its reverse)
_SCHEDULES: OrderedDict = OrderedDict()


def _layout_key(x: Any, target: Any) -> tuple | None:
    """What a tensor's move depends on besides its name, rank and position:
    the source's layout (mesh, placements, global shape and stride, dtype;
    a plain tensor's shape, dtype and whether it is on ``meta``) and the
    target (mesh, placements); a mesh as its number (:func:`_mesh_entry`:
    one per rank layout), so that the key hashes in a few steps. None where
    the arguments are not ones a plan is shared for (the planning then
    names any problem)."""
    try:
        if not (isinstance(target, (tuple, list)) and len(target) == 2 and isinstance(target[0], DeviceMesh)):
            return None
        dst_mesh, placements = target
        placements = tuple(placements) if isinstance(placements, (tuple, list)) else placements
        if isinstance(x, DTensor):
            spec = x._spec
            meta = spec.tensor_meta
            return (_mesh_entry(spec.mesh)[2], spec.placements, meta.shape, meta.stride, meta.dtype,
                    _mesh_entry(dst_mesh)[2], placements)
        if isinstance(x, torch.Tensor):
            return (x.shape, x.dtype, x.is_meta, _mesh_entry(dst_mesh)[2], placements)
        return None
    except (TypeError, ValueError):  # odd placements: planned (and refused) afresh
        return None


def _layout_index(index: dict, key: tuple | None) -> int | None:
    """The number of a layout key in ``index`` (added when new); None for none or an unhashable one."""
    if key is None:
        return None
    try:
        return index.setdefault(key, len(index))
    except TypeError:
        return None


def _schedule_key(names: Sequence[Any], layouts: Sequence[int | None], distinct: Sequence[tuple], src_ranks: Any,
                  world: int, me: int, budget_bytes: int) -> tuple | None:
    """Everything a transfer's schedule depends on: per name its layouts
    (``layouts[k]`` indexes ``distinct``, the :func:`_layout_key` of each,
    in order of appearance), the source ranks, world size, this rank and
    the budget. None where one is not kept (see :func:`_layout_key`)."""
    if None in layouts:
        return None
    try:
        ranks = None if src_ranks is None else tuple(int(r) for r in src_ranks)
    except (TypeError, ValueError):  # odd rank lists: planned (and refused) afresh
        return None
    return (world, me, budget_bytes, ranks, tuple(map(str, names)), tuple(layouts), tuple(distinct))


def _with(m: _Move, **fields: Any) -> _Move:
    """``m`` with ``fields`` (of ``name``, ``layout``, ``local``, ``pending``, ``dst_mesh``) changed."""
    return _Move(fields.get("name", m.name), fields.get("layout", m.layout), fields.get("local", m.local),
                 fields.get("pending", m.pending), fields.get("dst_mesh", m.dst_mesh))


def _like(template: _Move, name: str, x: Any, dst_mesh: DeviceMesh) -> _Move | None:
    """The move of tensor ``x`` (named ``name``) whose layouts and rotation
    are ``template``'s: its layout's shared part, with this tensor's source
    block; None where that block is not the layout's (planned in full,
    which names the problem)."""
    local = None
    if template.local is not None:   # this rank holds a source block of the layout
        local = x._local_tensor if isinstance(x, DTensor) else x
        if local.shape != template.local.shape or (local.is_meta and not isinstance(x, DTensor)):
            return None
    return _Move(name, template.layout, local, x if template.pending is not None else None, dst_mesh)


_HOLDS_LOCAL, _HOLDS_PENDING = 1, 2   # what a kept schedule's move took from its tensor (bits)


def _kept(sched: TransferSchedule) -> tuple:
    """What :data:`_SCHEDULES` keeps of a schedule: the schedule without
    its moves, each move's shared layout part (referenced, not copied) and
    which of its tensor's objects it held; no tensor."""
    return (replace(sched, moves=()), tuple(m.layout for m in sched.moves),
            tuple((_HOLDS_LOCAL if m.local is not None else 0) | (_HOLDS_PENDING if m.pending is not None else 0)
                  for m in sched.moves))


def _with_tensors(kept: tuple, names: Sequence[Any], tensors: Mapping, targets: Mapping) -> TransferSchedule:
    """A kept schedule (:func:`_kept`) with this call's tensors and target
    meshes in its moves (one per name, in the order of ``names``)."""
    sched, layouts, held = kept
    moves = []
    for name, layout, h in zip(names, layouts, held):
        x = tensors[name]
        moves.append(_Move(str(name), layout,
                           (x._local_tensor if isinstance(x, DTensor) else x) if h & _HOLDS_LOCAL else None,
                           x if h & _HOLDS_PENDING else None, targets[name][0]))
    return replace(sched, moves=tuple(moves))


def transfer(tensors: Mapping[str, Any], targets: Mapping[str, tuple[DeviceMesh, Sequence[Any]]], *,
             src_ranks: Sequence[int] | None = None, budget_bytes: int = DEFAULT_BUDGET,
             check_agreement: bool | str = True, deadline_s: float | None = None) -> dict[str, DTensor]:
    """Move every tensor of ``tensors`` to ``targets[name]`` (a DeviceMesh and
    placements) in one verified schedule; returns this rank's DTensors, by
    name, for the targets whose mesh holds this rank (none on a rank outside
    every target mesh). A target may also be ``fused(...)`` (its parts are
    source names; the result is the rank's fused local tensor) or ``(mesh,
    placements, block_fp8(...))`` (the result a ``BlockFP8Shard``):
    :mod:`verishard.torch.targets`.

    Collective over every rank of the default group: they agree first (a
    rank whose arguments name other ranks, a ``src_ranks`` or a mesh laid
    out otherwise, is refused with the others), then ranks on neither side
    return ``{}``; with ``check_agreement=False`` they may skip the call. Per round a rank
    sends and receives at most ``budget_bytes`` (or one slice larger than
    it); every rank receives exactly the bytes of its target blocks that its
    source blocks do not hold (:meth:`TransferSchedule.lower_bound`).
    ``check_agreement``: True (default) or "always" compare the schedule's
    fingerprint, ``src_ranks``, every mesh's rank layout and this policy
    across the default group before any data moves (every call:
    ``"first"`` means the same here; a field that differs is named), False
    skips it. ``deadline_s``: as :func:`verishard.torch.redistribute`'s.
    """
    _require_initialized()
    mode, deadline = _policy(check_agreement, deadline_s)
    sched, problems = _plan(tensors, targets, src_ranks, budget_bytes)
    me = dist.get_rank()
    if mode is not False:
        # over the whole default group, each rank's plan matched against those of the ranks it names
        # (sub-meshes run separate plans): a rank whose arguments name other ranks (src_ranks, a mesh's
        # layout) would otherwise agree within its own rank set only and move wrong data
        fields = _agreed_fields(tensors, targets, src_ranks, mode)
        if sched is not None:
            fp = sched.fingerprint(fields)
            agree(fp, {"errors": [], "plan": f"{fp:x}", **fields,
                       "desc": f"transfer of {len(sched.moves)} tensors, budget {budget_bytes}"},
                  deadline_s=deadline, group=sched.ranks())
        else:
            agree(0, {"errors": [t for _, t in problems], "unsupported": all(k == UNSUPPORTED for k, _ in problems),
                      **fields}, deadline_s=deadline)
    elif problems:
        raise _error(problems)
    if me not in sched.ranks():
        return {}
    return run_schedule(_reduce_pending(sched))


def _agreed_fields(tensors: Any, targets: Any, src_ranks: Any, mode: Any) -> dict:
    """The record's named fields of a transfer (each names itself when the
    ranks differ on it): ``src_ranks``, every mesh's rank layout (sources'
    and targets', :func:`verishard.torch._mesh_ranks`, in the order of the
    names) and the agreement policy."""
    try:
        src = "None" if src_ranks is None else json.dumps([int(r) for r in src_ranks])
    except (TypeError, ValueError):
        src = repr(src_ranks)[:200]
    layouts: list[str] = []
    try:
        for name in sorted(targets, key=str):
            t = targets[name]
            sources = [n for n, _ in t.parts] if isinstance(t, Fused) else [name]
            for mesh in ([tensors.get(n).device_mesh for n in sources if isinstance(tensors.get(n), DTensor)]
                         + [t.mesh if isinstance(t, Fused) else t[0] if isinstance(t, (tuple, list)) and t else None]):
                if isinstance(mesh, DeviceMesh):
                    text = _mesh_ranks(mesh)
                    if text not in layouts:
                        layouts.append(text)
    except Exception:  # noqa: BLE001 - arguments too malformed to say: their problems are reported
        pass
    ranks = "; ".join(layouts)
    if len(ranks) > 400:
        import hashlib
        ranks = f"{ranks[:300]}... (sha256 {hashlib.sha256(ranks.encode()).hexdigest()[:16]})"
    return {"src_ranks": src, "mesh_ranks": ranks, "check_agreement": str(mode)}


def _reduce_pending(sched: TransferSchedule) -> TransferSchedule:
    """The schedule with every Partial source reduced on its own mesh: the
    partial types' ``AllReduce`` step over each pending mesh dimension (one
    ``all_reduce`` per dimension, the ranks of that mesh in the schedule's
    order of names; a sub-mesh has no plan of collectives of its own)."""
    moves = []
    for m in sched.moves:
        if m.pending is not None and m.local is not None:
            local = m.local.clone(memory_format=torch.contiguous_format)   # all_reduce works in place
            mesh = m.pending.device_mesh
            for i, p in enumerate(m.pending.placements):
                if p.is_partial():
                    dist.all_reduce(local, op=_REDUCE_OPS[p.reduce_op], group=mesh.get_group(i))
            m = _with(m, local=local, pending=None)
        moves.append(m)
    return replace(sched, moves=tuple(moves))


def run_schedule(sched: TransferSchedule) -> dict[str, DTensor]:
    """Run an agreed schedule on this rank (collective over its ranks)."""
    me = dist.get_rank()
    sources, targets, out, buffers = {}, {}, {}, {}
    for m in sched.moves:
        if isinstance(m.plan, BoxPlan):
            block = None
            if m.out_shape is not None:
                device = m.local.device if m.local is not None else _device_of(m.dst_mesh)
                block = (torch.empty(m.out_shape, dtype=m.dtype, device=device) if m.into is None
                         else m.into.buffer(buffers, m.out_shape, m.dtype, device, me))
                if m.local is not None:
                    m.plan.copy_held(m.local, block)
                if m.into is None:
                    out[m.name] = DTensor(block, DTensorSpec(m.dst_mesh, m.dst_placements, tensor_meta=m.meta),
                                          requires_grad=False)
            held, wanted = m.plan.endpoints(m.local, block)
            sources.update({(m.name, k): v for k, v in held.items()})
            targets.update({(m.name, k): v for k, v in wanted.items()})
            continue
        i, j = m.plan.src_index(me), m.plan.dst_index(me)
        if i is not None:
            sources[m.name] = (m.local, m.plan.src.block_starts(i))
        if j is not None:
            device = m.local.device if m.local is not None else _device_of(m.dst_mesh)
            block = torch.empty(m.plan.dst.valid_shape(j), dtype=m.dtype, device=device)
            for p in m.plan.pieces[j]:   # what this rank already holds: a local copy
                if p.src == me:
                    block[m.plan.dst_local(j, p)] = m.local[m.plan.src_local(p)]
            targets[m.name] = (block, m.plan.dst.block_starts(j))
            spec = DTensorSpec(m.dst_mesh, m.dst_placements, tensor_meta=m.meta)
            out[m.name] = DTensor(block, spec, requires_grad=False)
    run_rounds([list(rd) for rd in sched.rounds], sources, targets, sched.round_ids or None)
    return out | _finish_targets(buffers, sched.moves, me)


def crossmesh_redistribute(x: DTensor, device_mesh: DeviceMesh, placements: Any, policy: tuple) -> DTensor:
    """``redistribute(x, placements, device_mesh=other)``: the one-tensor
    transfer; ranks outside the target mesh get DTensor's empty local tensor."""
    got = transfer({"x": x}, {"x": (device_mesh, placements)}, check_agreement=policy[0] or False,
                   deadline_s=policy[1])
    if "x" in got:
        return got["x"]
    meta = x._spec.tensor_meta
    pl, _ = _placements_or_empty(placements, x, device_mesh)
    empty = torch.empty(0, dtype=meta.dtype, device=_device_of(device_mesh))
    return DTensor(empty, DTensorSpec(device_mesh, pl, tensor_meta=meta), requires_grad=False)


def _placements_or_empty(placements: Any, x: DTensor, device_mesh: DeviceMesh) -> tuple[tuple, list]:
    pl, problems = _normalise(placements, x, device_mesh)
    return (pl if pl is not None else tuple(Replicate() for _ in range(device_mesh.ndim))), problems
