"""From observed data movement to our collective IR.

An adapter runs (or faithfully simulates) another planner's program on an
array whose every element carries ``1 + its global flat index``. After each
collective it records which global elements every device holds. This module
turns those observations into our types and collectives:

* the elements a device holds must form a box, and the boxes of all devices
  must be the blocks of one well-formed type over the refined mesh
  (:func:`infer_type`);
* consecutive types must be related by the collective the program executed
  (an all-gather removes a suffix of axes, a local step appends one, ...).

Whatever cannot be read this way raises :class:`NotExpressible` with the
reason. The resulting plan is handed to the verified checker
(:func:`express`), which alone decides whether it is valid.

>>> from verishard import Mesh, ArrayType
>>> m = Mesh.parse("x=2,y=2")
>>> t = ArrayType.parse("[2{y}4, 2{x}4]", m)
>>> G = global_values(t.global_shape)
>>> infer_type(m, t.global_shape, held_sets(local_arrays(t, G))) == t
True
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from ..collectives import AllGather, AllPermute, AllToAll, Collective, DynSlice
from ..errors import VerishardError
from ..mesh import Mesh
from ..sharding import ArrayType
from ..runtime.layout import box

__all__ = ["NotExpressible", "global_values", "local_arrays", "held_sets", "infer_type", "Event",
           "translate", "express", "matches_layout"]


class NotExpressible(Exception):
    """The program's data movement has no faithful description in our IR.

    >>> m = Mesh.parse("x=2")
    >>> G = global_values((4,))
    >>> translate(m, ArrayType.parse("[2{x}4]", m), [Event("all-reduce", held_sets([G, G]))], held_sets([G, G]))
    Traceback (most recent call last):
    ...
    verishard.crosscheck.trace.NotExpressible: step 1 (all-reduce): all-reduce sums partial buffers; our IR has no reduction
    """


def global_values(shape) -> np.ndarray:
    """``1 + flat index`` for every element of a global array (0 is reserved for "no data").

    >>> global_values((2, 3)).tolist()
    [[1, 2, 3], [4, 5, 6]]
    """
    return np.arange(1, prod(shape) + 1, dtype=np.int64).reshape(shape)


def local_arrays(t: ArrayType, G: np.ndarray) -> list[np.ndarray]:
    """Every device's local array of type ``t`` cut from the global array ``G``.

    >>> [a.tolist() for a in local_arrays(ArrayType.parse("[2{x}4]", "x=2"), global_values((4,)))]
    [[1, 2], [3, 4]]
    """
    return [G[box(t.mesh, t, r)] for r in range(t.mesh.num_devices)]


def held_sets(per_device) -> list[np.ndarray]:
    """Sorted distinct nonzero values per device; an entry may be an array or a list of arrays.

    >>> [s.tolist() for s in held_sets([np.array([3, 0, 1, 3]), [np.array([2]), np.array([5, 0])]])]
    [[1, 3], [2, 5]]
    """
    out = []
    for item in per_device:
        arrays = [np.asarray(a, dtype=np.int64).reshape(-1) for a in
                  (item if isinstance(item, (list, tuple)) else [item])]
        top = max((int(a.max()) for a in arrays if a.size), default=0)
        mask = np.zeros(top + 1, dtype=bool)
        for a in arrays:
            mask[a[a > 0]] = True
        out.append(np.flatnonzero(mask))  # sorted and distinct without a sort
    return out


def matches_layout(arrays: list[np.ndarray], t: ArrayType, G: np.ndarray) -> bool:
    """Whether every device holds exactly its local array of ``t`` (values and order).

    >>> t, G = ArrayType.parse("[4]", "x=2"), global_values((4,))
    >>> matches_layout([G, G], t, G), matches_layout([G, G[::-1]], t, G)
    (True, False)
    """
    want = local_arrays(t, G)
    return all(np.asarray(a).shape == w.shape and np.array_equal(np.asarray(a), w)
               for a, w in zip(arrays, want))


def _subset(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the sorted distinct values ``a`` are all in ``b``."""
    if a.size > b.size:
        return False
    if a.size == 0:
        return True
    if b.size == 0 or a[-1] > b[-1]:
        return False
    mask = np.zeros(int(b[-1]) + 1, dtype=bool)
    mask[b] = True
    return bool(mask[a].all())


