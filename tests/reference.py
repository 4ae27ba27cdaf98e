"""An independent, plain-Python reference of the redistribution model
(docs/model.md). It does not import verishard; everything works
on plain tuples over the flat mesh of parts:

    mesh        n = (n_0, ..., n_{k-1})                 part sizes; axis ids are indices
    type        t = ((g, (a_1, ..., a_m)), ...)         per dimension: global size, axes major->minor
    collective  ('gather', d, axes)                     AllGather: remove suffix `axes` of dim d
                ('slice', d, axes)                      DynSlice: append replicated `axes` to dim d
                ('a2a', d, e, axes)                     AllToAll: move suffix `axes` of d to minor end of e
                ('permute', t2)                         AllPermute to t2
    device      a rank r in range(prod(n)); coords row-major over the parts

Typing functions return ``(new_type, None)`` or ``(None, reason)``.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np

# ---------------------------------------------------------------------------
# devices


def num_devices(n):
    return prod(n)


def coords(n, r):
    out = []
    for size in reversed(n):
        r, c = divmod(r, size)
        out.append(c)
    return tuple(reversed(out))


def rank_of(n, c):
    r = 0
    for size, x in zip(n, c):
        r = r * size + x
    return r


def radix(n, c, axes):
    """Mixed-radix number of coordinates ``c`` on ``axes`` (major first)."""
    b = 0
    for a in axes:
        b = b * n[a] + c[a]
    return b


def group_size(n, axes):
    return prod(n[a] for a in axes)


# ---------------------------------------------------------------------------
# types


def wf(n, t):
    """None if ``t`` is well-formed over mesh ``n``, else a reason."""
    if len(t) == 0:
        return "no dimensions"
    seen = set()
    for i, (g, axes) in enumerate(t):
        if g < 1:
            return f"dim {i}: global size {g} < 1"
        for a in axes:
            if not 0 <= a < len(n):
                return f"dim {i}: unknown axis {a}"
            if a in seen:
                return f"axis {a} appears twice"
            seen.add(a)
        if g % group_size(n, axes):
            return f"dim {i}: {g} not divisible by {group_size(n, axes)}"
    return None


def global_shape(t):
    return tuple(g for g, _ in t)


def local_shape(n, t):
    return tuple(g // group_size(n, axes) for g, axes in t)


def size(n, t):
    return prod(local_shape(n, t))


def used(t):
    return {a for _, axes in t for a in axes}


def block(n, t, c):
    """Block numbers of device with coords ``c``, per dimension (spec formula)."""
    return tuple(radix(n, c, axes) for _, axes in t)


def box(n, t, c):
    """Per dimension ``(start, stop)`` of the global indices device ``c`` holds."""
    return tuple((b * l, b * l + l) for b, l in zip(block(n, t, c), local_shape(n, t)))


# ---------------------------------------------------------------------------
# typing rules


def _suffix(axes, s):
    return len(s) > 0 and len(s) <= len(axes) and tuple(axes[len(axes) - len(s):]) == tuple(s)


def apply(n, t, coll):
    """Type after ``coll``, as ``(t2, None)``, or ``(None, reason)``."""
    kind = coll[0]
    r = len(t)
    if kind == "gather":
        _, d, s = coll
        if not 0 <= d < r:
            return None, f"dimension {d} out of range"
        g, axes = t[d]
        if not _suffix(axes, s):
            return None, f"axes {s} are not a non-empty suffix of dim {d} axes {axes}"
        t2 = list(t)
        t2[d] = (g, tuple(axes[:len(axes) - len(s)]))
        return tuple(t2), None
    if kind == "slice":
        _, d, s = coll
        if not 0 <= d < r:
            return None, f"dimension {d} out of range"
        if len(s) == 0:
            return None, "no axes"
        if len(set(s)) != len(s) or any(not 0 <= a < len(n) for a in s):
            return None, f"axes {s} are not distinct mesh axes"
        if used(t) & set(s):
            return None, f"axes {s} are not all replicated"
        g, axes = t[d]
        if local_shape(n, t)[d] % group_size(n, s):
            return None, f"{group_size(n, s)} does not divide local size of dim {d}"
        t2 = list(t)
        t2[d] = (g, tuple(axes) + tuple(s))
        return tuple(t2), None
    if kind == "a2a":
        _, d, e, s = coll
        if not (0 <= d < r and 0 <= e < r) or d == e:
            return None, f"bad dimensions {d}->{e}"
        gd, ad = t[d]
        ge, ae = t[e]
        if not _suffix(ad, s):
            return None, f"axes {s} are not a non-empty suffix of dim {d} axes {ad}"
        if local_shape(n, t)[e] % group_size(n, s):
            return None, f"{group_size(n, s)} does not divide local size of dim {e}"
        t2 = list(t)
        t2[d] = (gd, tuple(ad[:len(ad) - len(s)]))
        t2[e] = (ge, tuple(ae) + tuple(s))
        return tuple(t2), None
    if kind == "permute":
        t2 = coll[1]
        why = wf(n, t2)
        if why:
            return None, f"target not well-formed: {why}"
        if global_shape(t2) != global_shape(t):
            return None, "global shapes differ"
        if local_shape(n, t2) != local_shape(n, t):
            return None, "local shapes differ"
        return t2, None
    return None, f"unknown collective {kind!r}"


def permutation(n, t, t2):
    """p with block(t, p(c)) = block(t2, c) for all c, with as many fixed points as possible.

    ``p[c]`` is the rank that sends its local array to rank ``c``.
    """
    N = num_devices(n)
    cs = [coords(n, r) for r in range(N)]
    have = [block(n, t, c) for c in cs]
    need = [block(n, t2, c) for c in cs]
    p = [None] * N
    free = {}
    for r in range(N):
        if have[r] == need[r]:
            p[r] = r
        else:
            free.setdefault(have[r], []).append(r)
    for r in range(N):
        if p[r] is None:
            p[r] = free[need[r]].pop(0)
    assert sorted(p) == list(range(N))
    return p


def received(n, t, coll):
    """Max over devices of the elements received in a well-typed step (spec table)."""
    kind = coll[0]
    if kind == "gather":
        return (group_size(n, coll[2]) - 1) * size(n, t)
    if kind == "slice":
        return 0
    if kind == "a2a":
        N = group_size(n, coll[3])
        return (N - 1) * size(n, t) // N
    p = permutation(n, t, coll[1])
    return size(n, t) if any(p[c] != c for c in range(len(p))) else 0


def check(n, src, dst, plan):
    """``('ok', types, recvs, peak)`` or ``('error', step, reason)``.

    Step 0 is the source/target themselves, step i the i-th collective; a plan
    that is well typed but does not end at ``dst`` is reported at step len(plan).
    """
    for what, t in (("source", src), ("target", dst)):
        why = wf(n, t)
        if why:
            return ("error", 0, f"{what}: {why}")
    if global_shape(src) != global_shape(dst):
        return ("error", 0, "source and target global shapes differ")
    types, recvs = [src], []
    for i, coll in enumerate(plan, 1):
        t2, why = apply(n, types[-1], coll)
        if why:
            return ("error", i, why)
        recvs.append(received(n, types[-1], coll))
        types.append(t2)
    if types[-1] != dst:
        return ("error", len(plan), f"plan ends at {types[-1]}, not the target")
    return ("ok", types, recvs, peak(n, types))


def peak(n, types):
    return max(size(n, t) for t in types)


def lower_bound(n, src, dst):
    """(max over devices, sum over devices) of elements a device must receive."""
    per = []
    for r in range(num_devices(n)):
        c = coords(n, r)
        a, b = box(n, src, c), box(n, dst, c)
        inter = prod(max(0, min(x1, y1) - max(x0, y0)) for (x0, x1), (y0, y1) in zip(a, b))
        per.append(prod(hi - lo for lo, hi in b) - inter)
    return max(per), sum(per)


# ---------------------------------------------------------------------------
# data movement


def distribute(n, A, t):
    """Local arrays of every rank for global array ``A`` distributed as ``t``."""
    out = []
    for r in range(num_devices(n)):
        idx = tuple(slice(lo, hi) for lo, hi in box(n, t, coords(n, r)))
        out.append(np.array(A[idx]))
    return out


def _with(c, axes, k, n):
    """Coordinates ``c`` with its coordinates on ``axes`` set to mixed-radix ``k``."""
    c = list(c)
    for a in reversed(axes):
        k, c[a] = divmod(k, n[a])
    return tuple(c)


def _piece(x, axis, k, N):
    l = x.shape[axis] // N
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(k * l, (k + 1) * l)
    return x[tuple(idx)]


def simulate(n, t, coll, local):
    """Apply a well-typed collective to per-rank local arrays, as the spec describes."""
    N_dev = num_devices(n)
    out = []
    kind = coll[0]
    for r in range(N_dev):
        c = coords(n, r)
        if kind == "gather":
            _, d, s = coll
            N = group_size(n, s)
            out.append(np.concatenate([local[rank_of(n, _with(c, s, k, n))] for k in range(N)], axis=d))
        elif kind == "slice":
            _, d, s = coll
            out.append(np.array(_piece(local[r], d, radix(n, c, s), group_size(n, s))))
        elif kind == "a2a":
            _, d, e, s = coll
            N = group_size(n, s)
            me = radix(n, c, s)
            pieces = [_piece(local[rank_of(n, _with(c, s, j, n))], e, me, N) for j in range(N)]
            out.append(np.concatenate(pieces, axis=d))
        elif kind == "permute":
            p = permutation(n, t, coll[1])
            out.append(np.array(local[p[r]]))
        else:
            raise ValueError(kind)
    return out


# ---------------------------------------------------------------------------
# enumeration (for tests)


def all_types(n, gshape):
    """Every well-formed type over mesh ``n`` with global shape ``gshape``."""
    r, k = len(gshape), len(n)
    out = []
    for assign in itertools.product(range(r + 1), repeat=k):   # r means replicated
        groups = [[a for a in range(k) if assign[a] == d] for d in range(r)]
        for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
            t = tuple((g, tuple(o)) for g, o in zip(gshape, orders))
            if wf(n, t) is None:
                out.append(t)
    return out


def well_typed(n, t, with_permutes=True):
    """Every well-typed collective from ``t`` (permutes: to every other type of the same local shape)."""
    r = len(t)
    free = [a for a in range(len(n)) if a not in used(t)]
    cands = []
    for d, (g, axes) in enumerate(t):
        for i in range(len(axes)):
            cands.append(("gather", d, tuple(axes[i:])))
            for e in range(r):
                if e != d:
                    cands.append(("a2a", d, e, tuple(axes[i:])))
        for m in range(1, len(free) + 1):
            for s in itertools.permutations(free, m):
                cands.append(("slice", d, s))
    if with_permutes:
        for t2 in all_types(n, global_shape(t)):
            cands.append(("permute", t2))
    return [c for c in cands if apply(n, t, c)[1] is None]
