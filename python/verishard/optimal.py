"""Branch and bound over all plans within a memory cap: a cheaper plan, or a
certificate that there is none.

:func:`search` is the untrusted half of a traffic certificate; the trusted
half is the verified checker ``Certify.certify`` (``Certify.v``), which
accepts a list of ``(type, potential)`` entries only if every step the rules
accept from a listed type within the cap lowers the potential by at most
what it receives, and the potential of the target is 0. Then every plan the
checker accepts from ``src`` to ``dst`` with every type within the cap
receives at least the potential of ``src`` (``Certifyproof.certify_sound``).
Nothing here needs to be trusted: a wrong certificate is refused there.

>>> from verishard import Mesh, ArrayType, plan
>>> m = Mesh.parse("x=2,y=3")
>>> p = plan(m, "[3{x}6]", "[2{y}6]")
>>> r = search(p.mesh, p.src, p.dst, p.traffic, p.bound)
>>> r.better is None, r.certified, r.entries
(True, 2, ())
>>> src, dst = ArrayType.parse("[9, 2{y}6, 2]", "x=2,y=3"), ArrayType.parse("[3{y}9, 3{x}6, 2]", "x=2,y=3")
>>> r = search(src.mesh, src, dst, 30, max(src.size, dst.size))
>>> [str(c) for c in r.better], r.better_traffic, r.certified, len(r.entries)
(['DynSlice(2, x)', 'AllToAll(1->0, y)', 'AllToAll(2->1, x)'], 21, 21, 3)
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .collectives import AllGather, AllPermute, AllToAll, Collective, DynSlice
from .errors import ShardingError
from .limits import CORE_INT_LIMIT, MAX_ELEMENTS, check_int
from .mesh import Mesh
from .sharding import ArrayType

# A type inside the search: per dimension, its part indices (major first).
Raw = tuple[tuple[int, ...], ...]

# Devices beyond which the vectorised lower bound (one vector per device) is refused.
MAX_SEARCH_DEVICES = 2**16


@dataclass(frozen=True)
class Search:
    """What :func:`search` found.

    ``entries``: the certificate (``Certify.certify``'s list), proving that no
    plan within the cap receives less than ``certified``; None when the
    search gave up. ``certified`` is the ``traffic`` asked about when no
    cheaper plan exists, else ``better_traffic``: the cheaper plan found is
    then a least-traffic plan within the cap, and the same search certifies
    it (see :func:`search`). ``better``: that plan (verishard collectives),
    else None. ``settled``: types settled. ``gave_up``: why there is no
    answer (None when there is one). ``steps_to_check``: the legal steps
    the checker will try from the entries (permute targets included where
    it tries them), a measure of its work.
    """

    entries: tuple[tuple[ArrayType, int], ...] | None
    certified: int | None
    better: tuple[Collective, ...] | None
    better_traffic: int | None
    settled: int
    seconds: float
    gave_up: str | None = None
    steps_to_check: int = 0


class _Space:
    """The types of one problem and what the search asks about them: sizes,
    legal steps (``Rules.apply``, ``Checker.recv``) and the transfer lower
    bound to ``dst`` (``Traffic.lower_bound``), cached because the search
    asks again and again."""

    def __init__(self, sizes: tuple[int, ...], gshape: tuple[int, ...], dst: Raw):
        self.sizes, self.gshape, self.dst = sizes, gshape, dst
        self.rank = len(gshape)
        # every device's coordinate on every part (the order of devices is irrelevant: a max is taken)
        self.coords = np.indices(sizes).reshape(len(sizes), -1).astype(np.int64)
        self.dst_size = self.size(dst)
        self._dst_starts = [self._starts(d, A) for d, A in enumerate(dst)]
        self._overlaps: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        self._lbs: dict[Raw, int] = {}
        self._arrangements: dict[tuple[tuple[int, ...], int], list[tuple[tuple[int, ...], int]]] = {}
        self._classes: dict[tuple[int, ...], list[Raw]] = {}
        self._class_lbs: dict[tuple[int, ...], int] = {}

    def group(self, parts: tuple[int, ...]) -> int:
        return math.prod(self.sizes[p] for p in parts)

    def lshape(self, t: Raw) -> tuple[int, ...]:
        return tuple(g // self.group(A) for g, A in zip(self.gshape, t))

    def size(self, t: Raw) -> int:
        return math.prod(self.lshape(t))

    # --- the lower bound, vectorised over devices ---------------------------

    def _starts(self, d: int, parts: tuple[int, ...]) -> np.ndarray:
        """Every device's block start in dimension ``d`` sharded by ``parts``
        (``Types.gidx _ _ c 0``: mixed radix over the parts times the local size)."""
        idx = np.zeros(self.coords.shape[1], dtype=np.int64)
        for p in parts:
            idx = idx * self.sizes[p] + self.coords[p]
        return idx * (self.gshape[d] // self.group(parts))

    def _overlap(self, d: int, parts: tuple[int, ...]) -> np.ndarray:
        """Per device, the overlap in dimension ``d`` of its block under
        ``parts`` and under ``dst`` (``Traffic.overlap``), cached per
        (dimension, parts): types share dimensions."""
        key = (d, parts)
        got = self._overlaps.get(key)
        if got is None:
            s, l = self._starts(d, parts), self.gshape[d] // self.group(parts)
            s2, l2 = self._dst_starts[d], self.gshape[d] // self.group(self.dst[d])
            got = np.maximum(np.minimum(s + l, s2 + l2) - np.maximum(s, s2), 0)
            self._overlaps[key] = got
        return got

    def lower_bound(self, t: Raw) -> int:
        """``Traffic.lower_bound t dst``: the most any device lacks of its ``dst`` block."""
        lb = self._lbs.get(t)
        if lb is None:
            kept = self._overlap(0, t[0])
            for d in range(1, self.rank):
                kept = kept * self._overlap(d, t[d])
            lb = self.dst_size - int(kept.min())
            self._lbs[t] = lb
        return lb

    # --- legal steps -------------------------------------------------------------

    def arrangements(self, pool: tuple[int, ...], local: int) -> list[tuple[tuple[int, ...], int]]:
        """Non-empty ordered lists of distinct parts of ``pool`` whose group
        size divides ``local``, with that size (a prefix of such a list is one
        too, so the recursion stops at the first that does not divide)."""
        key = (pool, local)
        got = self._arrangements.get(key)
        if got is None:
            got = []

            def rec(prefix: tuple[int, ...], n: int, rest: tuple[int, ...]) -> None:
                for i, p in enumerate(rest):
                    m = n * self.sizes[p]
                    if local % m == 0:
                        got.append((prefix + (p,), m))
                        rec(prefix + (p,), m, rest[:i] + rest[i + 1:])

            rec((), 1, pool)
            self._arrangements[key] = got
        return got

    def steps(self, t: Raw) -> Iterator[tuple[tuple, Raw, int, int]]:
        """Every slice, gather and all-to-all ``Rules.apply`` accepts from
        ``t``: ``(step, type after, Checker.recv, size after)``. Permutes go
        through :meth:`shape_class` (one hub per local shape, see :func:`_dijkstra`)."""
        s, ls = self.size(t), self.lshape(t)
        used = {p for A in t for p in A}
        pool = tuple(p for p in range(len(self.sizes)) if p not in used)
        for d, A in enumerate(t):
            for xs, n in self.arrangements(pool, ls[d]):
                yield ("S", d, xs), t[:d] + (A + xs,) + t[d + 1:], 0, s // n
            for j in range(1, len(A) + 1):
                xs, rest = A[len(A) - j:], A[:len(A) - j]
                n = self.group(xs)
                yield ("G", d, xs), t[:d] + (rest,) + t[d + 1:], (n - 1) * s, s * n
                for e in range(self.rank):
                    if e != d and ls[e] % n == 0:
                        v = list(t)
                        v[d], v[e] = rest, t[e] + xs
                        yield ("A", d, e, xs), tuple(v), s - s // n, s

    def shape_class(self, ls: tuple[int, ...]) -> list[Raw]:
        """Every well-formed type of local shape ``ls`` (the targets
        ``Rules.apply`` accepts for a permute): each part goes to no
        dimension or to one whose remaining group it divides, then every
        order within each dimension. Enumerated once per local shape."""
        got = self._classes.get(ls)
        if got is None:
            got = []
            k = len(self.sizes)

            def rec(p: int, dims: list[list[int]], rem: list[int]) -> None:
                if p == k:
                    if all(r == 1 for r in rem):
                        got.extend(itertools.product(*(itertools.permutations(D) for D in dims)))
                    return
                rec(p + 1, dims, rem)
                for d in range(self.rank):
                    if rem[d] % self.sizes[p] == 0:
                        dims[d].append(p)
                        rem[d] //= self.sizes[p]
                        rec(p + 1, dims, rem)
                        rem[d] *= self.sizes[p]
                        dims[d].pop()

            rec(0, [[] for _ in range(self.rank)], [g // l for g, l in zip(self.gshape, ls)])
            self._classes[ls] = got
        return got

    def class_lower_bound(self, ls: tuple[int, ...]) -> int:
        """The least lower bound over the class: the hub's, for pruning."""
        got = self._class_lbs.get(ls)
        if got is None:
            got = min(self.lower_bound(v) for v in self.shape_class(ls))
            self._class_lbs[ls] = got
        return got


class _GaveUp(Exception):
    pass


def _dijkstra(space: _Space, src: Raw, T: int, cap: int, max_states: int, deadline: float):
    """Dijkstra from ``src`` over types within ``cap``, edges weighted by
    ``Checker.recv``, keeping only the edges ``u -> v`` with
    ``g(u) + w + LB(v) < T`` (``LB = Traffic.lower_bound _ dst``). Stops
    when ``dst`` is settled, else when the queue is empty.

    Permutes: from ``u`` every permute to another type receives ``size(u)``
    (with no part of size 1, ``Checker.moves`` is false only for the
    identity), so they go through one hub node per local shape: ``u -> hub``
    costs ``size(u)``, ``hub -> v`` costs 0 for every ``v`` of that shape.
    A path through the hub is exactly one ``AllPermute``; the hub is pushed
    when ``g(u) + size(u) + min LB over the class < T``.

    Returns the settled types with their distances, in settling order, the
    predecessor map, and ``dst``'s distance (None when not reached)."""
    dist: dict = {src: 0}
    prev: dict = {src: None}
    heap = [(0, 0, src)] if space.lower_bound(src) < T else []
    tick = itertools.count(1)
    settled: list[tuple[Raw, int]] = []
    lb = space.lower_bound
    while heap:
        g, _, node = heapq.heappop(heap)
        if g > dist[node]:
            continue
        if node[0] == "hub":
            for v in space.shape_class(node[1]):
                if g + lb(v) < T and g < dist.get(v, T):
                    dist[v], prev[v] = g, (node, ("P", v))
                    heapq.heappush(heap, (g, next(tick), v))
            continue
        settled.append((node, g))
        if node == space.dst:
            return settled, prev, g
        if len(settled) >= max_states:
            raise _GaveUp(f"more than {max_states} states")
        if len(settled) % 64 == 0 and time.perf_counter() > deadline:
            raise _GaveUp("out of time")
        for step, v, w, sv in space.steps(node):
            nd = g + w
            if sv <= cap and nd < dist.get(v, T) and nd + lb(v) < T:
                dist[v], prev[v] = nd, (node, step)
                heapq.heappush(heap, (nd, next(tick), v))
        s = space.size(node)
        nd = g + s
        if nd < T:
            hub = ("hub", space.lshape(node))
            if nd < dist.get(hub, T) and nd + space.class_lower_bound(hub[1]) < T:
                dist[hub], prev[hub] = nd, (node, None)
                heapq.heappush(heap, (nd, next(tick), hub))
    return settled, prev, None


def _recheck(space: _Space, listed: dict[Raw, int], cap: int) -> int:
    """Re-check the certificate's step conditions (a bug in the search would
    make the verified checker refuse it; this says where) and count the
    steps the checker tries:
    every legal step from every entry, and every permute target from the
    entries whose figure exceeds their size (``Certify.entry_ok``).

    No entry could be left out to spare the checker work: a step lowers no
    device's need by more than it receives (``Trafficproof.missing_step``),
    so ``LB(p) <= w + LB(u)`` for an entry ``u`` reached from ``p`` by a step
    receiving ``w``; then ``p`` is listed too (its figure is ``du + w``) and
    its step needs ``u``'s figure: every entry is on a chain of needed
    entries from ``src`` (on the bench, trimming removed nothing)."""
    lb = space.lower_bound
    pot = lambda v: listed.get(v, lb(v))
    work, most = 0, {}
    for u, du in listed.items():
        if space.size(u) > cap:
            continue
        for _, v, w, sv in space.steps(u):
            work += 1
            assert sv > cap or du - w <= pot(v), f"bug in verishard.optimal: step {u} -> {v}"
        s, ls = space.size(u), space.lshape(u)
        if du > s:
            work += len(space.shape_class(ls))
            most[ls] = max(most.get(ls, 0), du - s)
    for ls, R in most.items():   # a permute from the class needs R <= pot(v) for every v in it
        for v in space.shape_class(ls):
            assert R <= pot(v), f"bug in verishard.optimal: permute to {v}"
    return work


def _path(prev: dict, end: Raw) -> list[tuple]:
    """The steps from the source to ``end`` (the hub contributes its permute's target)."""
    out, node = [], end
    while prev[node] is not None:
        node, step = prev[node]
        if step is not None:
            out.append(step)
    out.reverse()
    return out


def _collective(mesh: Mesh, gshape: tuple[int, ...], step: tuple) -> Collective:
    """A step as a verishard collective, its axes named as the mesh prints them."""
    kind = step[0]
    if kind == "S":
        return DynSlice(step[1], mesh.names(step[2]))
    if kind == "G":
        return AllGather(step[1], mesh.names(step[2]))
    if kind == "A":
        return AllToAll(step[1], step[2], mesh.names(step[3]))
    return AllPermute(ArrayType.from_parts(mesh, gshape, step[1]))


def _problem(mesh: Mesh, src: ArrayType, dst: ArrayType) -> None:
    """Refuse what the certificate's model does not cover, with a clear error."""
    if not isinstance(mesh, Mesh):
        raise ShardingError(f"expected a Mesh, not {type(mesh).__name__}")
    for what, t in (("source", src), ("target", dst)):
        if not isinstance(t, ArrayType):
            raise ShardingError(f"{what} must be an ArrayType, not {type(t).__name__}")
        if t.mesh != mesh:
            raise ShardingError(f"{what} {t} is over mesh {t.mesh}, not {mesh}")
        if t.partial:
            raise ShardingError(f"{what} {t} has pending axes; certificates are for plain types")
        t.require_even(f"(certificates are for even types; {what} {t})")
    if src.global_shape != dst.global_shape:
        raise ShardingError(f"global shapes differ: source {src} has {src.global_shape}, "
                            f"target {dst} has {dst.global_shape}")


def onto(t: ArrayType, fine: Mesh, groups: tuple[tuple[int, ...], ...]) -> ArrayType:
    """``t`` over ``fine``, each part of its mesh replaced by its sub-axes
    ``groups[part]`` there (``Refine.rtype``; see :meth:`Mesh.prime_parts`).

    >>> m = Mesh.parse("u=1,x=4")
    >>> fine, groups = m.prime_parts()
    >>> onto(ArrayType.parse("[2{u,x}8]", m), fine, groups)
    [2{x}8]
    """
    return ArrayType.from_parts(fine, t.global_shape,
                                [tuple(q for p in d.parts for q in groups[p]) for d in t.dims])


def search(mesh: Mesh, src: ArrayType, dst: ArrayType, traffic: int, cap: int, *,
           max_states: int = 200_000, max_seconds: float = 60.0) -> Search:
    """A plan from ``src`` to ``dst`` within ``cap`` receiving less than
    ``traffic`` (``T``), or a certificate that none exists.

    Dijkstra from ``src`` (:func:`_dijkstra`) settles, in order of distance
    ``g``, every type ``v`` within the cap reachable along steps that keep
    ``g + LB < T``, relaxing every step the rules accept from each. When it
    settles ``dst``, ``g(dst)`` is the least traffic of any plan within the
    cap: an optimal plan receiving less than ``T`` keeps ``g + LB < T`` at
    every type along it (``LB`` is a lower bound on what remains,
    ``Trafficproof``), so no step of it is pruned. That plan is returned as
    ``better``.

    The certificate for a figure ``F`` (``T``, or ``g(dst)`` when ``dst``
    was settled) lists ``(u, F - g(u))`` for every settled ``u`` with
    ``g(u) < F`` and ``F - g(u) > LB(u)``, in settling order (``src``
    first). Why ``Certify.certify`` accepts it (no part of size 1):

    * ``pot(dst) = 0``: ``dst`` is not listed (it would need ``g(dst) < F``),
      and ``LB(dst) = 0``.
    * ``F <= pot(src)``: ``src`` is listed at ``F``, or ``LB(src) >= F``.
    * an entry's figure is its potential: each type is listed once.
    * a step ``u -> v`` within the cap receiving ``w``, with ``du = F - g(u)``:
      if ``g(u) + w + LB(v) >= F`` then ``du <= w + LB(v) <= w + pot(v)``
      (a listed figure exceeds ``LB``). Otherwise (``F <= T``) the step was
      relaxed (for a permute: the hub was pushed at most ``g(u) + w`` and
      relaxes ``v`` at its own distance), so ``v`` was settled before ``dst``
      (its distance is below ``F``) with ``g(v) <= g(u) + w``, and
      ``pot(v) >= F - g(v)`` whether listed or not, so ``du <= w + pot(v)``.

    :func:`_recheck` checks these step conditions again.

    Gives up (``gave_up`` says why, ``entries`` None) after ``max_states``
    settled types or ``max_seconds``, on a mesh with a part of size 1 (the
    checker refuses those: there a permute can move nothing yet change the
    type), above ``MAX_SEARCH_DEVICES`` devices, or when ``src`` is above
    the cap (no plan is within it). Raises :class:`ShardingError` for
    types over another mesh, partial or uneven types, or different global
    shapes.
    """
    t0 = time.perf_counter()
    _problem(mesh, src, dst)
    T = check_int(traffic, "traffic", high=CORE_INT_LIMIT - 1)
    cap = check_int(cap, "cap", high=MAX_ELEMENTS)
    mesh = src.mesh   # the entries' types are over the very mesh object of src

    def result(**kw) -> Search:
        base = dict(entries=None, certified=None, better=None, better_traffic=None, settled=0)
        base.update(kw)
        return Search(seconds=time.perf_counter() - t0, **base)

    if any(s == 1 for s in mesh.part_sizes):
        return result(gave_up="a part of size 1 (the certificate checker refuses such meshes; search over "
                                   "Mesh.prime_parts())")
    if mesh.num_devices > MAX_SEARCH_DEVICES:
        return result(gave_up=f"more than {MAX_SEARCH_DEVICES} devices")
    if src.size > cap:
        return result(gave_up=f"the source is above the cap {cap}: no plan is within it")
    gshape = src.global_shape
    raw_src = tuple(d.parts for d in src.dims)
    space = _Space(mesh.part_sizes, gshape, tuple(d.parts for d in dst.dims))
    try:
        settled, prev, reached = _dijkstra(space, raw_src, T, cap, max_states, t0 + max_seconds)
    except _GaveUp as e:
        return result(gave_up=str(e))
    F = T if reached is None else reached
    listed = {u: F - g for u, g in settled if F - g > space.lower_bound(u)}
    work = _recheck(space, listed, cap)
    entries = tuple((src if u == raw_src else ArrayType.from_parts(mesh, gshape, u), du)
                    for u, du in listed.items())
    better = None
    if reached is not None:
        better = tuple(_collective(mesh, gshape, c) for c in _path(prev, space.dst))
    return result(entries=entries, certified=F, better=better, better_traffic=reached, settled=len(settled),
                  steps_to_check=work)


__all__ = ["Search", "search", "onto", "MAX_SEARCH_DEVICES"]