def infer_type(mesh: Mesh, shape, sets: list[np.ndarray]) -> ArrayType:
    """The type over ``mesh.refined()`` whose blocks are the held sets, or NotExpressible.

    >>> m = Mesh.parse("x=4")
    >>> G = global_values((8,))
    >>> infer_type(m, (8,), [G[4 * (r % 2):4 * (r % 2) + 4] for r in range(4)])
    [4{x.1}8]
    """
    fine = mesh.refined()
    shape = tuple(shape)
    n = fine.num_devices
    if len(sets) != n:
        raise NotExpressible(f"{len(sets)} device states for {n} devices")
    lo = np.zeros((n, len(shape)), dtype=np.int64)
    length = np.zeros((n, len(shape)), dtype=np.int64)
    for r, s in enumerate(sets):
        if s.size == 0:
            raise NotExpressible(f"device {r} holds no data")
        idx = np.unravel_index(s - 1, shape)
        a = np.array([i.min() for i in idx])
        b = np.array([i.max() + 1 for i in idx])
        if prod((b - a).tolist()) != s.size:
            raise NotExpressible(f"the elements device {r} holds are not a box of the global array")
        lo[r], length[r] = a, b - a
    sizes = fine.part_sizes
    coords = np.array([fine.part_coords(r) for r in range(n)], dtype=np.int64).reshape(n, len(sizes))
    dims = []
    for d, g in enumerate(shape):
        l = int(length[0, d])
        if np.any(length[:, d] != l) or g % l or np.any(lo[:, d] % l):
            raise NotExpressible(f"devices hold blocks of different or unaligned sizes in dimension {d}")
        b = lo[:, d] // l
        k, parts = g // l, []
        while k > 1:
            for p, sz in enumerate(sizes):
                if sz > 1 and p not in parts and k % sz == 0 and np.array_equal(b % sz, coords[:, p]):
                    parts.insert(0, p)
                    b, k = b // sz, k // sz
                    break
            else:
                raise NotExpressible(f"the blocks of dimension {d} are not indexed by mesh axes")
        if np.any(b != 0):
            raise NotExpressible(f"the blocks of dimension {d} are not indexed by mesh axes")
        dims.append((g, tuple(parts)))
    try:
        t = ArrayType(fine, dims).require_even()  # the traced planners' layouts: even types only
    except VerishardError as e:
        raise NotExpressible(f"the layout is not a well-formed type: {e}") from None
    for r in range(n):
        b = box(t.mesh, t, r)
        if any(sl.start != a or sl.stop != a + ln for sl, a, ln in zip(b, lo[r], length[r])):
            raise NotExpressible("the layout is not the block layout of any type")
    return t


@dataclass
class Event:
    """One step of another planner's program, as observed.

    ``kind`` is ``"local"`` or a collective (``"all-gather"``, ``"all-to-all"``,
    ``"collective-permute"``, ``"all-reduce"``, ``"reduce-scatter"``, ...);
    ``pre`` (optional) and ``post`` are per-device held sets before and after.

    An all-gather after which both devices of ``x=2`` hold all four elements:

    >>> G = global_values((4,))
    >>> Event("all-gather", held_sets([G, G]), label="gather")
    Event(kind='all-gather', post=[array([1, 2, 3, 4]), array([1, 2, 3, 4])], pre=None, label='gather')
    """

    kind: str
    post: list[np.ndarray]
    pre: list[np.ndarray] | None = None
    label: str = ""


def _names(fine: Mesh, parts) -> tuple[str, ...]:
    return tuple(fine.part_name(p) for p in parts)


def _slices(cur: ArrayType, new: ArrayType, label: str) -> list[Collective]:
    out = []
    for d in range(cur.rank):
        a, b = cur.dim_parts(d), new.dim_parts(d)
        if b[:len(a)] != a:
            raise NotExpressible(f"{label}: going from {cur} to {new} locally is not a slice of the held block")
        if len(b) > len(a):
            out.append(DynSlice(d, _names(cur.mesh, b[len(a):])))
    return out


