"""PyTorch DTensor: placements, shard orders and ``DTensorSpec`` to and from
our types.

The placement-level conversion (``("shard", d)`` / ``("replicate",)`` tuples)
is :mod:`verishard.notation`; this module maps PyTorch's objects onto it:

* ``Shard(d)`` on mesh dimension ``i``: mesh axis ``i`` shards tensor
  dimension ``d``; ``Replicate()``: mesh axis ``i`` is replicated;
  ``Partial(op)`` (op ``"sum"``, ``"max"`` or ``"min"``): mesh axis ``i`` is
  pending, the type's reduction is ``op`` (``[8, 4] partial(max){x}``).
  Refused with a :class:`~verishard.errors.ShardingError` naming the problem:
  ``Partial("avg")`` (its local values average to the value, which is no
  sum, max or min of them), the other DTensor reductions (``"product"``,
  bitwise ones), subclasses of ``Partial`` (``_NormPartial``,
  ``_MaskPartial``: their local values are not plain partial results), and
  two different reductions in one placement tuple (a type has one pending
  reduction; DTensor refuses mixed Partial types too).
* Several mesh dimensions sharding one tensor dimension: by default the lower
  mesh dimension is major (DTensor's left-to-right order); another order is
  DTensor's ``shard_order`` (``ShardOrderEntry(tensor_dim, mesh_dims)``,
  ``mesh_dims`` major first) or, in the older encoding, ``_StridedShard``
  placements, which are decoded with DTensor's own rule.

A DTensor mesh dimension is one whole mesh axis: a type over split axes has
no placements (refused with a clear error, by :mod:`verishard.notation`).

Shapes that do not divide: DTensor keeps ``torch.chunk`` shards (chunks of
``ceil(g / n)``, the trailing ones short or empty), and where several mesh
dimensions shard one tensor dimension it chunks each chunk again (or, for
``_StridedShard``, interleaves them). Our uneven types have flat blocks of
``ceil(g / n)`` over all the shards (``docs/types.md``). The two agree on a
dimension one mesh dimension shards, and on some others (7 over 2 x 2);
:func:`layout_mismatches` compares every shard with DTensor's own offsets
(``torch.distributed.tensor._utils._compute_local_shape_and_global_offset``),
and the conversions refuse the layouts that differ with an
:class:`UnsupportedLayout` naming the dimension, the mesh dimensions and both
layouts. A Partial placement with an uneven dimension is refused the same way
(the verified core types pending reductions over even blocks only).

Importing this module imports torch.
"""

from __future__ import annotations

import contextlib
import itertools
from math import prod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, ShardOrderEntry, TensorMeta
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard

from .. import notation
from ..errors import ShardingError, refusing_raw_errors, show
from ..mesh import Mesh
from ..sharding import REDUCE_OPS, ArrayType

__all__ = ["all_placements", "placements_to_tuples", "tuples_to_placements", "shard_order_dict", "full_shard_order",
           "partial_of", "from_placements", "to_placements", "from_spec", "to_spec", "device_mesh",
           "fake_process_group", "planning_mesh", "UnsupportedReduction", "UnsupportedLayout", "layout_mismatches",
           "dtensor_extent", "dtensor_indices", "layout_boxes", "uneven_text", "describe_transform",
           "transform_costs"]


class UnsupportedReduction(ShardingError):
    """A DTensor ``Partial`` placement whose reduction verishard's types do
    not have (``"avg"``, ``"product"``, bitwise ones, a ``Partial``
    subclass): valid DTensor input that cannot be typed.

    >>> issubclass(UnsupportedReduction, ShardingError)
    True
    """


class UnsupportedLayout(ShardingError):
    """A DTensor layout that verishard's types do not describe (yet): a
    dimension that does not divide and that DTensor splits otherwise than our
    blocks of ``ceil(g / n)`` (nested ``torch.chunk``, ``_StridedShard``), or
    a Partial placement with such a dimension. Valid DTensor input, like
    :class:`UnsupportedReduction`.

    >>> issubclass(UnsupportedLayout, ShardingError)
    True
    """


class _Sizes:
    """What DTensor's _StridedShard decoding needs of a mesh: ``size(i)``."""

    def __init__(self, sizes: Sequence[int]):
        self.sizes = tuple(sizes)

    def size(self, i: int) -> int:
        return self.sizes[i]


