"""An independent plain-Python model of the uneven typing rules
(``coq/theories/Uneven.v`` ``ustep`` plus ``Uchecker.ucstep``'s permute) and
a brute-force search for the least peak padded buffer of any plan.

A type is a tuple of dimensions ``(g, axes)`` with ``axes`` a tuple of mesh
part indices, major to minor. Block size ``ceil(g / n)``, ``n`` the product
of the axes' sizes. ``split_ok(N, C, g)``: ``N`` divides ``C`` or ``g <= C``.
"""

from __future__ import annotations

import heapq
import itertools
from functools import lru_cache


def nprod(sizes, axes) -> int:
    n = 1
    for a in axes:
        n *= sizes[a]
    return n


def csize(g: int, n: int) -> int:
    return -(-g // n)


def split_ok(N: int, C: int, g: int) -> bool:
    return C % N == 0 or g <= C


def padded_size(sizes, t) -> int:
    s = 1
    for g, axes in t:
        s *= csize(g, nprod(sizes, axes))
    return s


def used(t) -> set[int]:
    return {a for _, axes in t for a in axes}


def all_types(sizes, shape):
    """Every uneven type of global ``shape``: each dimension an ordered list
    of distinct parts, no part twice in the type."""
    parts = list(range(len(sizes)))
    out = []

    def rec(d, free, acc):
        if d == len(shape):
            out.append(tuple(acc))
            return
        for k in range(len(free) + 1):
            for sub in itertools.permutations(free, k):
                rest = [p for p in free if p not in sub]
                rec(d + 1, rest, acc + [(shape[d], tuple(sub))])

    rec(0, parts, [])
    return out


def _seqs(free):
    for k in range(1, len(free) + 1):
        yield from itertools.permutations(free, k)


def steps(sizes, t):
    """Every well-typed step from ``t``: (description, type after)."""
    u = used(t)
    free = [a for a in range(len(sizes)) if a not in u]
    out = []
    for d, (g, axes) in enumerate(t):
        for k in range(1, len(axes) + 1):  # gather the k minor axes
            P, xs = axes[:-k], axes[-k:]
            if split_ok(nprod(sizes, xs), csize(g, nprod(sizes, P)), g):
                out.append((("gather", d, xs), t[:d] + ((g, P),) + t[d + 1:]))
        for xs in _seqs(free):  # slice
            if split_ok(nprod(sizes, xs), csize(g, nprod(sizes, axes)), g):
                out.append((("slice", d, xs), t[:d] + ((g, axes + xs),) + t[d + 1:]))
        for e, (ge, ae) in enumerate(t):  # all-to-all
            if e == d:
                continue
            for k in range(1, len(axes) + 1):
                P, xs = axes[:-k], axes[-k:]
                N = nprod(sizes, xs)
                if split_ok(N, csize(g, nprod(sizes, P)), g) and split_ok(N, csize(ge, nprod(sizes, ae)), ge):
                    v = list(t)
                    v[d] = (g, P)
                    v[e] = (ge, ae + xs)
                    out.append((("alltoall", d, e, xs), tuple(v)))
    return out


def permute_targets(sizes, t, types):
    key = tuple(nprod(sizes, axes) for _, axes in t)
    return [v for v in types if v != t and tuple(nprod(sizes, a) for _, a in v) == key]


def min_peaks(sizes, src, types):
    """For every type reachable from ``src``, the least peak padded buffer of
    any plan from ``src`` to it (Dijkstra on the bottleneck cost)."""
    best = {src: padded_size(sizes, src)}
    heap = [(best[src], src)]
    while heap:
        c, t = heapq.heappop(heap)
        if c > best.get(t, 1 << 62):
            continue
        nxt = [v for _, v in steps(sizes, t)] + permute_targets(sizes, t, types)
        for v in nxt:
            cv = max(c, padded_size(sizes, v))
            if cv < best.get(v, 1 << 62):
                best[v] = cv
                heapq.heappush(heap, (cv, v))
    return best
