"""Layout: the ``type`` distribution of a global numpy array, and its inverse.

Which global box a device holds comes only from the verified core
(:func:`verishard.core.block_starts`, extracted from ``Types.block_starts``):
this module never recomputes the mixed-radix block formula.

>>> from verishard import Mesh
>>> import numpy as np
>>> A = np.arange(6)
>>> parts = distribute(A, "x=2,y=3", "[3{x}6]")
>>> [p.tolist() for p in parts]
[[0, 1, 2], [0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5], [3, 4, 5]]
>>> assemble(parts, "x=2,y=3", "[3{x}6]").tolist()
[0, 1, 2, 3, 4, 5]
>>> box("x=2,y=3", "[1{y,x}6]", 4)
(slice(3, 4, None),)

A partial type's distribution is not unique: :func:`distribute` gives the
canonical one (device 0 of each pending group holds the block, the others
the reduction's unit), :func:`split_partial` a random one, and
:func:`assemble` reduces over the pending groups first.

>>> parts = split_partial(np.arange(4), "x=2", "[4] partial{x}", np.random.default_rng(0))
>>> (parts[0] + parts[1]).tolist(), assemble(parts, "x=2", "[4] partial{x}").tolist()
([0, 1, 2, 3], [0, 1, 2, 3])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core import block_starts
from ..errors import ShardingError, VerishardError
from ..mesh import Mesh
from ..sharding import ArrayType, as_type
from .backend import NUMPY_REDUCE, AxisGroup, reduction_identity


class LayoutError(VerishardError):
    """Local arrays that are not a distribution of any global array under the type.

    >>> assemble([np.zeros(4), np.ones(4)], "x=2", "[4]")
    Traceback (most recent call last):
    ...
    verishard.runtime.layout.LayoutError: devices 0 and 1 hold the same block of [4] (starting at (0,)) but different data
    """


LAYOUTS = ("padded", "chunked")


def check_layout(layout: str) -> str:
    """``layout`` if it names a convention for uneven buffers, else one clear error.

    >>> check_layout("chunks")
    Traceback (most recent call last):
    ...
    verishard.errors.ShardingError: layout must be 'padded' (every device a buffer of the type's local shape, padding at the end: JAX) or 'chunked' (only the valid part: torch.chunk), not 'chunks'
    """
    if layout not in LAYOUTS:
        raise ShardingError("layout must be 'padded' (every device a buffer of the type's local shape, padding at "
                            f"the end: JAX) or 'chunked' (only the valid part: torch.chunk), not {layout!r}")
    return layout


def _even(t: ArrayType) -> ArrayType:
    if t.uneven:
        raise LayoutError(f"{t} has uneven dimensions: a device's block has no single box; "
                          f"distribute/assemble/simulate take it (layout='padded' or 'chunked')")
    return t


def boxes(mesh: Mesh | str, t: ArrayType | str) -> list[tuple[slice, ...]]:
    """The global index box (one slice per dimension) of every rank.

    >>> boxes("x=2", "[2{x}4, 3]")
    [(slice(0, 2, None), slice(0, 3, None)), (slice(2, 4, None), slice(0, 3, None))]
    """
    t = _even(as_type(t, mesh))
    ls = t.local_shape
    return [tuple(slice(int(s), int(s) + l) for s, l in zip(row, ls)) for row in block_starts(t)]


def box(mesh: Mesh | str, t: ArrayType | str, rank: int) -> tuple[slice, ...]:
    """The global index box held by ``rank`` under ``t``.

    >>> box("x=2", "[2{x}4, 3]", 1)
    (slice(2, 4, None), slice(0, 3, None))
    """
    t = _even(as_type(t, mesh))
    starts = block_starts(t)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < len(starts):
        raise ShardingError(f"rank {rank!r} is out of range for {len(starts)} devices")
    return tuple(slice(int(s), int(s) + l) for s, l in zip(starts[int(rank)], t.local_shape))


def valid_box(t: ArrayType, rank: int) -> tuple[slice, ...]:
    """The global indices of the valid part of ``rank``'s block (all of it on even dimensions).

    >>> valid_box(as_type("[2{x}3]", "x=2"), 1)
    (slice(2, 3, None),)
    """
    return tuple(slice(s, s + v) for s, v in zip(t.block_starts(rank), t.valid_shape(rank)))


def _valid_part(t: ArrayType, rank: int) -> tuple[slice, ...]:
    """Where a padded buffer holds its valid part: the start of every dimension."""
    return tuple(slice(0, v) for v in t.valid_shape(rank))


def _global(global_array, t: ArrayType) -> np.ndarray:
    try:
        A = np.asarray(global_array)
    except (ValueError, TypeError) as e:  # a ragged nested list, ...
        raise ShardingError(f"global array is not an array: {str(e).splitlines()[0]}") from None
    if A.shape != t.global_shape:
        raise ShardingError(f"global array has shape {A.shape}, but {t} has global shape {t.global_shape}")
    return A


def local_block(global_array, mesh: Mesh | str, t: ArrayType | str, rank: int) -> np.ndarray:
    """Rank ``rank``'s local array (a C-contiguous copy) under the even type ``t``.

    >>> local_block(np.arange(6), "x=2,y=3", "[1{y,x}6]", 1).tolist()
    [2]
    """
    t = as_type(t, mesh)
    A = _global(global_array, t)
    return np.array(A[box(mesh, t, rank)], order="C", copy=True)


def distribute(global_array, mesh: Mesh | str, t: ArrayType | str, *, layout: str = "padded", pad=0,
               rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Every device's local array under ``t``, indexed by linear rank
    (C-contiguous copies, any dtype), for every kind of type.

    >>> [a.tolist() for a in distribute(np.arange(4), "x=2", "[2{x}4]")]
    [[0, 1], [2, 3]]

    Uneven dimensions (blocks of ``ceil(g / n)``, the last ones short):
    ``layout="padded"`` (the default; JAX's convention) gives every device a
    buffer of the type's ``local_shape``, ``pad`` after its valid part;
    ``layout="chunked"`` (``torch.chunk``'s) only the valid part
    (``t.valid_shape(rank)``).

    >>> [a.tolist() for a in distribute(np.arange(5), "x=4", "[2{x}5]", pad=-1)]
    [[0, 1], [2, 3], [4, -1], [-1, -1]]
    >>> [a.tolist() for a in distribute(np.arange(5), "x=4", "[2{x}5]", layout="chunked")]
    [[0, 1], [2, 3], [4], []]

    Partial types (a pending reduction): by default the canonical
    representation, device 0 of each pending group holding the block and the
    others the reduction's unit; with ``rng``, a random one (for tests and
    demos): a sum split into random terms (small integers, or normal floats),
    a max or min whose every device holds at most (at least) the block and
    one device of each group the block itself. Devices that hold the same
    block and the same pending index hold the same array, as replicas do.

    >>> [a.tolist() for a in distribute(np.arange(3), "x=2", "[3] partial{x}")]
    [[0, 1, 2], [0, 0, 0]]
    >>> parts = distribute(np.arange(3), "x=2", "[3] partial(max){x}", rng=np.random.default_rng(1))
    >>> np.maximum(parts[0], parts[1]).tolist()
    [0, 1, 2]
    """
    t = as_type(t, mesh)
    check_layout(layout)
    A = _global(global_array, t)
    if not t.uneven:
        out = [np.array(A[b], order="C", copy=True) for b in boxes(mesh, t)]
    elif layout == "chunked":
        out = [np.array(A[valid_box(t, r)], order="C", copy=True) for r in range(t.mesh.num_devices)]
    else:
        dtype = np.result_type(A.dtype, np.asarray(pad).dtype)
        out = []
        for r in range(t.mesh.num_devices):
            x = np.full(t.local_shape, pad, dtype=dtype)
            x[_valid_part(t, r)] = A[valid_box(t, r)]
            out.append(x)
    if t.partial:
        _pending_terms(out, t, rng)
    return out


def _pending_terms(out: list[np.ndarray], t: ArrayType, rng: np.random.Generator | None) -> None:
    """Turn the blocks ``out`` (every device holding its block of ``t.plain``) into a
    representation of the partial type ``t``, in place (see :func:`distribute`)."""
    g = AxisGroup.of(t.mesh, t.partial)
    if rng is None:  # the canonical representation
        unit = reduction_identity(out[0].dtype, t.reduce)
        for r in np.flatnonzero(g.index != 0):
            out[r][...] = unit
        return
    draws: dict[tuple, Any] = {}
    for members in g.members:
        block = out[int(members[0])]
        key0 = t.block_starts(int(members[0]))
        terms = []
        for k in range(g.size):
            key = (key0, k)
            if key not in draws:
                if block.dtype.kind == "f":
                    draws[key] = rng.standard_normal(block.shape).astype(block.dtype)
                else:
                    draws[key] = rng.integers(0, 3, block.shape).astype(block.dtype)
            terms.append(draws[key])
        if (key0, "exact") not in draws:  # which device holds the block itself (max, min)
            draws[(key0, "exact")] = int(rng.integers(g.size))
        exact = draws[(key0, "exact")]
        for k, r in enumerate(members):
            if t.reduce == "sum":
                out[int(r)] = block - sum(terms[1:], np.zeros_like(block)) if k == 0 else terms[k].copy()
            elif k == exact:
                out[int(r)] = block.copy()
            else:
                lower = np.abs(terms[k])  # a max's terms are at most the block, a min's at least
                out[int(r)] = block - lower if t.reduce == "max" else block + lower


def split_partial(global_array, mesh: Mesh | str, t: ArrayType | str, rng: np.random.Generator) -> list[np.ndarray]:
    """``distribute(global_array, mesh, t, rng=rng)``: a random representation of a partial type.

    >>> parts = split_partial(np.arange(3), "x=2", "[3] partial(max){x}", np.random.default_rng(1))
    >>> np.maximum(parts[0], parts[1]).tolist()
    [0, 1, 2]
    """
    return distribute(global_array, mesh, t, rng=rng)


def represented(locals_: Sequence[np.ndarray], t: ArrayType) -> list[np.ndarray]:
    """Every device's element of the represented value: the reduction, in
    group order, of its pending group's local arrays (the arrays themselves
    when nothing is pending).

    >>> t = as_type("[2] partial{x}", "x=2")
    >>> [a.tolist() for a in represented([np.array([1, 2]), np.array([10, 20])], t)]
    [[11, 22], [11, 22]]
    """
    if not t.partial:
        return list(locals_)
    g, ufunc = AxisGroup.of(t.mesh, t.partial), NUMPY_REDUCE[t.reduce]
    out: list[np.ndarray] = [None] * len(locals_)  # type: ignore[list-item]
    for members in g.members:
        acc = np.array(locals_[int(members[0])], copy=True)
        for r in members[1:]:
            ufunc(acc, locals_[int(r)], out=acc)
        for r in members:
            out[int(r)] = acc
    return out


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Exact equality: same dtype, shape and bytes (NaN payloads, -0.0); a
    structured dtype compares every field (not padding bytes); object arrays
    compare their elements.

    >>> same_bytes(np.array([0.0]), np.array([-0.0])), same_bytes(np.arange(3), np.arange(3))
    (False, True)
    """
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.fields is not None:  # field by field: padding bytes carry no data
        return all(same_bytes(a[name], b[name]) for name in a.dtype.names)
    if a.dtype.hasobject:
        return all(x is y or bool(x == y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    return bool(np.array_equal(byte_view(a), byte_view(b)))


def byte_view(a: np.ndarray) -> np.ndarray:
    """The bytes of ``a`` (C order) as a flat uint8 array (a view when ``a`` is C-contiguous).

    >>> byte_view(np.array([1, 258], dtype="<i2")).tolist()
    [1, 0, 2, 1]
    """
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def check_locals(locals_: Sequence, t: ArrayType, what: str = "local arrays", layout: str = "padded") -> np.dtype:
    """Check ``locals_`` is one array per device of ``t``'s local shape (on uneven
    dimensions with ``layout="chunked"``: of its valid shape), all of one dtype;
    return the dtype.

    >>> t = as_type("[2{x}4]", "x=2")
    >>> check_locals([np.zeros(2), np.ones(2)], t)
    dtype('float64')
    >>> check_locals([np.zeros(2)], t)
    Traceback (most recent call last):
    ...
    verishard.runtime.layout.LayoutError: local arrays: got 1 arrays for 2 devices of {x:2}
    >>> check_locals([np.zeros(2), np.zeros(1)], as_type("[2{x}3]", "x=2"))
    Traceback (most recent call last):
    ...
    verishard.runtime.layout.LayoutError: local arrays: device 1 holds shape (1,), but [2{x}3] has local shape (2,) (these are the valid shapes of chunked buffers: pass layout='chunked')
    """
    n = t.mesh.num_devices
    chunked = check_layout(layout) == "chunked" and t.uneven
    if isinstance(locals_, np.ndarray) or not isinstance(locals_, Sequence):
        raise LayoutError(f"{what} must be a sequence of {n} numpy arrays (one per device), "
                          f"not {type(locals_).__name__}")
    if len(locals_) != n:
        raise LayoutError(f"{what}: got {len(locals_)} arrays for {n} devices of {t.mesh}")
    dtype = None
    for r, a in enumerate(locals_):
        if not isinstance(a, np.ndarray):
            raise LayoutError(f"{what}: device {r} holds a {type(a).__name__}, not a numpy array")
        want = t.valid_shape(r) if chunked else t.local_shape
        if a.shape != want:
            if chunked:
                hint = " (padded buffers: pass layout='padded')" if a.shape == t.local_shape else ""
                raise LayoutError(f"{what}: device {r} holds shape {a.shape}, but its chunk of {t} has "
                                  f"shape {want}{hint}")
            hint = ""
            if t.uneven and all(isinstance(b, np.ndarray) and b.shape == t.valid_shape(q) for q, b in enumerate(locals_)):
                hint = " (these are the valid shapes of chunked buffers: pass layout='chunked')"
            raise LayoutError(f"{what}: device {r} holds shape {a.shape}, but {t} has local shape {want}{hint}")
        if dtype is None:
            dtype = a.dtype
        elif a.dtype != dtype:
            raise LayoutError(f"{what}: device {r} holds dtype {a.dtype}, device 0 holds {dtype}")
    return dtype


def to_padded(chunks: Sequence[np.ndarray], t: ArrayType, pad) -> list[np.ndarray]:
    """Chunked buffers (exactly the valid parts) padded to ``t.local_shape`` with ``pad``.

    >>> t = as_type("[2{x}3]", "x=2")
    >>> [x.tolist() for x in to_padded([np.array([0, 1]), np.array([2])], t, pad=-1)]
    [[0, 1], [2, -1]]
    """
    out = []
    for r, c in enumerate(chunks):
        if c.shape != t.valid_shape(r):
            raise ShardingError(f"rank {r}'s chunk has shape {c.shape}, not {t.valid_shape(r)} as {t} says")
        x = np.full(t.local_shape, pad, dtype=np.result_type(c.dtype, np.asarray(pad).dtype))
        x[_valid_part(t, r)] = c
        out.append(x)
    return out


def to_chunked(padded: Sequence[np.ndarray], t: ArrayType) -> list[np.ndarray]:
    """The valid parts of padded buffers (the chunked buffers); the buffers themselves on an even type.

    >>> t = as_type("[2{x}3]", "x=2")
    >>> [x.tolist() for x in to_chunked([np.array([0, 1]), np.array([2, -1])], t)]
    [[0, 1], [2]]
    """
    if not t.uneven:
        return list(padded)
    return [np.array(x[_valid_part(t, r)], order="C", copy=True) for r, x in enumerate(padded)]


def assemble(locals_: Sequence[np.ndarray], mesh: Mesh | str, t: ArrayType | str, *,
             layout: str = "padded", check: bool = True) -> np.ndarray:
    """The global array whose ``t`` distribution is ``locals_`` (the inverse of
    :func:`distribute`, for every kind of type): on uneven dimensions it reads
    the valid parts of ``layout``'s buffers (``"padded"``, the default, or
    ``"chunked"``); a partial type is reduced over its pending groups first.

    With ``check`` (the default), devices holding the same block (replicas)
    must hold the same bytes, else :class:`LayoutError` names the two devices.

    >>> assemble([np.array([0, 1]), np.array([2, 3])], "x=2", "[2{x}4]").tolist()
    [0, 1, 2, 3]
    >>> assemble([np.array([0, 1]), np.array([2, -1])], "x=2", "[2{x}3]").tolist()
    [0, 1, 2]
    >>> assemble([np.array([0, 1]), np.array([2])], "x=2", "[2{x}3]", layout="chunked").tolist()
    [0, 1, 2]
    >>> assemble([np.array([1, 2]), np.array([10, 20])], "x=2", "[2] partial{x}").tolist()
    [11, 22]
    """
    t = as_type(t, mesh)
    dtype = check_locals(locals_, t, layout=layout)
    if t.uneven and layout == "chunked":
        locals_ = to_padded(locals_, t, np.zeros((), dtype)[()])
    if t.partial:
        locals_, t = represented(locals_, t), t.plain
    out = np.empty(t.global_shape, dtype=dtype)
    first: dict[tuple[int, ...], int] = {}
    covered = 0
    if t.uneven:  # the valid part of every block (core.block_starts is for even types)
        starts = [t.block_starts(r) for r in range(t.mesh.num_devices)]
        regions = [(valid_box(t, r), _valid_part(t, r)) for r in range(t.mesh.num_devices)]
    else:
        starts = [tuple(int(s) for s in row) for row in block_starts(t)]
        regions = [(b, ...) for b in boxes(mesh, t)]
    for r, (key, (where, part)) in enumerate(zip(starts, regions)):
        if key not in first:
            first[key] = r
            out[where] = locals_[r][part]
            covered += out[where].size
        elif check and not same_bytes(locals_[r][part], locals_[first[key]][part]):
            raise LayoutError(f"devices {first[key]} and {r} hold the same block of {t} "
                              f"(starting at {key}) but different data")
    if covered != out.size:  # the blocks of a well-formed type tile the array
        raise LayoutError(f"the blocks of {t} do not cover the global array")  # pragma: no cover
    return out


__all__ = ["LayoutError", "LAYOUTS", "check_layout", "as_type", "boxes", "box", "valid_box", "local_block",
           "distribute", "split_partial", "represented", "assemble", "check_locals", "to_padded", "to_chunked",
           "same_bytes", "byte_view"]