@refusing_raw_errors()
def placements_to_tuples(placements: Iterable[Any]) -> tuple[tuple, ...]:
    """``Shard(d)``/``Replicate()`` objects as notation tuples (``_StridedShard`` as a shard).
    The tuple notation has no pending reductions: ``Partial`` is refused here
    (:func:`from_placements` takes it).

    >>> placements_to_tuples([Shard(1), Replicate()])
    (('shard', 1), ('replicate',))
    """
    out = []
    for p in placements:
        if isinstance(p, (Shard, _StridedShard)):
            out.append(("shard", int(p.dim)))
        elif isinstance(p, Replicate):
            out.append(("replicate",))
        elif isinstance(p, Partial) or (hasattr(p, "is_partial") and p.is_partial()):
            raise ShardingError(f"{notation.PARTIAL_MESSAGE}: {p!r}")
        elif isinstance(p, tuple):
            out.extend(notation._normalise_placements([p]))
        else:
            raise ShardingError(f"placement {p!r} is not Shard, Replicate or a notation tuple")
    return tuple(out)


@refusing_raw_errors()
def tuples_to_placements(tuples: Iterable[tuple]) -> tuple[Any, ...]:
    """Notation tuples as DTensor placement objects.

    >>> tuples_to_placements([("shard", 0), ("replicate",)])
    (Shard(dim=0), Replicate())
    """
    return tuple(Shard(p[1]) if p[0] == "shard" else Partial(p[1]) if p[0] == "partial" else Replicate()
                 for p in notation._normalise_placements(tuples))


@refusing_raw_errors()
def shard_order_dict(shard_order: Any) -> dict[int, tuple[int, ...]] | None:
    """A DTensor ``ShardOrder`` (tuple of ``ShardOrderEntry``) or a mapping, as
    ``{tensor_dim: mesh dims major first}``.

    >>> shard_order_dict((ShardOrderEntry(tensor_dim=0, mesh_dims=(1, 0)),))
    {0: (1, 0)}
    """
    if shard_order is None:
        return None
    if isinstance(shard_order, Mapping):
        return {int(d): tuple(int(i) for i in m) for d, m in shard_order.items()}
    out = {}
    for e in shard_order:
        d, dims = (e.tensor_dim, e.mesh_dims) if isinstance(e, ShardOrderEntry) else e
        out[int(d)] = tuple(int(i) for i in dims)
    return out


def full_shard_order(t: ArrayType) -> tuple[ShardOrderEntry, ...]:
    """DTensor's ``ShardOrder`` for ``t``: every sharded dimension with its mesh
    dimensions, major first.

    >>> full_shard_order(ArrayType.parse("[2{y,x}12, 4]", "x=2,y=3"))
    (ShardOrderEntry(tensor_dim=0, mesh_dims=(1, 0)),)
    """
    pl, order = notation.to_placements(t.plain)
    by_dim: dict[int, list[int]] = {}
    for i, p in enumerate(pl):
        if p[0] == "shard":
            by_dim.setdefault(p[1], []).append(i)
    order = order or {}
    return tuple(ShardOrderEntry(tensor_dim=d, mesh_dims=tuple(order.get(d, by_dim[d])))
                 for d in sorted(by_dim))


def _label(i: int, names: Sequence[str] | None) -> str:
    return f"mesh dimension {i}" + (f" ({names[i]!r})" if names and i < len(names) else "")