def _gathers(cur: ArrayType, new: ArrayType, label: str) -> list[Collective]:
    out = []
    for d in range(cur.rank):
        a, b = cur.dim_parts(d), new.dim_parts(d)
        if a[:len(b)] != b:
            raise NotExpressible(f"{label}: {cur} -> {new} is not a gather of minor axes")
        if len(a) > len(b):
            out.append(AllGather(d, _names(cur.mesh, a[len(b):])))
    return out


def _all_to_all(cur: ArrayType, new: ArrayType, label: str) -> list[Collective]:
    changed = [d for d in range(cur.rank) if cur.dim_parts(d) != new.dim_parts(d)]
    if len(changed) == 2:
        for d, e in (changed, changed[::-1]):
            a, b = cur.dim_parts(d), new.dim_parts(d)
            if len(b) < len(a) and a[:len(b)] == b:
                moved = a[len(b):]
                if new.dim_parts(e) == cur.dim_parts(e) + moved:
                    return [AllToAll(d, e, _names(cur.mesh, moved))]
    raise NotExpressible(f"{label}: {cur} -> {new} is not one AllToAll")


def translate(mesh: Mesh, src: ArrayType, events: list[Event], final: list[np.ndarray]) -> list[Collective]:
    """Our collectives, over ``mesh.refined()``, for the observed events.

    ``final`` is the held set of the program's result on every device.

    >>> m = Mesh.parse("x=2")
    >>> G = global_values((4,))
    >>> translate(m, ArrayType.parse("[2{x}4]", m), [Event("all-gather", held_sets([G, G]))], held_sets([G, G]))
    [AllGather(dim=0, axes=('x',))]
    """
    fine = mesh.refined()
    shape = src.global_shape
    cur = src.refined()
    cur_sets = held_sets(local_arrays(src, global_values(shape)))
    out: list[Collective] = []

    def shrink_to(sets, label):
        nonlocal cur, cur_sets
        for r, (s, c) in enumerate(zip(sets, cur_sets)):
            if not _subset(s, c):
                raise NotExpressible(f"{label} uses data that the previous step does not hold (device {r})")
        if all(s.size == c.size for s, c in zip(sets, cur_sets)):
            return
        new = infer_type(mesh, shape, sets)
        out.extend(_slices(cur, new, label))
        cur, cur_sets = new, sets

    for k, ev in enumerate(events):
        label = ev.label or f"step {k + 1} ({ev.kind})"
        if ev.pre is not None:
            shrink_to(ev.pre, label)
        if ev.kind == "local":
            shrink_to(ev.post, label)
            continue
        if ev.kind in ("all-reduce", "reduce-scatter"):
            raise NotExpressible(f"{label}: {ev.kind} sums partial buffers; our IR has no reduction")
        if ev.kind not in ("all-gather", "all-to-all", "collective-permute"):
            raise NotExpressible(f"{label}: {ev.kind} has no counterpart in our IR")
        new = infer_type(mesh, shape, ev.post)
        if new == cur:
            cur_sets = ev.post
            continue
        if ev.kind == "all-gather":
            out.extend(_gathers(cur, new, label))
        elif ev.kind == "all-to-all":
            out.extend(_all_to_all(cur, new, label))
        else:
            if new.local_shape != cur.local_shape:
                raise NotExpressible(f"{label}: a permute from {cur} to {new} changes the local shape")
            out.append(AllPermute(new))
        cur, cur_sets = new, ev.post
    shrink_to(final, "the result")
    return out


def express(mesh: Mesh, src: ArrayType, dst: ArrayType, fine_plan: list[Collective]):
    """Check ``fine_plan`` (over ``mesh.refined()``) with the verified checker,
    over the coarsest refinement of ``mesh`` that can state it; return the Plan.

    Raises :class:`~verishard.errors.PlanError` when the checker rejects it.

    >>> m = Mesh.parse("x=2")
    >>> p = express(m, ArrayType.parse("[2{x}4]", m), ArrayType.parse("[4]", m), [AllGather(0, "x")])
    >>> p.collectives, p.peak, p.guaranteed
    ((AllGather(dim=0, axes=('x',)),), 4, None)
    """
    from ..plan import express  # the synthesizer's own coarsening + check
    return express(mesh, src, dst, mesh.refined(), list(fine_plan))