@refusing_raw_errors()
def partial_of(placements: Iterable[Any], names: Sequence[str] | None = None) -> tuple[str, tuple[int, ...]]:
    """The pending reduction of DTensor placements and the mesh dimensions
    that carry it: ``(op, dims)``, ``("sum", ())`` when none is Partial.
    ``names`` (the mesh dimension names) only label the errors.

    Raises :class:`UnsupportedReduction` for a reduction our types do not
    have and :class:`~verishard.errors.ShardingError` for two different
    reductions.

    >>> partial_of([Partial(), Shard(0), Partial("sum")])
    ('sum', (0, 2))
    >>> partial_of([Partial("max"), Replicate()])
    ('max', (0,))
    >>> partial_of([Replicate(), Partial("avg")], ("x", "y"))
    Traceback (most recent call last):
    ...
    verishard.torch.dtensor.UnsupportedReduction: Partial(avg) on mesh dimension 1 ('y') is not supported: DTensor's average holds local values whose mean is the value, which is no sum, max or min of them; verishard's pending reductions are sum, max and min (reduce it first, or build the DTensor as Partial("sum") with the local values divided by the group size)
    >>> partial_of([Partial("sum"), Partial("max")], ("x", "y"))
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: placements (Partial(sum), Partial(max)) mix reductions: sum on mesh dimension 0 ('x'), max on mesh dimension 1 ('y'); a type has one pending reduction (DTensor refuses mixed Partial types too)
    """
    placements = tuple(placements)
    ops: dict[str, list[int]] = {}
    for i, p in enumerate(placements):
        if not (isinstance(p, Partial) or (hasattr(p, "is_partial") and p.is_partial())):
            continue
        if type(p) is not Partial:
            raise UnsupportedReduction(
                f"{p!r} on {_label(i, names)} is a {type(p).__name__}, not a plain Partial: its local values are "
                "not partial results of a sum, max or min, which is all verishard's types express; "
                "reduce it first (DTensor.redistribute to Replicate() or Shard(d))")
        op = p.reduce_op
        if op == "avg":
            raise UnsupportedReduction(
                f"{p!r} on {_label(i, names)} is not supported: DTensor's average holds local values whose mean is "
                "the value, which is no sum, max or min of them; verishard's pending reductions are "
                f"{', '.join(REDUCE_OPS[:-1])} and {REDUCE_OPS[-1]} (reduce it first, or build the DTensor as "
                'Partial("sum") with the local values divided by the group size)')
        if op not in REDUCE_OPS:
            raise UnsupportedReduction(
                f"{p!r} on {_label(i, names)} is not supported: verishard's pending reductions are "
                f"{', '.join(REDUCE_OPS[:-1])} and {REDUCE_OPS[-1]}, not {op!r}; reduce it first "
                "(DTensor.redistribute to Replicate() or Shard(d))")
        ops.setdefault(op, []).append(i)
    if len(ops) > 1:
        where = ", ".join(f"{op} on {', '.join(_label(i, names) for i in dims)}" for op, dims in ops.items())
        raise ShardingError(f"placements ({', '.join(map(repr, placements))}) mix reductions: {where}; "
                            "a type has one pending reduction (DTensor refuses mixed Partial types too)")
    if not ops:
        return "sum", ()
    (op, dims), = ops.items()
    return op, tuple(dims)


def _shard_dim(p: Any, rank: int) -> int | None:
    """The tensor dimension a placement (object or notation tuple) shards, or None."""
    if isinstance(p, (Shard, _StridedShard)):
        return int(p.dim) % rank
    if isinstance(p, tuple) and len(p) == 2 and p[0] == "shard":
        return int(p[1]) % rank
    return None


def _on_dim(placements: Sequence[Any], shard_order: Any, d: int, rank: int) -> list[tuple[int, Any]]:
    """How DTensor shards tensor dimension ``d``: ``(mesh dim, placement)``
    in the order it applies them, each placement moved to dimension 0 (the
    dimension alone, as a 1-D tensor: DTensor computes every dimension from
    its own placements only). An explicit ``shard_order`` applies its mesh
    dims in its order (chunk by chunk, as DTensor's planner does)."""
    order = (shard_order_dict(shard_order) or {}).get(d) if shard_order is not None else None
    if order:
        return [(i, Shard(0)) for i in order]
    out = []
    for i, p in enumerate(placements):
        if _shard_dim(p, rank) != d:
            continue
        out.append((i, _StridedShard(0, split_factor=p.split_factor) if isinstance(p, _StridedShard) else Shard(0)))
    return out


def dtensor_extent(global_size: int, mesh_sizes: Sequence[int], coords: Sequence[int],
                   on_dim: Sequence[tuple[int, Any]]) -> tuple[int, int]:
    """``(offset, length)`` of the shard DTensor gives the rank at mesh
    coordinates ``coords`` along one tensor dimension of ``global_size``,
    sharded as ``on_dim`` says (:func:`_on_dim`), by DTensor's own offset
    computation. ``offset`` means nothing when ``length`` is 0.

    >>> dtensor_extent(5, (2, 2), (0, 1), [(0, Shard(0)), (1, Shard(0))])   # torch.chunk of a chunk
    (2, 1)
    """
    if not on_dim:
        return 0, global_size
    (length,), (offset,) = _compute_local_shape_and_global_offset(
        (global_size,), [mesh_sizes[i] for i, _ in on_dim], [coords[i] for i, _ in on_dim], [p for _, p in on_dim])
    return int(offset), int(length)


def dtensor_indices(global_size: int, mesh_sizes: Sequence[int], coords: Sequence[int],
                    on_dim: Sequence[tuple[int, Any]]) -> tuple[int, ...]:
    """The global indices, in local order, of the shard DTensor gives the rank
    at mesh coordinates ``coords`` along one tensor dimension sharded as
    ``on_dim`` says (:func:`_on_dim`): DTensor's own split
    (``Placement._split_tensor``, what ``distribute_tensor`` scatters) of the
    indices, mesh dimension by mesh dimension.

    >>> dtensor_indices(7, (2, 2), (1, 1), [(0, _StridedShard(0, split_factor=2)), (1, Shard(0))])
    (6,)
    >>> dtensor_indices(7, (2, 2), (0, 1), [(0, Shard(0)), (1, _StridedShard(0, split_factor=2))])
    (1, 3)
    """
    idx = torch.arange(global_size)
    for i, p in on_dim:
        idx = p._split_tensor(idx, mesh_sizes[i], with_padding=False)[0][coords[i]]
    return tuple(int(v) for v in idx.tolist())


def _runs(indices: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    """Maximal runs of consecutive global indices: ``(global start, local start, length)``."""
    out: list[list[int]] = []
    for k, g in enumerate(indices):
        if out and out[-1][0] + out[-1][2] == g:
            out[-1][2] += 1
        else:
            out.append([g, k, 1])
    return tuple(map(tuple, out))


Box = tuple[tuple[int, int], ...]


def layout_boxes(global_shape: Sequence[int], mesh_sizes: Sequence[int], placements: Sequence[Any],
                 shard_order: Any = None, ranks: Sequence[int] | None = None
                 ) -> tuple[tuple[tuple[int, Box, tuple[int, ...]], ...], tuple[tuple[int, ...], ...]]:
    """A DTensor layout as explicit boxes, exactly as DTensor lays it out
    (:func:`dtensor_indices` per dimension): every ``(world rank, global box
    ((start, length) per dimension), where the box starts in that rank's
    local tensor)``, and every rank's local shape, ranks in mesh order
    (``ranks``: their world ranks, default ``0..n-1``). A rank holds one box
    per combination of runs of consecutive indices along its dimensions (one
    box, unless ``_StridedShard`` interleaves), none when its shard is empty;
    ``Replicate()`` and ``Partial`` mesh dimensions shard nothing.

    >>> hs, shapes = layout_boxes((5, 2), (2, 2), [Shard(0), Shard(0)])     # torch.chunk of each chunk
    >>> [b for r, b, _ in hs]
    [((0, 2), (0, 2)), ((2, 1), (0, 2)), ((3, 1), (0, 2)), ((4, 1), (0, 2))]
    >>> [r for r, _, _ in hs], shapes
    ([0, 1, 2, 3], ((2, 2), (1, 2), (1, 2), (1, 2)))
    """
    ndim = len(global_shape)
    ranks = tuple(range(prod(mesh_sizes))) if ranks is None else tuple(ranks)
    on = [_on_dim(placements, shard_order, d, ndim) for d in range(ndim)]
    holdings, shapes = [], []
    for flat, coords in enumerate(itertools.product(*map(range, mesh_sizes))):
        per_dim = [_runs(dtensor_indices(g, mesh_sizes, coords, on[d])) for d, g in enumerate(global_shape)]
        shapes.append(tuple(sum(n for _, _, n in rs) for rs in per_dim))
        for combo in itertools.product(*per_dim):
            holdings.append((ranks[flat], tuple((g, n) for g, _, n in combo), tuple(k for _, k, _ in combo)))
    return tuple(holdings), tuple(shapes)


def _show_extents(extents: Sequence[tuple[int, int]], chars: int = 24) -> str:
    """The extents as ``[a:b]`` (``[]`` when empty), as many as fit in ``chars``, then `` ...``."""
    text, used = [], 0
    for o, n in extents:
        t = f"[{o}:{o + n}]" if n else "[]"
        if text and used + len(t) + 1 > chars:
            return " ".join(text) + " ..."
        text.append(t)
        used += len(t) + 1
    return " ".join(text)


def layout_mismatches(t: ArrayType, placements: Sequence[Any], shard_order: Any = None) -> list[str]:
    """The uneven dimensions of ``t`` that DTensor lays out otherwise than
    ``t``'s blocks, each as a sentence naming the dimension, its mesh
    dimensions and both layouts; [] when every shard agrees.

    ``placements`` (one per mesh dimension, objects or notation tuples) and
    ``shard_order`` (explicit, or None: default order or ``_StridedShard``)
    are the DTensor layout ``t`` was read from. Every shard of every uneven
    dimension is compared (a rank's shard along a dimension depends only on
    its coordinates on that dimension's mesh dimensions, so this covers every
    rank): same length, and same offset where not empty. Even dimensions
    always agree (``tests/test_dtensor_convert.py``).

    >>> m = Mesh.parse("x=2,y=2")
    >>> layout_mismatches(ArrayType.parse("[2{x,y}7]", m), [Shard(0), Shard(0)])   # 2,2,2,1 both ways
    []
    >>> layout_mismatches(ArrayType.parse("[2{x,y}5]", m), [Shard(0), Shard(0)])
    ["dim 0 of size 5 in 4 shards by 'x','y': DTensor's torch.chunk of each chunk [0:2] [2:3] [3:4] [4:5] are not verishard's blocks of ceil(5/4)=2; make it divisible by 4 or Replicate() on 'y'"]
    """
    sizes, names = t.mesh.axis_sizes, t.mesh.axis_names
    out = []
    for d, dim in enumerate(t.dims):
        axes = [names.index(a) for a in t.dim_axes(d)]  # whole mesh axes = DTensor mesh dims, major first
        n = prod(sizes[i] for i in axes)
        g = dim.global_size
        if g % n == 0:
            continue
        on = _on_dim(placements, shard_order, d, t.rank)
        c = -(-g // n)
        theirs, ours = [], []
        for b in range(n):
            coords, rest = [0] * len(sizes), b
            for i in reversed(axes):
                coords[i], rest = rest % sizes[i], rest // sizes[i]
            theirs.append(dtensor_extent(g, sizes, coords, on))
            ours.append((b * c, max(0, min(g, b * c + c) - b * c)))
        if all(a[1] == b[1] and (a[1] == 0 or a[0] == b[0]) for a, b in zip(theirs, ours)):
            continue
        # Short, with a way out: a size the shards divide, or one mesh dimension (torch.chunk of a
        # single split is always our blocks) by replicating the minor one.
        how = "_StridedShard" if any(isinstance(p, _StridedShard) for _, p in on) else "torch.chunk of each chunk"
        out.append(f"dim {d} of size {g} in {n} shards by {','.join(repr(names[i]) for i in axes)}: DTensor's {how} "
                   f"{_show_extents(theirs)} are not verishard's blocks of ceil({g}/{n})={c}; make it "
                   f"divisible by {n} or Replicate() on {names[axes[-1]]!r}")
    return out


def _require_layout(t: ArrayType, placements: Sequence[Any], shard_order: Any) -> ArrayType:
    """``t`` when DTensor lays it out as ``t`` says, else :class:`UnsupportedLayout`."""
    if t.uneven:
        problems = layout_mismatches(t, placements, shard_order)
        if problems:
            raise UnsupportedLayout("; ".join(problems))
    return t


@refusing_raw_errors()
def from_placements(mesh: Mesh | str, global_shape: Sequence[int], placements: Iterable[Any],
                    shard_order: Any = None) -> ArrayType:
    """Our type for DTensor placements (objects or notation tuples), one per
    mesh axis, with an optional ``shard_order`` (DTensor ``ShardOrder`` or
    ``{d: mesh dims major first}``). ``_StridedShard`` placements are decoded
    with DTensor's rule (and may not be combined with ``shard_order``).
    ``Partial(op)`` makes its mesh axis pending, with reduction ``op``
    (:func:`partial_of` says what is refused).

    A dimension that does not divide becomes an uneven one (blocks of
    ``ceil(g / n)``) where DTensor's shards are those blocks; otherwise, and
    for a Partial placement with such a dimension, :class:`UnsupportedLayout`
    (module docstring).

    >>> m = Mesh.parse("x=2,y=3")
    >>> from_placements(m, (12, 4), [Shard(0), Shard(0)])
    [2{x,y}12, 4]
    >>> from_placements(m, (12, 4), [Shard(0), Shard(0)], (ShardOrderEntry(0, (1, 0)),))
    [2{y,x}12, 4]
    >>> from_placements(m, (12, 4), [_StridedShard(0, split_factor=3), Shard(0)])
    [2{y,x}12, 4]
    >>> from_placements(m, (12, 6), [Partial(), Shard(1)])
    [12, 2{y}6] partial{x}
    >>> from_placements(m, (12, 4), [Partial("min"), Partial("min")])
    [12, 4] partial(min){x,y}
    >>> from_placements(m, (7, 5), [Shard(0), Shard(1)])
    [4{x}7, 2{y}5]
    >>> from_placements(m, (7, 4), [Partial(), Shard(0)])
    [3{y}7, 4] partial{x}
    """
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    placements = tuple(placements)
    if len(placements) == len(mesh.axis_names):
        op, pending = partial_of(placements, mesh.axis_names)
    else:
        op, pending = partial_of(placements)
    if pending:
        t = from_placements(mesh, global_shape,
                            [Replicate() if i in pending else p for i, p in enumerate(placements)], shard_order)
        parts = tuple(q for i in pending for q in mesh.resolve(mesh.axis_names[i]))
        return ArrayType(mesh, t.dims, partial=parts, reduce=op)
    order = shard_order
    if any(isinstance(p, _StridedShard) for p in placements):
        if shard_order is not None:
            raise ShardingError("give either _StridedShard placements or a shard_order, not both")
        if len(placements) != len(mesh.axis_sizes):
            raise ShardingError(f"{len(placements)} placements for a mesh with {len(mesh.axis_sizes)} axes")
        order = DTensorSpec._maybe_convert_StridedShard_to_shard_order(placements, _Sizes(mesh.axis_sizes))
        if order is None:
            raise ShardingError(f"_StridedShard placements {placements} have no shard order on mesh {mesh}")
    t = notation.from_placements(mesh, global_shape, placements_to_tuples(placements), shard_order_dict(order),
                                 uneven=True)
    return _require_layout(t, placements, shard_order)


def uneven_text(t: ArrayType) -> str:
    """The dimensions of ``t`` that their number of shards does not divide, in words.

    >>> uneven_text(ArrayType.parse("[3{x}5, 4]", "x=2,y=2"))
    "dimension 0 of size 5 is split into 2 shards (mesh dimension 0 ('x'))"
    """
    names, sizes = t.mesh.axis_names, t.mesh.axis_sizes
    out = []
    for d, dim in enumerate(t.dims):
        axes = [names.index(a) for a in t.dim_axes(d)]
        n = prod(sizes[i] for i in axes)
        if dim.global_size % n:
            out.append(f"dimension {d} of size {dim.global_size} is split into {n} shards "
                       f"({', '.join(_label(i, names) for i in axes)})")
    return "; ".join(out)


@refusing_raw_errors()
def to_placements(t: ArrayType) -> tuple[tuple[Any, ...], tuple[ShardOrderEntry, ...] | None]:
    """DTensor placements of ``t`` and its ``ShardOrder`` (None when every
    dimension's mesh axes are in the default left-to-right order); a pending
    mesh axis is ``Partial(t.reduce)``. An uneven ``t`` whose blocks DTensor
    would lay out otherwise is refused (:class:`UnsupportedLayout`).

    >>> to_placements(ArrayType.parse("[2{y,x}12, 4]", "x=2,y=3"))
    ((Shard(dim=0), Shard(dim=0)), (ShardOrderEntry(tensor_dim=0, mesh_dims=(1, 0)),))
    >>> to_placements(ArrayType.parse("[12, 2{y}6] partial(max){x}", "x=2,y=3"))
    ((Partial(max), Shard(dim=1)), None)
    >>> to_placements(ArrayType.parse("[4] partial{y.0}", "x=2,y=2*2"))
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: pending sub-axis 'y.0' in [4] partial{y.0} is not a whole mesh axis; DTensor placements name whole mesh dimensions
    >>> to_placements(ArrayType.parse("[3{x}5, 2{y}3]", "x=2,y=2"))
    ((Shard(dim=0), Shard(dim=1)), None)
    >>> to_placements(ArrayType.parse("[2{y,x}6]", "x=2,y=2"))
    Traceback (most recent call last):
    ...
    verishard.torch.dtensor.UnsupportedLayout: dim 0 of size 6 in 4 shards by 'y','x': DTensor's torch.chunk of each chunk [0:2] [2:3] [3:5] [5:6] are not verishard's blocks of ceil(6/4)=2; make it divisible by 4 or Replicate() on 'x'
    """
    pl, order = notation.to_placements(t.plain if isinstance(t, ArrayType) else t)  # the pending axes below
    out = list(tuples_to_placements(pl))
    if isinstance(t, ArrayType) and t.partial:
        pending = set(t.partial)
        for i, name in enumerate(t.mesh.axis_names):
            parts = set(t.mesh.resolve(name))
            if parts <= pending:
                out[i] = Partial(t.reduce)
                pending -= parts
        if pending:
            names = ", ".join(show(n) for n in t.mesh.names(sorted(pending)))
            raise ShardingError(f"pending sub-axis {names} in {t} is not a whole mesh axis; "
                                "DTensor placements name whole mesh dimensions")
    full = full_shard_order(t) if order else None
    _require_layout(t, out, full)
    return tuple(out), full


@refusing_raw_errors()
def to_spec(t: ArrayType, mesh: Any, dtype: torch.dtype = torch.float32) -> DTensorSpec:
    """A ``DTensorSpec`` for ``t`` on a DTensor ``DeviceMesh`` with ``t``'s axes.

    >>> s = to_spec(ArrayType.parse("[2{y,x}8, 4]", "x=2,y=2"), planning_mesh("x=2,y=2"))
    >>> s.placements, s.shard_order
    ((Shard(dim=0), Shard(dim=0)), (ShardOrderEntry(tensor_dim=0, mesh_dims=(1, 0)),))
    >>> s.tensor_meta
    TensorMeta(shape=torch.Size([8, 4]), stride=(4, 1), dtype=torch.float32)
    >>> to_spec(ArrayType.parse("[8, 2{y}4] partial{x}", "x=2,y=2"), planning_mesh("x=2,y=2")).placements
    (Partial(sum), Shard(dim=1))
    """
    if tuple(mesh.shape) != t.mesh.axis_sizes:
        raise ShardingError(f"DeviceMesh of shape {tuple(mesh.shape)} is not the mesh {t.mesh}")
    pl, _ = to_placements(t)
    shape = torch.Size(t.global_shape)
    stride, acc = [], 1
    for g in reversed(t.global_shape):
        stride.insert(0, acc)
        acc *= g
    stride = tuple(stride)
    meta = TensorMeta(shape, stride, dtype)
    return DTensorSpec(mesh, pl, tensor_meta=meta, shard_order=full_shard_order(t))


@refusing_raw_errors()
def from_spec(mesh: Mesh | str, spec: DTensorSpec) -> ArrayType:
    """Our type for a ``DTensorSpec`` (needs its ``tensor_meta`` for the shape).

    >>> t = ArrayType.parse("[2{y,x}8, 4]", "x=2,y=2")
    >>> from_spec("x=2,y=2", to_spec(t, planning_mesh("x=2,y=2")))
    [2{y,x}8, 4]
    >>> p = ArrayType.parse("[8, 4] partial(min){x,y}", "x=2,y=2")
    >>> from_spec("x=2,y=2", to_spec(p, planning_mesh("x=2,y=2")))
    [8, 4] partial(min){x,y}
    """
    if spec.tensor_meta is None:
        raise ShardingError("the DTensorSpec has no tensor_meta, so no global shape")
    order = None if spec.use_strided_shard_as_shard_order else spec.shard_order
    return from_placements(mesh, tuple(spec.tensor_meta.shape), spec.placements, order)


@contextlib.contextmanager
def fake_process_group(world_size: int):
    """A default process group of PyTorch's fake backend (no communication) with
    ``world_size`` ranks, this process being rank 0; restores the previous
    state (none) on exit. Planning needs a DeviceMesh, which needs one.

    >>> with fake_process_group(4):
    ...     print(dist.get_world_size(), dist.get_rank())
    4 0
    """
    if dist.is_initialized() and dist.get_world_size() != world_size:
        if _FAKE["size"] is None:
            raise ShardingError(f"a process group of size {dist.get_world_size()} is already initialized; "
                                f"DTensor planning needs {world_size}")
        _drop_planning_group()   # planning_mesh's own fake group: ours to replace
    if dist.is_initialized():
        yield
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def device_mesh(mesh: Mesh | str, device_type: str = "cpu"):
    """A DTensor ``DeviceMesh`` for ``mesh`` (whole axes, ranks row-major);
    needs an initialized default process group of ``mesh.num_devices`` ranks.

    >>> with fake_process_group(4):
    ...     dm = device_mesh("x=2,y=2")
    ...     print(dm.mesh_dim_names, dm.mesh.tolist())
    ('x', 'y') [[0, 1], [2, 3]]
    """
    from torch.distributed.device_mesh import DeviceMesh
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    ranks = torch.arange(mesh.num_devices).reshape(mesh.axis_sizes)
    return DeviceMesh(device_type, ranks, mesh_dim_names=mesh.axis_names)


_FAKE = {"size": None}
_MESHES: dict[Mesh, Any] = {}


def _drop_planning_group() -> None:
    """End the fake process group :func:`planning_mesh` started (and forget its meshes)."""
    dist.destroy_process_group()
    _FAKE["size"] = None
    _MESHES.clear()


def planning_mesh(mesh: Mesh | str):
    """A DTensor ``DeviceMesh`` for planning only: on a fake process group that
    this module starts (and keeps) with ``mesh.num_devices`` ranks. Refuses to
    touch a process group that someone else started with another size.

    >>> dm = planning_mesh("x=2,y=2")
    >>> dm, planning_mesh("x=2,y=2") is dm
    (DeviceMesh((x=2, y=2), 'cpu', stride=(2, 1)), True)
    """
    if isinstance(mesh, str):
        mesh = Mesh.parse(mesh)
    n = mesh.num_devices
    if dist.is_initialized():
        if dist.get_world_size() != n:
            if _FAKE["size"] is None:
                raise ShardingError(f"a process group of size {dist.get_world_size()} is already initialized; "
                                    f"DTensor planning on {mesh} needs {n}")
            _drop_planning_group()
    if not dist.is_initialized():
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=n, store=FakeStore())
        _FAKE["size"] = n
        _MESHES.clear()
    if mesh not in _MESHES:
        _MESHES[mesh] = device_mesh(mesh)
    return _MESHES[mesh]


def all_placements(device_mesh: Any, ndim: int, partial: str | None = None) -> list[tuple[Any, ...]]:
    """Every placement tuple on ``device_mesh`` for a tensor of ``ndim``
    dimensions: Shard/Replicate, and the _StridedShard form of every
    non-default order of several mesh dimensions on one tensor dimension.
    With ``partial="sum"`` (or ``"max"``, ``"min"``) a mesh dimension may also
    be ``Partial(partial)``.

    >>> dm = planning_mesh("x=2,y=2")
    >>> len(all_placements(dm, 1)), len(all_placements(dm, 1, partial="max"))
    (5, 10)
    """
    if partial is not None and partial not in REDUCE_OPS:
        raise ShardingError(f"unknown reduction {partial!r}; expected one of {', '.join(REDUCE_OPS)}")
    out = []
    first = -2 if partial is not None else -1
    for combo in itertools.product(range(first, ndim), repeat=device_mesh.ndim):
        base = tuple(Partial(partial) if d == -2 else Replicate() if d == -1 else Shard(d) for d in combo)
        by_dim: dict[int, list[int]] = {}
        for i, d in enumerate(combo):
            if d >= 0:
                by_dim.setdefault(d, []).append(i)
        dims = sorted(by_dim)
        for orders in itertools.product(*[list(itertools.permutations(by_dim[d])) for d in dims]):
            if all(list(o) == by_dim[d] for d, o in zip(dims, orders)):
                out.append(base)
                continue
            so = tuple(ShardOrderEntry(tensor_dim=d, mesh_dims=o) for d, o in zip(dims, orders))
            out.append(tuple(DTensorSpec._convert_shard_order_to_StridedShard(so, base, device_mesh)))
    return out


def describe_transform(info: Any) -> str:
    """One of DTensor's transform infos as text: its mesh dimensions and placements."""
    a, b = info.src_dst_placements
    dims = getattr(info, "original_mesh_dims", None) or (info.mesh_dim,)
    return f"mesh dim{'s' if len(dims) > 1 else ''} {','.join(map(str, dims))}: {a} -> {b}"


def transform_costs(infos, device_mesh: Any, size: int) -> tuple[list, int, int]:
    """Along DTensor's transforms from a local tensor of ``size`` elements:
    the transforms that communicate or slice, the largest local size, and
    the elements a rank receives (a gather multiplies the local size, a chunk
    divides it, an all-to-all keeps it), as the cross-check models them."""
    peak, recv, moving = size, 0, []
    for info in infos:
        a, b = info.src_dst_placements
        dims = tuple(getattr(info, "original_mesh_dims", None) or (info.mesh_dim,))
        n = 1
        for d in dims:
            n *= device_mesh.size(d)
        if a == b or n == 1:
            continue
        moving.append(info)
        if b.is_replicate():
            recv += (n - 1) * size
            size *= n
        elif a.is_replicate():
            size //= n
        else:
            recv += size - size // n
        peak = max(peak, size)
    return moving, peak, recv
